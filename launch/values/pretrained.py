"""`--init-from`: the checkpoint a run fine-tunes from, a name from the catalogue of Model
Garden's published checkpoints (pretrained.yaml) or a checkpoint of your own, checked against
the experiment before anything is built."""

from __future__ import annotations

import dataclasses
from functools import cache
from pathlib import Path

import yaml

from launch.errors import InputError
from trainer.model.experiments import EXPERIMENTS
from trainer.model.experiments import fields as experiment_fields

CATALOGUE_FILE = Path(__file__).with_name("pretrained.yaml")
HOLDS = ("backbone", "detector")
ARCHIVE_SUFFIX = ".tar.gz"


@dataclasses.dataclass(frozen=True)
class Pretrained:
    name: str
    holds: str  # backbone: an ImageNet classifier; detector: a COCO detector
    path: str  # a gs:// checkpoint prefix, or an https:// .tar.gz the trainer extracts
    backbone: str  # e.g. resnet-50, as trainer/model/experiments/fields.json words it
    about: str
    source: str  # the page the path was found on
    decoder: str | None = None  # a detector's: e.g. fpn-256-l3-7

    def fits(self, experiment: str) -> bool:
        return experiment_fields.model(experiment)["backbone"] == self.backbone

    def restores(self, experiment: str) -> str:
        """The trainer's --init_checkpoint_type: a detector's decoder too when it matches."""
        if self.holds == "detector" and \
                experiment_fields.model(experiment)["decoder"] == self.decoder:
            return "detector"
        return "backbone"


@dataclasses.dataclass(frozen=True)
class Init:
    """What the trainer restores at the start of a run."""

    checkpoint: str  # --init_checkpoint
    type: str  # --init_checkpoint_type: backbone, detector or all


@cache
def _file() -> dict:
    return yaml.safe_load(CATALOGUE_FILE.read_text())


def catalogue() -> dict[str, Pretrained]:
    return {name: Pretrained(name=name, **entry)
            for name, entry in _file()["checkpoints"].items()}


def taken() -> str:
    """The day the catalogue's paths were looked up."""
    return _file()["taken"]


def is_path(text: str) -> bool:
    """A checkpoint of one's own (or an archive URL), rather than a catalogue name."""
    return text.startswith(("gs://", "https://", "/", "./", "../", "~")) or "/" in text


def resolve(init_from: str | None, init_type: str | None, experiment: str,
            customised: bool = False) -> Init | None:
    """`--init-from` and `--init-type` for `experiment`. A catalogue checkpoint must fit the
    experiment's backbone (unless `customised`: config files or overrides may change the
    model, so the trainer checks); a path is taken as it is (`all` unless told)."""
    if not init_from:
        return None
    if is_path(init_from):
        if init_from.startswith("https://") and not init_from.endswith(ARCHIVE_SUFFIX):
            raise InputError(f"--init-from {init_from[:100]}: an https:// checkpoint is a "
                             f"{ARCHIVE_SUFFIX} archive; give gs:// or a local path for "
                             "a checkpoint prefix")
        if init_from.startswith(("gs://", "https://")):
            return Init(init_from, init_type or "all")
        local = Path(init_from).expanduser().absolute()  # as the trainer will find it
        if not (local.is_dir() or Path(f"{local}.index").is_file() or (
                init_from.endswith(ARCHIVE_SUFFIX) and local.is_file())):
            raise InputError(f"--init-from {init_from[:100]}: no checkpoint there (a prefix "
                             "such as .../ckpt-1000 with its .index, or a directory of them)")
        return Init(str(local), init_type or "all")
    known = catalogue()
    if init_from not in known:
        raise InputError(f"--init-from {init_from[:80]!r} is neither a pretrained checkpoint "
                         f"({', '.join(known)}; `invoke models.pretrained`) nor a gs:// or "
                         "local checkpoint path")
    entry = known[init_from]
    if not customised and not entry.fits(experiment):
        fitting = [name for name in experiment_fields.registered() if entry.fits(name)]
        ours = [name for name in fitting if name in EXPERIMENTS]  # the shipped ones first
        named = ours or fitting[:4]
        rest = len(fitting) - len(named)
        more = f" and {rest} of Model Garden's" if rest else ""
        raise InputError(f"--init-from {entry.name} is a {entry.backbone} checkpoint and "
                         f"{experiment} has a {experiment_fields.model(experiment)['backbone']} "
                         f"backbone: choose an experiment with a {entry.backbone} backbone "
                         f"({', '.join(named) or 'none registered'}{more}) or another "
                         "checkpoint (`invoke models.pretrained`)")
    if init_type == "all":
        raise InputError(f"--init-type all restores every layer, but {entry.name} was trained "
                         "on other classes: use backbone or detector")
    if init_type == "detector" and entry.holds != "detector":
        raise InputError(f"--init-type detector: {entry.name} is an ImageNet classifier; "
                         "only its backbone fits a detector (drop --init-type)")
    restores = entry.restores(experiment)
    if init_type == "detector" and restores != "detector" and not customised:
        raise InputError(f"--init-type detector: {entry.name}'s decoder ({entry.decoder}) "
                         f"differs from {experiment}'s "
                         f"({experiment_fields.model(experiment)['decoder']}); drop "
                         "--init-type to restore its backbone alone")
    return Init(entry.path, init_type or restores)


def listing() -> str:
    """`invoke models.pretrained`: each checkpoint, what it holds and the experiments it
    fits, with where its path was found."""
    lines = [f"Model Garden's published checkpoints (looked up {taken()}); "
             "`invoke train --init-from NAME`:"]
    for entry in catalogue().values():
        fits = [name for name in experiment_fields.registered() if entry.fits(name)]
        lines += ["", f"{entry.name}  ({entry.holds}, {entry.backbone}"
                      f"{', ' + entry.decoder if entry.decoder else ''})",
                  f"  {entry.about}",
                  f"  fits: {', '.join(fits) or 'no registered experiment as it is'}",
                  f"  path: {entry.path}", f"  source: {entry.source}"]
    lines += ["", "Or a checkpoint of your own: --init-from gs://BUCKET/runs/RUN_ID/checkpoints "
              "(or a local directory), --init-type all when it has your classes."]
    return "\n".join(lines)
