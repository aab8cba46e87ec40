"""trainer/'s "where to add things" (docs/design/layers.md) as the code holds it: a data
format, a tool flag (a trainer command's `Args` field) and an experiment, each a toy in a
temporary module registered as the page says (a decorator beside it, or the registry's own
line made through the same `Registry` API), go where the real ones go: the toy format
through the real converter into TFRecords, the toy command's field to the trainer's flag, its
help, its bound and the invoke task's flag, the toy experiment to its Model Garden config and
the launcher's override checks. What a test registers is gone after it (`scratch`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from invoke import Context
from PIL import Image

from tests.conftest import trainer_here
from tests.test_coco import examples, values
from trainer import args as trainer_args
from trainer.cli import main as trainer_main
from trainer.cli.main import ERROR_PREFIX
from trainer.common.errors import SettingsError
from trainer.data import formats
from trainer.model import experiments

TOYS = ("toy_format", "toy_command", "toy_experiment")


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The registries as they were after the test, the toy modules forgotten, and
    `tmp_path` importable (where a test writes its toy module)."""
    for registry in (formats.FORMATS, trainer_args.COMMANDS, trainer_main.RUNNERS,
                     experiments.EXPERIMENTS):
        for store in ("_references", "_loaded"):
            monkeypatch.setattr(registry, store, dict(getattr(registry, store)))
    for name in TOYS:
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


# ------------------------------------------------------------------------- a data format

TOY_FORMAT = '''
"""A toy format: boxes.csv beside its images, `image,label,xmin,ymin,xmax,ymax` a row
(pixels), split 70/30 as Pets is."""

import csv

from trainer.common.errors import ConversionError, SettingsError
from trainer.data.annotation import AnnotatedObject, Annotation
from trainer.data.formats import Planned
from trainer.data.planning import Source, SplitPlan, source_ids, split_names

REASONS = {}  # its own report reasons (key -> meaning): none; the core's are reasons.CORE
COLUMNS = ["image", "label", "xmin", "ymin", "xmax", "ymax"]


def plan(source, options):
    if source.data_dir is None:
        raise SettingsError("--format toy needs --data-dir (the directory of boxes.csv)")
    path = source.data_dir / "boxes.csv"
    with path.open(newline="") as file:
        rows = list(csv.reader(file))
    if not rows or rows[0] != COLUMNS:
        raise ConversionError(f"{path}: its first row must be {','.join(COLUMNS)}")
    boxes = {}
    for number, row in enumerate(rows[1:], start=2):
        try:
            name, label, *corners = row
            corners = [float(value) for value in corners]
            assert len(corners) == 4
        except (ValueError, AssertionError):
            raise ConversionError(f"{path} row {number}: not an image, a label and four "
                                  "numbers") from None
        boxes.setdefault(name, []).append(AnnotatedObject(label, *corners))
    root = source.data_dir.resolve()
    ids = source_ids(boxes)
    splits = {split: [Source(name, root / name, None, ids[name], root,
                             annotation=Annotation(name, None, None, tuple(boxes[name])))
                      for name in names]
              for split, names in split_names(sorted(boxes), options.split).items()}
    labels = sorted({box.name for found in boxes.values() for box in found})
    return Planned(SplitPlan(splits), {label: i for i, label in enumerate(labels, start=1)})
'''
SIDES = ("xmin", "ymin", "xmax", "ymax")


def toy_dataset(root: Path) -> dict[str, tuple[str, list[float]]]:
    """Four 64x48 pictures and boxes.csv; each picture's box as the records should hold it
    (fractions of the picture's sides)."""
    root.mkdir()
    rows, wanted = ["image,label,xmin,ymin,xmax,ymax"], {}
    for i in range(4):
        name, label = f"p{i}.jpg", ("cat", "dog")[i % 2]
        Image.new("RGB", (64, 48), (40 * i, 90, 200)).save(root / name)
        rows.append(f"{name},{label},8,{12 + i},40,36")
        wanted[name] = (label, [8 / 64, (12 + i) / 48, 40 / 64, 36 / 48])
    (root / "boxes.csv").write_text("\n".join(rows) + "\n")
    return wanted


def test_a_data_format_is_one_module_and_one_registry_line(scratch, capsys):
    """The toy's module provides `plan` and `REASONS`; its line in FORMATS (as in
    trainer/data/formats/__init__.py) makes it a choice of --format, and the converter's core
    writes its examples: `python -m trainer data convert --format toy`, in this process."""
    (scratch / "toy_format.py").write_text(TOY_FORMAT)
    formats.FORMATS.register_lazy("toy", "toy_format")
    wanted = toy_dataset(scratch / "toy")

    with pytest.raises(SystemExit):
        trainer_args.parse(["data", "convert", "--help"])
    assert "--format {pets,voc,coco,yolo,labelme,cvat,labelstudio,toy}" in capsys.readouterr().out
    out = scratch / "records"
    done = trainer_here("data", "convert", "--format=toy", f"--data_dir={scratch / 'toy'}",
                        f"--output_dir={out}", "--num_shards=1", "--processes=1")
    assert done.returncode == 0
    found = examples(out)  # split 70/30 by the core's seeded shuffle
    assert sorted(split for split, _ in found.values()) == ["train", "train", "val", "val"]
    for name, (label, box) in wanted.items():
        example = found[name][1]
        assert [text.decode() for text in values(example, "image/object/class/text")] == [label]
        assert [values(example, f"image/object/bbox/{side}")[0] for side in SIDES] == \
            pytest.approx(box, abs=1e-6)
    assert (out / "label_map.pbtxt").read_text().count("item") == 2  # cat, dog

    (scratch / "toy" / "boxes.csv").write_text("picture,box\np0.jpg,1 2 3 4\n")
    bad = trainer_here("data", "convert", "--format=toy", f"--data_dir={scratch / 'toy'}",
                       f"--output_dir={scratch / 'bad'}", check=False)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        f"{ERROR_PREFIX}{scratch / 'toy' / 'boxes.csv'}: its first row must be "
        "image,label,xmin,ymin,xmax,ymax"]
    wrong = trainer_here("data", "convert", "--format=tyo", f"--output_dir={out}", check=False)
    assert wrong.returncode == 2 and wrong.stderr.strip().splitlines() == [
        f"{ERROR_PREFIX}--format must be one of pets, voc, coco, yolo, labelme, cvat, "
        "labelstudio, toy, got 'tyo'"]


# ------------------------------------------------------------ a tool flag (and a command)

TOY_COMMAND = '''
"""A toy trainer command: its Args (in trainer/args.py for a real one) and its runner (in
trainer/cli/main.py), each registered by its decorator."""

import dataclasses
from typing import ClassVar

from trainer.args import Args, command
from trainer.cli.main import runs
from trainer.common.options import Bound, option


@command
@dataclasses.dataclass(frozen=True)
class ToyArgs(Args):
    COMMAND: ClassVar[tuple[str, ...]] = ("toy",)
    HELP: ClassVar[str] = "count to --size"

    size: int = option("how far to count", default=3, bound=Bound(minimum=1, maximum=9))


@runs(ToyArgs)
def run_toy(args):
    print(" ".join(str(n) for n in range(1, args.size + 1)))
    return 0
'''


def test_a_tool_flag_is_one_field_of_its_commands_args(scratch, capsys):
    """The toy command's one field is the trainer's `--size` with its help and bound, written
    by `to_argv()` for the launchers, and the invoke task's flag with the same help, read by
    the same number reader (`args_task`): declared once, in the command's `Args`."""
    from launch.cli.taskflags import args_task

    (scratch / "toy_command.py").write_text(TOY_COMMAND)
    import toy_command  # its decorators register the command and its runner

    assert trainer_args.COMMANDS["toy"] is toy_command.ToyArgs
    assert trainer_main.RUNNERS["toy"] is toy_command.run_toy
    assert trainer_here("toy", "--size", "4").stdout == "1 2 3 4\n"
    assert toy_command.ToyArgs(size=5).to_argv() == ["toy", "--size=5"]
    assert trainer_args.parse(["toy", "--size=5"]) == toy_command.ToyArgs(size=5)
    for given, problem in (("0", "at least 1"), ("10", "at most 9")):
        refused = trainer_here("toy", f"--size={given}", check=False)
        assert refused.returncode == 2 and refused.stderr.splitlines() == [
            f"{ERROR_PREFIX}--size must be {problem}, got '{given}'"]
    with pytest.raises(SystemExit):
        trainer_args.parse(["toy", "--help"])
    assert "how far to count" in capsys.readouterr().out

    @args_task(toy_command.ToyArgs)
    def toy(c, args):
        """Counts."""
        return args

    assert toy.help["size"].startswith("how far to count")
    assert toy(Context(), size="7") == toy_command.ToyArgs(size=7)
    with pytest.raises(Exception, match=r"--size must be at most 9, got '12'"):
        toy(Context(), size="12")


# --------------------------------------------------------------------------- an experiment

TOY_EXPERIMENT = '''
"""A toy experiment: one Experiment registered in EXPERIMENTS (a line of the tuple in
trainer/model/experiments/__init__.py for a real one) and its YAML (configs/NAME.yaml for a
real one; beside this module here, since a test writes nothing into the tree)."""

import dataclasses
from pathlib import Path

from trainer.model.experiments import EXPERIMENTS, Experiment


@dataclasses.dataclass(frozen=True)
class Beside(Experiment):
    @property
    def config_file(self):
        return Path(__file__).with_name(f"{self.name}.yaml")


TOY = EXPERIMENTS.register("pets_retinanet_toy")(Beside(
    "pets_retinanet_toy", "retinanet_resnetfpn_coco", "RetinaNet MobileNetV2 at 96 px: a toy"))
'''


def test_an_experiment_is_a_registry_entry_and_its_yaml(scratch, monkeypatch):
    """The toy experiment, chosen with --experiment, is built from its base and its YAML
    (no training); an unknown name is refused with the close matches; and the launcher
    takes it once its fields are recorded (fields.json, `python -m
    trainer.model.experiments.fields`), which is what the recorded fields are for."""
    from official.core import exp_factory

    from launch.errors import InputError
    from launch.values import jobfile
    from trainer.model.experiments import fields
    from trainer.training import settings
    from trainer.training.params import build_params

    monkeypatch.setattr(exp_factory, "_REGISTERED_CONFIGS",
                        dict(exp_factory._REGISTERED_CONFIGS))
    shipped = yaml.safe_load(experiments.EXPERIMENTS["pets_retinanet_mobilenet"]
                             .config_file.read_text())
    shipped["task"]["model"]["input_size"] = [96, 96, 3]
    shipped["trainer"]["train_steps"] = 7
    (scratch / "pets_retinanet_toy.yaml").write_text(yaml.safe_dump(shipped))
    (scratch / "toy_experiment.py").write_text(TOY_EXPERIMENT)
    import toy_experiment  # noqa: F401  (registers it)
    (scratch / "records").mkdir()
    (scratch / "records" / "label_map.pbtxt").write_text(
        "item {\n  id: 1\n  name: 'cat'\n}\nitem {\n  id: 2\n  name: 'dog'\n}\n")

    assert experiments.default_train_steps("pets_retinanet_toy") == 7
    params = build_params(settings.parse(["--experiment=pets_retinanet_toy",
                                          f"--model_dir={scratch / 'model'}",
                                          f"--data_dir={scratch / 'records'}"], {}), "float32")
    assert list(params.task.model.input_size) == [96, 96, 3]
    assert params.trainer.train_steps == 7
    assert params.task.model.num_classes == 3  # the data's two and the background
    assert params.task.model.backbone.mobilenet.model_id == "MobileNetV2"

    with pytest.raises(SettingsError, match=r"^--experiment 'pets_retinanet_tyo' is not "
                                            r"available; .* \(did you mean pets_retinanet_toy"):
        experiments.EXPERIMENTS["pets_retinanet_tyo"]
    refused = trainer_here("--experiment=pets_retinanet_tyo", f"--model_dir={scratch / 'm'}",
                           f"--data_dir={scratch / 'records'}", check=False)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "unknown --experiment 'pets_retinanet_tyo'" in refused.stderr
    assert "(did you mean pets_retinanet_toy" in refused.stderr

    with pytest.raises(InputError, match=r"'pets_retinanet_toy' is not a detection experiment"):
        jobfile.resolve("train", {"experiment": "pets_retinanet_toy"})  # fields.json is stale
    recorded = fields.schema()
    toy_fields = fields.config_fields(exp_factory.get_exp_config("pets_retinanet_toy"))
    monkeypatch.setattr(fields, "schema", lambda: {  # as regenerating fields.json records it
        **recorded, "experiments": [*recorded["experiments"], "pets_retinanet_toy"],
        "fields": {**recorded["fields"], "pets_retinanet_toy": toy_fields}})
    job = jobfile.resolve("train", {"experiment": "pets_retinanet_toy",
                                    "override": ["task.model.head.num_convs=3"]})
    assert jobfile.request(job, "train").args.experiment == "pets_retinanet_toy"
    with pytest.raises(InputError, match=r"pets_retinanet_toy has no field task\.model\.hed"):
        jobfile.resolve("train", {"experiment": "pets_retinanet_toy",
                                  "override": ["task.model.hed.num_convs=3"]})

