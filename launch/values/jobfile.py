"""A job written down once. The options `invoke train`, `tune` and `eval` share are the fields
of `JobFile`: the tasks' flags, their help, the job file's keys and the check of every value
all come from these fields, so a flag and a key never disagree.

    invoke train --job job.yaml --steps 2000   # the file, then the flags over it
    invoke train --job job.yaml --dry-run      # the resolved file, then the request it makes
    invoke train --rerun RUN_ID                # the file an earlier run stored

A file's keys are the flags' names (`machine-type: g2-standard-8`). Evaluation runs on its own
hardware, so eval reads its machine, scheduling and options from the file's `eval:` section
(default: a CPU machine); `tune:` holds the sweep (the sweep file's fields). Nothing here
calls an API or imports a target's modules: executors turn the resolved file into jobs.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from launch.errors import InputError
from launch.values import pretrained
from launch.values.files import read_page
from launch.values.jobs import KINDS, Evaluation, Request, Training, Tuning
from launch.values.resources import (
    HOURS,
    PREEMPTIONS,
    REPLICAS,
    WAIT_HOURS,
    Resources,
    Scheduling,
)
from launch.values.target_names import TARGETS
from trainer.args import TrainArgs
from trainer.common import options as schema
from trainer.common import yamlfile
from trainer.common.errors import SettingsError
from trainer.common.files import VAL
from trainer.data import datasets
from trainer.model import hparams
from trainer.model.experiments import DEFAULT_EXPERIMENT, EXPERIMENTS
from trainer.model.experiments import fields as experiment_fields
from trainer.model.model_dir import other_experiment

TASKS = tuple(KINDS)  # the job kinds' tasks (launch/values/jobs.py), however many
# the tasks this file's fields single out, by their kinds' names: a kind added to KINDS
# changes none of them
TRAIN, TUNE, EVAL = Training.task, Tuning.task, Evaluation.task
TRAINING = frozenset({TRAIN, TUNE})  # a sweep's trials are training runs
EVERY = frozenset(TASKS)
SECTIONS = {EVAL: "eval", TUNE: "tune"}  # a task's own section of the file
MAX_FILE_BYTES = 1 << 20
KEY_VALUE = re.compile(r"(?P<key>[^=]+)=(?P<value>.*)", re.DOTALL)
COMMA_LISTS = ("regions", "fallback", "capacity")  # one flag, values separated by commas


class JobFileError(InputError):
    """A job file or flag value that cannot make a job; the message names the flag."""


def option(help: str, *, lands: str | None = None, checked_as: tuple[type, str] | None = None,
           tasks: frozenset[str] = EVERY, section: str | None = None, path: bool = False,
           **more: Any) -> Any:
    """A field that is a flag of each task in `tasks` and a key of the job file (`trainer.
    options`' one schema). `lands`: the `TrainArgs` field its value becomes in a request's
    args (`request()` reads it here, not from a hand-written mapping), whose bound and
    choices it takes; `section`: the task that reads it from its own section of the file
    (eval's machine is not training's; tune's sweep); `path`: its value may name a file or
    directory on this machine (a rerun checks it); `checked_as`: a trainer field whose checks
    it takes though the request sets that field otherwise (--init-type: pretrained.py)."""
    checked_as = checked_as or ((TrainArgs, lands) if lands else None)
    return schema.option(help, checked_as=checked_as, tasks=tasks, section=section, path=path,
                         lands=lands, **more)


@dataclasses.dataclass(frozen=True)
class JobFile:
    """What a researcher decides about a run, the same for every target."""

    target: str = option(f"where it runs: {' or '.join(TARGETS)}", default=next(iter(TARGETS)),
                         choices=TARGETS.keys())  # the registry's names, as it holds them
    experiment: str = option("the model: " + ", ".join(EXPERIMENTS) + ", or a Model "
                             "Garden detection experiment", default=DEFAULT_EXPERIMENT,
                             lands="experiment")
    data_dir: str | None = option("converted TFRecords, local or gs:// (default: "
                                  "work/records; on Vertex AI gs://BUCKET/records; eval: "
                                  "the run's own)", path=True, lands="data_dir")
    dataset: str | None = option("a named dataset in the bucket (`invoke data.list`), "
                                 "instead of --data-dir: NAME, the version its manifest names "
                                 "when the job is launched, or NAME@VERSION (a run's job "
                                 "file records the version it read)")
    model_dir: str | None = option("local: checkpoints and summaries (default: work/model; "
                                   "tune: the sweep's directory, work/sweep)", path=True)
    run_id: str | None = option("the run's name: gs://BUCKET/runs/RUN_ID (default: the "
                                "experiment and the time)")
    region: str | None = option("Vertex AI region (default: the infra outputs')")
    image: str | None = option("an Artifact Registry image to run (default: these sources' "
                               "content-hash tag, built first if missing)")
    init_from: str | None = option("fine-tune from a pretrained checkpoint: a name from "
                                   "`invoke models.pretrained`, or a gs:// or local "
                                   "checkpoint prefix or directory", tasks=TRAINING, path=True)
    init_type: str | None = option("what --init-from holds: backbone (an ImageNet "
                                   "classifier), detector (a detector of other classes: "
                                   "backbone and decoder are restored) or all (your own run's "
                                   "classes) (default: the catalogue's; all for a path)",
                                   tasks=TRAINING,
                                   checked_as=(TrainArgs, "init_checkpoint_type"))
    steps: int | None = option("training steps (default: the experiment's)",
                               lands="train_steps")
    override: Mapping[str, Any] = option("a Model Garden parameter, KEY=VALUE (repeatable): "
                            "batch_size, learning_rate, warmup_steps, input_size or a "
                            "config path such as task.model.head.num_convs", default={})
    config_file: tuple = option("a Model Garden YAML applied to the experiment before "
                                "--override (repeatable; the path is read where the trainer "
                                "runs)", default=(), path=True, lands="config_files")
    params_override: tuple = option("Model Garden's --params_override, passed through "
                                    "(repeatable)", default=())
    label: Mapping[str, str] = option("a label for the run's jobs, KEY=VALUE (repeatable)",
                                      default={})
    max_cost: float | None = option("USD: refuse a job whose bound (price x timeout) or "
                                    "expected cost is higher",
                                    bound=schema.Bound(minimum=0, above=True))
    detach: bool = option("run in the background and return at once (local): `invoke "
                          "jobs.list --target local` lists it, jobs.logs, jobs.wait and "
                          "jobs.cancel reach it", default=False, tasks=frozenset({TRAIN, EVAL}))
    machine_type: str | None = option("e.g. n1-standard-8, g2-standard-8, a3-highgpu-8g "
                                      "(vertex)", section=EVAL)
    accelerator: str | None = option("TYPE:COUNT, e.g. NVIDIA_TESLA_T4:1 (vertex)",
                                     section=EVAL)
    tpu: str | None = option("v2-8, v3-8, v5litepod-1|4|8|16|...|256, v6e-1|4|...|256 "
                             "(vertex)", section=EVAL)
    tpu_topology: str | None = option("e.g. 2x2, 4x4 (with a TPU --machine-type)",
                                      section=EVAL)
    workers: int = option("workers beside the chief", default=0, tasks=TRAINING,
                          bound=REPLICAS)
    reduction_servers: int = option("Reduction Server replicas (vertex, GPU workers)",
                                    default=0, tasks=TRAINING, bound=REPLICAS)
    spot: bool = option("Spot VMs (vertex)", default=False, section=EVAL)
    flex_start: bool = option("queue for capacity: Dynamic Workload Scheduler (vertex; the "
                              "GPUs that offer it: docs/reference/hardware.md)", default=False,
                              section=EVAL)
    max_wait_hours: float | None = option("--flex-start: hours to queue (0: no limit; "
                                          "default 24)", section=EVAL, bound=WAIT_HOURS)
    reservation: str | None = option("consume a Compute Engine reservation: any, ZONE/NAME "
                                     "or its path", section=EVAL)
    persistent_resource: str | None = option("run on this Vertex AI persistent resource "
                                             "(ID)", section=EVAL)
    web_access: bool = option("an interactive shell into each replica while it runs "
                              "(vertex): `invoke jobs.status` prints the links",
                              default=False, section=EVAL)
    timeout_hours: float = option("job timeout (vertex)", default=24.0, section=EVAL,
                                  bound=HOURS)
    regions: tuple = option("regions to try in order, e.g. us-central1,us-east4: a job that "
                            "finds no capacity is resubmitted in the next; every hardware is "
                            "tried in a region before the next region (vertex; waits; "
                            "instead of --region)", default=(), tasks=frozenset({TRAIN}))
    fallback: tuple = option("machine types to try after the job's own hardware, in order, "
                             "e.g. a2-highgpu-1g,g2-standard-8, each with the accelerator it "
                             "comes with (vertex; waits)", default=(), tasks=frozenset({TRAIN}))
    capacity: tuple = option("kinds of capacity to try in order, e.g. "
                             "spot,flex-start,standard: a job that finds none is "
                             "resubmitted on the next (vertex; waits)", default=(),
                             tasks=frozenset({TRAIN}))
    max_preemptions: int = option("--capacity: preempted jobs resubmitted on the same kind "
                                  "before the next", default=2, tasks=frozenset({TRAIN}),
                                  bound=PREEMPTIONS)
    seed: int | None = option("fix the random seeds (weights, data order): the same job again "
                              "lands close to the same model", tasks=frozenset({TRAIN}),
                              lands="seed")
    early_stop_patience: int | None = option(
        "stop training after this many evaluations in a row without a gain in the "
        "experiment's metric (AP); best/ keeps the best checkpoint either way",
        tasks=frozenset({TRAIN}), lands="early_stop_patience")
    early_stop_min_delta: float | None = option("--early-stop-patience: the gain that counts "
                                                "(default 0: any)", tasks=frozenset({TRAIN}),
                                                lands="early_stop_min_delta")
    early_stop_evaluator: str | None = option(
        "--early-stop-patience: who evaluates meanwhile: trainer (the chief, between its "
        "loops; the default) or eval-job (`invoke eval --run-id RUN` beside training)",
        tasks=frozenset({TRAIN}), lands="early_stop_evaluator")
    once: bool = option("evaluate the newest checkpoint and stop", default=False,
                        tasks=frozenset({EVAL}), section=EVAL)
    idle_timeout: float | None = option("seconds to wait for a new checkpoint",
                                        tasks=frozenset({EVAL}), section=EVAL,
                                        lands="eval_idle_timeout")
    split: str = option("what to evaluate on: val, or test (the held-out split: the best "
                        "checkpoint, as export chooses it, evaluated once, --once or not; "
                        "recorded apart, in eval-test/, so it never picks a checkpoint)",
                        default=VAL, tasks=frozenset({EVAL}), section=EVAL,
                        lands="eval_split")
    sweep: Mapping[str, Any] = option("the sweep (tune: the sweep file's fields)",
                                      default={}, tasks=frozenset({TUNE}), section=TUNE)

    def to_yaml(self, task: str, header: str = "") -> str:
        """The resolved file for `task`: every value that differs from its default, plus
        the target and the experiment (the executor fills in the run, region and data)."""
        return header + yamlfile.dumps(self.as_mapping(task))

    def as_mapping(self, task: str) -> dict:
        top: dict[str, Any] = {}
        section: dict[str, Any] = {}
        for field in options(task):
            value = getattr(self, field.name)
            if value == default(field) and field.name not in ALWAYS_WRITTEN:
                continue
            if value is None:
                continue
            where = section if _in_section(field, task) else top
            where[key(field)] = _plain(value)
        if section:
            top[SECTIONS[task]] = section
        return top


# Written even at their defaults: a reviewer sees what runs, and a rerun does not depend on
# a default that may change.
ALWAYS_WRITTEN = ("target", "experiment")
FIELDS = {field.name: field for field in dataclasses.fields(JobFile)}


def default(field: dataclasses.Field) -> Any:
    if field.default is dataclasses.MISSING:
        return field.default_factory()
    return field.default


def key(field: dataclasses.Field) -> str:
    """A field's flag without its dashes, and its key in the file: `machine-type`."""
    return field.name.replace("_", "-")


def flag(name: str) -> str:
    return f"--{name.replace('_', '-')}"


def options(task: str) -> list[dataclasses.Field]:
    """The fields `task` takes, in declaration order."""
    return [field for field in dataclasses.fields(JobFile) if task in field.metadata["tasks"]]


def _in_section(field: dataclasses.Field, task: str) -> bool:
    """Whether `task` reads this field from its own section (eval's machine, tune's sweep)."""
    return field.metadata["section"] == task


def _top_level(field: dataclasses.Field) -> bool:
    """Whether some task reads this field from the top of the file."""
    return bool(field.metadata["tasks"] - {field.metadata["section"]})


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def read(path: str) -> dict:
    """A job file as a mapping, or a JobFileError naming `--job` and what is wrong."""
    text = read_page(path, "--job", MAX_FILE_BYTES, JobFileError)
    return parse(text, f"--job {path}")


def check_save_path(path: str | None) -> str | None:
    """`--save-job PATH`: a file in a directory that exists (checked before anything runs,
    written once every check has passed)."""
    if path and (not os.path.isdir(os.path.dirname(os.path.abspath(path))) or
                 os.path.isdir(path)):
        raise JobFileError(f"--save-job {path[:100]}: not a file in an existing directory")
    return path


def parse(text: str, source: str) -> dict:
    data = yamlfile.loads(text, source, JobFileError)
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise JobFileError(f"{source}: a job file is a mapping of flag names to values, e.g. "
                           "`steps: 2000`")
    return dict(data)


@dataclasses.dataclass(frozen=True)
class Run:
    """The run a job would continue or evaluate, as it is found: the experiment its
    run.json names, where it is, and the flag that names another place."""

    experiment: str
    where: str  # a model directory, or gs://BUCKET/runs/RUN_ID
    place: str = "--model-dir"  # or --run-id


def resolve(task: str, flags: Mapping[str, Any], file: Mapping[str, Any] | None = None,
            source: str = "", run: Callable[[JobFile], Run | None] = lambda job: None
            ) -> JobFile:
    """The job `task` runs: each field from the flags if given, else from the file (its
    section for eval's machine and tune's sweep), else its default; every value checked.
    Training and evaluation of a run that exists (`run(job)` finds it) take its experiment:
    one not given is the run's, and another given is refused (a model directory holds one
    run of one experiment: training another would replace its files)."""
    values: dict[str, Any] = {}
    given: dict[str, str] = {}  # each value as it was given, for a refusal to name
    for name, value in _from_file(task, file or {}, source).items():
        values[name] = _value(FIELDS[name], value, f"{flag(name)} (in {source})")
        given[name] = f"{flag(name)} {value} (in {source})"
    for name, value in flags.items():
        if name not in FIELDS or not _given(value) or task not in FIELDS[name].metadata["tasks"]:
            continue
        field = FIELDS[name]
        if value == "":  # `--init-from ""`: back to the default, whatever the file says
            values.pop(name, None)
            given.pop(name, None)
            continue
        value = _value(field, value, flag(name))
        if isinstance(value, dict) and field.name != "sweep":  # KEY=VALUE flags add keys
            value = {**values.get(name, {}), **value}
        values[name], given[name] = value, f"{flag(name)} {value}"
    job = JobFile(**values)
    if KINDS[task].of_run and (found := run(job)):
        if "experiment" not in given:
            job = dataclasses.replace(job, experiment=found.experiment)
        elif job.experiment != found.experiment:
            raise JobFileError(other_experiment(str(given["experiment"])[:200], found.where,
                                                found.experiment, found.place))
    return dataclasses.replace(job, override=_check(job, task))


def flag_value(name: str, value: Any) -> Any:
    """One flag of a task that takes no job file (`endpoint.deploy --max-cost`, `predict
    --timeout-hours`), checked as the job field of that name checks it; its default when not
    given. So a budget or a timeout means the same, and is refused the same, everywhere."""
    field = FIELDS[name]
    return default(field) if value in (None, "") else _value(field, value, flag(name))


def _given(value: Any) -> bool:
    """invoke's "not on the command line": None, False, or an empty repeatable flag."""
    return value is not None and value is not False and value != [] and value != ()


def _from_file(task: str, file: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The file's values `task` reads: top-level keys, and its own section's. Every key of
    the file is checked, whichever task reads it, so a misplaced key is never ignored."""
    known = {key(field): field for field in FIELDS.values()}
    for name in file:
        if name in SECTIONS.values():
            section(file, next(t for t, s in SECTIONS.items() if s == name), source)
        elif name not in known or not _top_level(known[name]):
            where = known[name].metadata["section"] if name in known else None
            raise JobFileError(f"{source}: {str(name)[:80]!r} " + (
                f"belongs in the `{SECTIONS[where]}:` section" if where else
                "is not a key; a job file's keys are the flags' names (`invoke train "
                "--help`), plus `eval:` and `tune:` sections"))
    for other in SECTIONS:  # a value any task reads must be right, whichever task runs
        for name, value in section(file, other, source).items():
            _value(known[name], value, f"{flag(name)} (in {source})")
    own = section(file, task, source) if task in SECTIONS else {}
    values = {}
    for name, field in known.items():
        if task in field.metadata["tasks"]:
            where = own if _in_section(field, task) else file
            if name in where:
                values[field.name] = where[name]
    return values


def file_sweep(file: Mapping[str, Any], source: str) -> Mapping[str, Any]:
    """The sweep a job file's `tune:` section holds (empty: none)."""
    found = section(file, TUNE, source).get("sweep") or {}
    return _value(FIELDS["sweep"], found, f"--sweep (in {source})")


def section(file: Mapping[str, Any], task: str, source: str) -> Mapping[str, Any]:
    """`task`'s own section of the file (eval's machine, tune's sweep), checked."""
    name = SECTIONS[task]
    found = file.get(name) or {}
    allowed = [key(f) for f in FIELDS.values() if _in_section(f, task)]
    if not isinstance(found, Mapping) or not all(k in allowed for k in found):
        raise JobFileError(f"{source}: `{name}:` is a mapping of {', '.join(allowed)}")
    return found


def _value(field: dataclasses.Field, value: Any, shown: str) -> Any:
    """A flag's text (invoke passes text) or a file's YAML value, as the field's type."""
    kind = schema.kind(field.type)
    meta = field.metadata
    if kind is bool:
        if not isinstance(value, bool):
            raise JobFileError(f"{shown} is true or false, got {value!r}")
        return value
    if kind is dict:
        return _mapping(field, value, shown)
    if kind is tuple:
        return _sequence(field, value, shown)
    if kind in (int, float):
        return schema.number(value, kind, shown, meta["bound"], JobFileError)
    if not isinstance(value, str) or not value.strip() or not value.isprintable():
        raise JobFileError(f"{shown} is text (printable, on one line), got {value!r}"[:200])
    if meta["choices"]:
        return schema.choice(value, meta["choices"], shown, JobFileError)
    return value


def _sequence(field: dataclasses.Field, value: Any, shown: str) -> tuple:
    """A repeatable flag (a list of texts; `--capacity a,b` is one text) or a YAML list."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)):
        raise JobFileError(f"{shown} is a list, got {value!r}")
    if field.name in COMMA_LISTS:
        items = [part.strip() for item in items for part in str(item).split(",")
                 if part.strip()]
    if not all(isinstance(item, str) and item for item in items):
        raise JobFileError(f"{shown}: each value is text, got {items!r}"[:200])
    return tuple(items)


def _mapping(field: dataclasses.Field, value: Any, shown: str) -> dict:
    """`KEY=VALUE` flags (repeatable) or a YAML mapping. An override's value is YAML
    (`0.01`, `true`, `[640, 640, 3]`); a label's is text."""
    if field.name == "sweep":
        if not isinstance(value, Mapping):
            raise JobFileError(f"{shown}: the sweep is a mapping (the sweep file's fields)")
        return dict(value)
    if isinstance(value, Mapping):
        pairs = dict(value)
    elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        pairs = {}
        for text in value:
            match = KEY_VALUE.fullmatch(text)
            if not match or not match["key"].strip():
                raise JobFileError(f"{shown} takes KEY=VALUE, got {text[:80]!r}")
            pairs[match["key"].strip()] = match["value"] if field.name == "label" \
                else _yaml_value(match["value"], shown)
    else:
        raise JobFileError(f"{shown} takes KEY=VALUE pairs, got {value!r}"[:200])
    if field.name == "label":
        return _labels(pairs, shown)
    return {str(k): v for k, v in pairs.items()}


def _yaml_value(text: str, shown: str) -> Any:
    """An override's value as the job file's reader reads it (`1e-9`, `[640, 640, 3]`)."""
    return yamlfile.loads(text, shown, JobFileError) if text.strip() else ""


LABEL = re.compile(r"[a-z][a-z0-9_-]{0,62}")
LABEL_VALUE = re.compile(r"[a-z0-9_-]{0,63}")


def _labels(pairs: Mapping, shown: str) -> dict[str, str]:
    """Google Cloud labels: lowercase keys and values, at most 63 characters."""
    labels = {}
    for name, value in pairs.items():
        text = "" if value is None else str(value)
        if not LABEL.fullmatch(str(name)) or not LABEL_VALUE.fullmatch(text):
            raise JobFileError(f"{shown} {str(name)[:40]}={text[:40]}: label keys and values "
                               "are up to 63 lowercase letters, digits, '_' or '-' (keys "
                               "start with a letter)")
        labels[str(name)] = text
    return labels


def _check(job: JobFile, task: str) -> dict[str, Any]:
    """What depends on several values, or on the experiment; the overrides, normalised."""
    if job.experiment not in experiment_fields.registered():
        raise JobFileError(f"--experiment {job.experiment[:80]!r} is not a detection "
                           f"experiment: use {', '.join(EXPERIMENTS)} or one of Model "
                           "Garden's (`invoke models.pretrained` lists what fits each)")
    if job.dataset:
        try:
            datasets.split_reference(job.dataset)
        except SettingsError as error:
            raise JobFileError(str(error)) from None
        if job.data_dir:
            raise JobFileError("--dataset and --data-dir both name the data: choose one")
    if job.init_type and not job.init_from:
        raise JobFileError("--init-type says what --init-from holds: add --init-from or drop "
                           "it")
    try:
        trainer_args(job, task).check()  # the trainer's own checks, before a job is built
    except SettingsError as error:
        raise JobFileError(str(error)) from None
    if job.region and job.regions:
        raise JobFileError("--region and --regions: choose one (--regions lists the regions to "
                           "try, in order)")
    if (job.regions or job.fallback) and (job.reservation or job.persistent_resource):
        raise JobFileError("--reservation and --persistent-resource use capacity set aside in "
                           "one place, and --regions and --fallback look elsewhere: drop one")
    for name in (job.sweep.get("params") or {}) if isinstance(job.sweep, Mapping) else ():
        _field_kind(job.experiment, str(name), "--param")  # a sweep varies real fields too
    return check_overrides(job.experiment, job.override)


def trainer_args(job: JobFile, task: str) -> TrainArgs:
    """The trainer's arguments the file's values become (places aside: the executor decides
    them): each field `task` takes on the TrainArgs field it `lands` on, plus what the kind
    sets itself (its mode). The launcher's checks of them are the trainer's (`check()`)."""
    landed = {field.metadata["lands"]: getattr(job, field.name) for field in options(task)
              if field.metadata["lands"] and getattr(job, field.name) is not None}
    return TrainArgs(**landed, **KINDS[task].own_args(job))


def check_overrides(experiment: str, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Each `--override` names a field of the experiment's config, with a finite value of its
    type (checked for the shipped experiments, whose fields are recorded; the trainer checks
    any experiment again). A whole float for a whole-number field becomes an int, and an int
    for a float field a float."""
    checked = {}
    for name, value in overrides.items():
        kind = _field_kind(experiment, name, "--override")
        if isinstance(value, float) and not math.isfinite(value):
            raise JobFileError(f"--override {name}={value!r}: not a finite number")
        if name == "input_size":  # the side S of a square input: [S, S, 3]
            kind = "int"
        if kind == "int" and isinstance(value, float) and value.is_integer():
            value = int(value)
        if kind == "float" and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)  # `learning_rate=0`: Model Garden's schedules want a float
        if kind is not None and not experiment_fields.fits(kind, value):
            shown = {"int": "whole number", "list": "list"}.get(kind, kind)
            raise JobFileError(f"--override {name}={value!r}: "
                               f"{hparams.config_path(name)} takes a {shown}")
        checked[name] = value
    return checked


def _field_kind(experiment: str, name: str, shown: str) -> str | None:
    """The kind of the config field `name` stands for (None: not recorded, so the trainer
    checks it), or an error naming `shown`."""
    path = hparams.config_path(name)
    if path is None:
        raise JobFileError(f"{shown} {name[:80]!r}: use one of {', '.join(hparams.PARAMETERS)} "
                           "or a config path such as task.model.head.num_convs")
    if path in hparams.OWNED_BY_FLAGS:
        raise JobFileError(f"{shown} {name[:80]!r}: the trainer takes {path} from "
                           f"{hparams.OWNED_BY_FLAGS[path]}; give that instead")
    known = experiment_fields.fields(experiment)
    if known is None:
        return None
    if path not in known:
        close = sorted(p for p in known if p.rsplit(".", 1)[-1] == path.rsplit(".", 1)[-1])
        hint = f" (did you mean {', '.join(close[:3])}?)" if close else ""
        raise JobFileError(f"{shown} {name[:80]!r}: {experiment} has no field "
                           f"{path[:80]}{hint}")
    return known[path]


def trainer_overrides(job: JobFile) -> tuple[str, ...]:
    """The file's Model Garden parameters as the trainer's --params_override values: the
    user's own first, then `override` (one JSON document, so its values keep their types)."""
    merged = hparams.overrides(job.override)
    return (*job.params_override, *([json.dumps(merged, sort_keys=True)] if merged else []))


@dataclasses.dataclass(frozen=True)
class Written:
    """A resolved job file and the task it is for: what `--dry-run` prints and a run stores
    (the executor fills in what it decides: the run id, the region, the image's digest)."""

    task: str
    job: JobFile

    def text(self, **decided: Any) -> str:
        if self.job.dataset or decided.get("dataset"):  # the data is the version, by name
            decided.pop("data_dir", None)
        job = dataclasses.replace(self.job, **{k: v for k, v in decided.items() if v})
        return job.to_yaml(self.task, f"# invoke {self.task} --job FILE: this job again "
                                      "(flags given with it win)\n")


def written_keys(task: str) -> frozenset[str]:
    """The keys `Written(task, ...).text` can write at the top of a file (as `as_mapping`
    places them): all a rerun of a run launched for `task` may replay."""
    fields = options(task)
    return frozenset({key(f) for f in fields if not _in_section(f, task)} |
                     ({SECTIONS[task]} if any(_in_section(f, task) for f in fields) else set()))


def given(flags: Mapping[str, Any]) -> frozenset[str]:
    """The fields the command line gives (their values win over any file's)."""
    return frozenset(name for name, value in flags.items() if name in FIELDS and _given(value))


def request(job: JobFile, task: str) -> Request:
    """The job as the request executors run: the pretrained checkpoint resolved against
    the experiment, the hardware as Resources, the overrides as the trainer's."""
    customised = bool(job.config_file or job.params_override or any(
        (hparams.config_path(name) or "").startswith("task.model.") and
        name not in ("input_size", "task.model.input_size", "task.model.num_classes")
        for name in job.override))  # the model may differ from the recorded one
    init = pretrained.resolve(job.init_from, job.init_type, job.experiment, customised)
    resources = Resources.from_flags(
        machine_type=job.machine_type, accelerator=job.accelerator, tpu=job.tpu,
        tpu_topology=job.tpu_topology, workers=job.workers,
        reduction_servers=job.reduction_servers, scheduling=Scheduling.from_flags(
            spot=job.spot, flex_start=job.flex_start, timeout_hours=job.timeout_hours,
            max_wait_hours=job.max_wait_hours, reservation=job.reservation,
            persistent_resource=job.persistent_resource))
    args = dataclasses.replace(trainer_args(job, task), params_override=trainer_overrides(
        job), **({"init_checkpoint": init.checkpoint, "init_checkpoint_type": init.type}
                 if init else {}))
    kind = KINDS[task]
    return kind(args, resources, job.run_id, labels=dict(job.label), web_access=job.web_access,
                record=Written(task, job), **kind.own_values(job))
