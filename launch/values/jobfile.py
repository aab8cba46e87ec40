"""A job written down once. The options `invoke train`, `tune` and `eval` share are the fields
of `JobFile`, the job in neutral terms (what to run, on which data, with how many
accelerators and replicas, on which kind of capacity), and of each target's own options
(`TargetSpec.options`, declared in its package: Vertex AI's machine types, capacity ladder,
reservations); the tasks' flags, their help, the job file's keys and the check of every value
all come from these fields, so a flag and a key never disagree.

    invoke train --job job.yaml --steps 2000   # the file, then the flags over it
    invoke train --job job.yaml --dry-run      # the resolved file, then the request it makes
    invoke train --rerun RUN_ID                # the file an earlier run stored

A file's keys are the flags' names (`steps: 2000`), after `version: 2`; a target's own options
sit in its section (`vertex: {machine-type: g2-standard-8}`). Evaluation runs on its own
hardware, so eval reads its machine, scheduling and options from the file's `eval:` section
(`eval: {spot: true, vertex: {machine-type: n1-standard-4}}`; default: a CPU machine);
`tune:` holds the sweep (the sweep file's fields). A file of an older version is read through
the table of renamed keys (`RENAMED`) first. A value the chosen target cannot take is refused
from what it cannot do (`Capability`). Nothing here calls an API or imports a target's
modules: the registry hands over each target's declaration, executors turn the resolved file
into jobs.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import math
import os
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NoReturn

from launch.errors import InputError
from launch.values import capabilities, pretrained
from launch.values.capabilities import Capability
from launch.values.files import read_page
from launch.values.jobs import KINDS, Evaluation, Request, Training, Tuning
from launch.values.resources import REPLICAS, Resources
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
# Where a target's option goes in a request (`into=`): the Request field of its name;
# "cloud": a setting of the Cloud the job runs with (launching.py). None: only its executor
# reads it (the request's `target_options`).
INTO = ("cloud",)


class JobFileError(InputError):
    """A job file or flag value that cannot make a job; the message names the flag."""


def option(help: str, *, lands: str | None = None, checked_as: tuple[type, str] | None = None,
           tasks: frozenset[str] = EVERY, section: str | None = None, path: bool = False,
           needs: Capability | None = None, into: str | None = None, commas: bool = False,
           **more: Any) -> Any:
    """A field that is a flag of each task in `tasks` and a key of the job file (`trainer.
    options`' one schema), of `JobFile` or of a target's own options. `lands`: the
    `TrainArgs` field its value becomes in a request's args (`request()` reads it here, not
    from a hand-written mapping), whose bound and choices it takes; `section`: the task that
    reads it from its own section of the file (eval's machine is not training's; tune's
    sweep); `path`: its value may name a file or directory on this machine (a rerun checks
    it); `checked_as`: a trainer field whose checks it takes though the request sets that
    field otherwise (--init-type: pretrained.py); `needs`: what a target must be able to do
    to take a value other than the default (a refusal says it); `into`: where a target's
    option goes in a request (INTO); `commas`: one flag, values separated by commas."""
    if into not in (None, *INTO):
        raise ValueError(f"into={into!r}: one of {', '.join(INTO)}")
    checked_as = checked_as or ((TrainArgs, lands) if lands else None)
    return schema.option(help, checked_as=checked_as, tasks=tasks, section=section, path=path,
                         lands=lands, needs=needs, into=into, commas=commas, **more)


@dataclasses.dataclass(frozen=True)
class JobFile:
    """What a researcher decides about a run, in terms every target reads the same way (an
    accelerator kind and count, replicas, spot or flex-start capacity: a target that cannot
    is refused), plus the chosen target's own options."""

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
    accelerator: str | None = option("TYPE:COUNT, e.g. NVIDIA_TESLA_T4:1", section=EVAL,
                                     needs=capabilities.GPU)
    tpu: str | None = option("v2-8, v3-8, v5litepod-1|4|8|16|...|256, v6e-1|4|...|256",
                             section=EVAL, needs=capabilities.TPU)
    workers: int = option("workers beside the chief", default=0, tasks=TRAINING,
                          bound=REPLICAS)
    spot: bool = option("Spot VMs", default=False, section=EVAL, needs=capabilities.SPOT)
    flex_start: bool = option("queue for capacity: Dynamic Workload Scheduler, on the GPUs "
                              "docs/reference/hardware.md marks", default=False,
                              section=EVAL, needs=capabilities.FLEX_START)
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
    evaluate: bool = option("the training job evaluates its checkpoints itself (each "
                            "validation interval and its last, with best/ and the operating "
                            "point): no evaluation job beside it", default=False,
                            tasks=frozenset({TRAIN}))
    test: bool = option("after training, the training job evaluates the checkpoint export "
                        "would choose on the test split once (into eval-test/, as `invoke "
                        "eval --split test`): no test job of its own", default=False,
                        tasks=frozenset({TRAIN}), lands="test_after")
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
    # The target's own options (its TargetSpec's `options`: VertexOptions, LocalOptions), for
    # the task it was resolved for; None: their defaults. Not a flag itself: each of its
    # fields is one, and a key of the file's section named after the target.
    target_options: Any = None

    def __post_init__(self) -> None:
        own = TARGETS[self.target].options
        if self.target_options is None:
            object.__setattr__(self, "target_options", own())
        elif type(self.target_options) is not own:  # a bug, not a user's mistake
            raise TypeError(f"the {self.target} target's options are {own.__name__}, got "
                            f"{type(self.target_options).__name__}")

    def to_yaml(self, task: str, header: str = "") -> str:
        """The resolved file for `task`: every value that differs from its default, plus
        the version, the target and the experiment (the executor fills in the run, region
        and data)."""
        return header + yamlfile.dumps(self.as_mapping(task))

    def as_mapping(self, task: str) -> dict:
        top: dict[str, Any] = {"version": VERSION}
        section: dict[str, Any] = {}
        for field in options(task):
            value = getattr(self, field.name)
            if value == default(field) and field.name not in ALWAYS_WRITTEN:
                continue
            if value is None:
                continue
            where = section if _in_section(field, task) else top
            where[key(field)] = _plain(value)
        own: dict[str, Any] = {}
        own_section: dict[str, Any] = {}
        for field in own_options(self.target, task):
            value = getattr(self.target_options, field.name)
            if value != default(field) and value is not None:
                (own_section if _in_section(field, task) else own)[key(field)] = _plain(value)
        if own:
            top[self.target] = own
        if own_section:
            section[self.target] = own_section
        if section:
            top[SECTIONS[task]] = section
        return top


# Written even at their defaults: a reviewer sees what runs, and a rerun does not depend on
# a default that may change.
ALWAYS_WRITTEN = ("target", "experiment")
# the neutral fields: each a flag and a key (target_options is not one)
FIELDS = {field.name: field for field in dataclasses.fields(JobFile) if field.metadata}


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
    """The neutral fields `task` takes, in declaration order."""
    return [field for field in FIELDS.values() if task in field.metadata["tasks"]]


def own_options(target: str, task: str | None = None) -> list[dataclasses.Field]:
    """The own options of the target named `target` (those `task` takes), as its package
    declares them (the registry imports its spec, never its executor)."""
    return [field for field in dataclasses.fields(TARGETS[target].options)
            if task is None or task in field.metadata["tasks"]]


def options_by_name() -> dict[str, dict[str, dataclasses.Field]]:
    """Every target's own options, by name, then by target (registry order): what the
    flags and the file's sections may name. A name may be two targets' options (each
    target reads its own); a neutral field's name is no target's."""
    owned: dict[str, dict[str, dataclasses.Field]] = {}
    for target in TARGETS:
        for field in own_options(target):
            if field.name in FIELDS:
                raise ValueError(f"the {target} target's option {field.name} is a JobFile "
                                 "field: choose another name")
            owned.setdefault(field.name, {})[target] = field
    return owned


def flag_fields(task: str) -> list[dataclasses.Field]:
    """The fields that are `task`'s flags: the neutral ones, then each target's own (one
    field a name: the first target's declares the flag)."""
    owned = [next(iter(by_target.values())) for by_target in options_by_name().values()]
    return [*options(task), *(field for field in owned if task in field.metadata["tasks"])]


def field_named(name: str) -> dataclasses.Field:
    """The neutral field, or else the first target's own option, called `name`."""
    return FIELDS.get(name) or next(iter(options_by_name()[name].values()))


def help_of(field: dataclasses.Field) -> str:
    """A field's help, with the targets that take it where not all do: `Spot VMs (vertex)`
    (a neutral field's: those able to; an option's: those that own one of its name)."""
    able = list(options_by_name().get(field.name, {})) if field.name not in FIELDS else [
        target for target in TARGETS if TARGETS[target].can(field.metadata["needs"])]
    return field.metadata["help"] + (f" ({', '.join(able)})" if len(able) < len(TARGETS)
                                     else "")


def _in_section(field: dataclasses.Field, task: str) -> bool:
    """Whether `task` reads this field from its own section (eval's machine, tune's sweep)."""
    return field.metadata["section"] == task


def _top_level(field: dataclasses.Field) -> bool:
    """Whether some task reads this field from the top of the file (or of its target's
    section)."""
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
    """A job file's text as a mapping in this version's layout (`upgrade`)."""
    data = yamlfile.loads(text, source, JobFileError)
    if data is None:
        return upgrade({}, source)
    if not isinstance(data, Mapping):
        raise JobFileError(f"{source}: a job file is a mapping of flag names to values, e.g. "
                           "`steps: 2000`")
    return upgrade(data, source)


VERSION = 2  # the layout `as_mapping` writes, first in every file (`version: 2`)
# Keys renamed or moved, by the version that did it: a file of an older version has each
# moved, version by version, before anything reads it (Ultralytics' `_handle_deprecation`),
# so every job file a run stored replays. A file without `version:` is version 1, as every
# file written before 2026-12-03 is. Stored files hold these names: add, never edit.
# Version 2: each target's own options moved into its section (`vertex:`, `local:`), and
# evaluation's into `eval: vertex:`.
V1_VERTEX = ("region", "image", "machine-type", "tpu-topology", "reduction-servers",
             "max-wait-hours", "reservation", "persistent-resource", "web-access",
             "timeout-hours", "regions", "fallback", "capacity", "max-preemptions")
V1_EVAL_VERTEX = ("machine-type", "tpu-topology", "max-wait-hours", "reservation",
                  "persistent-resource", "web-access", "timeout-hours")
RENAMED: dict[int, dict[tuple[str, ...], tuple[str, ...]]] = {
    2: {**{(name,): ("vertex", name) for name in V1_VERTEX},
        **{("eval", name): ("eval", "vertex", name) for name in V1_EVAL_VERTEX},
        ("detach",): ("local", "detach")},
}


def upgrade(file: Mapping[str, Any], source: str) -> dict:
    """`file` in this version's layout, `version` first: each key an older version wrote
    moved where it sits now (`RENAMED`, applied in order); a version newer than this code
    is refused. Pure: `file` is not changed. A file already in this layout is as it was."""
    version = file.get("version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise JobFileError(f"{source}: version {str(version)[:20]!r} is not a job file "
                           f"version: 1 to {VERSION} (a file without one is version 1)")
    if version > VERSION:
        raise JobFileError(f"{source}: version {version} is newer than this launcher reads "
                           f"({VERSION}): update the launcher (`git pull`), or write the file "
                           f"in version {VERSION}")
    upgraded = {"version": VERSION, **copy.deepcopy({name: value for name, value in
                                                     file.items() if name != "version"})}
    for step in range(version + 1, VERSION + 1):
        for old, new in RENAMED[step].items():
            _move(upgraded, old, new, source)
    return upgraded


def _move(file: dict, old: tuple[str, ...], new: tuple[str, ...], source: str) -> None:
    """Moves the key at path `old` to path `new`, making the sections on the way. A
    section that is not a mapping is left as it is, for the reader to name."""
    holder = file
    for part in old[:-1]:
        holder = holder.get(part)
        if not isinstance(holder, dict):
            return
    if old[-1] not in holder:
        return
    there = file
    for part in new[:-1]:
        there = there.setdefault(part, {})
        if not isinstance(there, dict):
            return
    if new[-1] in there:
        raise JobFileError(f"{source}: both `{': '.join(old)}` and `{': '.join(new)}`: a "
                           f"file without `version:` is version 1, whose `{': '.join(old)}` "
                           f"is version {VERSION}'s `{': '.join(new)}`; keep one")
    there[new[-1]] = holder.pop(old[-1])


@dataclasses.dataclass(frozen=True)
class Run:
    """The run a job would continue or evaluate, as it is found: the experiment its
    run.json names, where it is, and the flag that names another run."""

    experiment: str
    where: str  # a model directory, or gs://BUCKET/runs/RUN_ID
    flag: str = "--model-dir"  # or --run-id


@dataclasses.dataclass(frozen=True)
class _Given:
    """One value as it was given, for a refusal to name: `shown` (`--spot`, `spot (in --job
    F)`) and `dropped` (`--spot`, `spot from --job F`)."""

    field: dataclasses.Field
    value: Any
    shown: str
    dropped: str


def resolve(task: str, flags: Mapping[str, Any], file: Mapping[str, Any] | None = None,
            source: str = "", run: Callable[[JobFile], Run | None] = lambda job: None
            ) -> JobFile:
    """The job `task` runs: each field from the flags if given, else from the file (its
    section for eval's machine and tune's sweep; the target's section for its own options),
    else its default; every value checked, and one the target cannot take refused (as it
    was given: a flag, or the file's key). Training and evaluation of a run that exists
    (`run(job)` finds it) take its experiment: one not given is the run's, and another given
    is refused (a model directory holds one run of one experiment: training another would
    replace its files)."""
    file = upgrade(file or {}, source)
    read = _from_file(task, file, source)
    neutral = _over(task, {name: given for (owner, name), given in read.items() if not owner},
                    flags, FIELDS)
    target = neutral["target"].value if "target" in neutral else default(FIELDS["target"])
    owned = options_by_name()
    own = _over(task, {name: given for (owner, name), given in read.items()
                       if owner == target},
                flags, {field.name: field for field in own_options(target)})
    foreign = _over(task, {name: given for (owner, name), given in read.items()
                           if owner not in (None, target)},
                    flags, {name: next(iter(by_target.values()))
                            for name, by_target in owned.items() if target not in by_target})
    for name, given in [*neutral.items(), *foreign.items()]:
        needs = given.field.metadata["needs"]
        if (name in foreign or not TARGETS[target].can(needs)) and \
                given.value != default(given.field):
            _refuse(target, given, name in foreign)
    job = JobFile(**{name: given.value for name, given in neutral.items()},
                  target_options=TARGETS[target].options(
                      **{name: given.value for name, given in own.items()}))
    if KINDS[task].of_run and (found := run(job)):
        if "experiment" not in neutral:
            job = dataclasses.replace(job, experiment=found.experiment)
        elif job.experiment != found.experiment:
            said = f"--experiment {job.experiment}" + (
                "" if neutral["experiment"].shown == "--experiment" else f" (in {source})")
            raise JobFileError(other_experiment(said[:200], found.where, found.experiment,
                                                found.flag))
    return dataclasses.replace(job, override=_check(job, task))


def _over(task: str, from_file: Mapping[str, _Given], flags: Mapping[str, Any],
          fields: Mapping[str, dataclasses.Field]) -> dict[str, _Given]:
    """The file's values (`from_file`, checked), then the flags given over them of `fields`
    (the neutral ones, the target's own options, or the other targets'), each checked as its
    field checks it."""
    values = dict(from_file)
    for name, value in flags.items():
        field = fields.get(name)
        if field is None or not _given(value) or task not in field.metadata["tasks"]:
            continue
        if value == "":  # `--init-from ""`: back to the default, whatever the file says
            values.pop(name, None)
            continue
        value = _value(field, value, flag(name))
        if isinstance(value, dict) and field.name != "sweep":  # KEY=VALUE flags add keys
            value = {**(values[name].value if name in values else {}), **value}
        values[name] = _Given(field, value, flag(name), flag(name))
    return values


def _refuse(target: str, given: _Given, owned: bool) -> NoReturn:
    """The one refusal of a value the target cannot take, from what it cannot do (the
    capability the field needs), with the targets that can: "`--spot`: the local target
    cannot run spot capacity: add --target vertex, or drop --spot"."""
    needs = given.field.metadata["needs"]
    able = [other for other in TARGETS if other != target and TARGETS[other].can(needs) and
            (not owned or other in options_by_name()[given.field.name])]
    cannot = f"has no option {key(given.field)}" if TARGETS[target].can(needs) else \
        f"cannot {needs.words}"
    raise JobFileError(refusal(target, cannot, able, given.shown, given.dropped))


def refuse_incapable(target: str, needs: Mapping[str, Capability]) -> None:
    """Refuses a flag a task took (`needs`: the flag's name -> what a target must be able to
    do to take it, data.convert's `--region`) that `target` cannot take, as a job's value is
    refused: from the capability, with the targets that have it."""
    for name, capability in needs.items():
        if not TARGETS[target].can(capability):
            able = [other for other in TARGETS if TARGETS[other].can(capability)]
            raise JobFileError(refusal(target, f"cannot {capability.words}", able,
                                       flag(name), flag(name)))


def refusal(target: str, cannot: str, able: list[str], shown: str, dropped: str) -> str:
    """The one line of both: "`--spot`: the local target cannot run spot capacity: add
    --target vertex, or drop --spot"."""
    fix = f"add --target {able[0]}, or drop {dropped}" if able else f"drop {dropped}"
    return f"{shown}: the {target} target {cannot}: {fix}"


def flag_value(name: str, value: Any) -> Any:
    """One flag of a task that takes no job file (`endpoint.deploy --max-cost`, `predict
    --timeout-hours`), checked as the job field of that name checks it; its default when not
    given. So a budget or a timeout means the same, and is refused the same, everywhere."""
    field = field_named(name)
    return default(field) if value in (None, "") else _value(field, value, flag(name))


def _given(value: Any) -> bool:
    """invoke's "not on the command line": None, False, or an empty repeatable flag."""
    return value is not None and value is not False and value != [] and value != ()


def _from_file(task: str, file: Mapping[str, Any], source: str
               ) -> dict[tuple[str | None, str], _Given]:
    """The values `task` reads from the file (in this version's layout), by (the target
    whose own option it is, None for a neutral field; the field's name): the top's, its own
    section's, each target's section's. Every key of the file is checked, whichever task or
    target reads it, so a misplaced key is never ignored."""
    found: dict[tuple[str | None, str], _Given] = {}
    for path, field, owner, value in _keys(file, source):
        checked = _value(field, value, f"{flag(field.name)} (in {source})")
        in_section = path[0] in SECTIONS.values()
        if task in field.metadata["tasks"] and in_section == _in_section(field, task) and \
                (not in_section or path[0] == SECTIONS[task]):
            where = ": ".join(path)
            found[owner, field.name] = _Given(field, checked, f"{where} (in {source})",
                                              f"{where} from {source}")
    return found


def _keys(file: Mapping[str, Any], source: str
          ) -> Iterator[tuple[tuple[str, ...], dataclasses.Field, str | None, Any]]:
    """Every value of the file: its path of keys, its field, the target whose own option it
    is (None: neutral). A key in the wrong place is refused, naming where it belongs."""
    for name, value in file.items():
        if name == "version":
            continue
        if name in TARGETS:
            yield from _target_keys(file, (name,), source)
        elif name in SECTIONS.values():
            task = next(t for t, s in SECTIONS.items() if s == name)
            for inner, inner_value in section(file, task, source).items():
                if inner in TARGETS:
                    yield from _target_keys(file, (name, inner), source)
                else:
                    yield (name, inner), _known(inner), None, inner_value
        elif (field := _known(name)) and _top_level(field):
            yield (name,), field, None, value
        else:
            where = _belongs(str(name))
            raise JobFileError(f"{source}: {str(name)[:80]!r} " + (
                f"belongs {where}" if where else
                "is not a key; a job file's keys are the flags' names (`invoke train "
                "--help`), plus `eval:` and `tune:` sections and one a target for its own "
                f"options ({', '.join(f'`{t}:`' for t in TARGETS)})"))


def _target_keys(file: Mapping[str, Any], path: tuple[str, ...], source: str
                 ) -> Iterator[tuple[tuple[str, ...], dataclasses.Field, str, Any]]:
    """The values of a target's section (`vertex:`, or `eval: vertex:`): its own options,
    each where some task reads it. Another target's option, or a neutral key, is refused
    naming the key, the section and where it belongs."""
    target = path[-1]
    found = file
    for part in path:
        found = found.get(part) or {}
    task = next((t for t, s in SECTIONS.items() if s == path[0]), None)  # eval: vertex:
    allowed = {key(field): field for field in own_options(target)
               if (field.metadata["section"] == task if task else _top_level(field))}
    shown = ": ".join(path)
    if not isinstance(found, Mapping):
        raise JobFileError(f"{source}: `{shown}:` is a mapping of the {target} target's own "
                           f"options: {', '.join(allowed) or 'it has none'}")
    for name, value in found.items():
        if name not in allowed:
            where = _belongs(str(name))
            raise JobFileError(f"{source}: `{shown}: {str(name)[:80]}` is not an option of "
                               f"the {target} target here" +
                               (f"; it belongs {where}" if where else
                                f" ({', '.join(allowed) or 'it has none'})"))
        yield (*path, name), allowed[name], target, value


def _known(name: str) -> dataclasses.Field | None:
    """The neutral field whose key is `name`."""
    return next((field for field in FIELDS.values() if key(field) == name), None)


def _belongs(name: str) -> str:
    """Where the key `name` goes in a file, in words ("in the `vertex:` section"); empty
    for no key at all."""
    sections = []
    if field := _known(name):
        owners: Mapping[str | None, dataclasses.Field] = {None: field}
    else:
        owners = options_by_name().get(name.replace("-", "_"), {})
    for target, field in owners.items():
        if _top_level(field):
            sections.append(f"in the `{target}:` section" if target else "at the top")
        if field.metadata["section"]:
            inner = f"{SECTIONS[field.metadata['section']]}:" + (f" {target}:" if target else "")
            sections.append(f"in the `{inner}` section")
    return " or ".join(sections)


def file_sweep(file: Mapping[str, Any], source: str) -> Mapping[str, Any]:
    """The sweep a job file's `tune:` section holds (empty: none)."""
    found = section(file, TUNE, source).get("sweep") or {}
    return _value(FIELDS["sweep"], found, f"--sweep (in {source})")


def section(file: Mapping[str, Any], task: str, source: str) -> Mapping[str, Any]:
    """`task`'s own section of the file (eval's machine, tune's sweep), checked: its neutral
    keys, and a section a target for the target's own options it reads there."""
    name = SECTIONS[task]
    found = file.get(name) or {}
    allowed = [key(f) for f in FIELDS.values() if _in_section(f, task)] + [
        target for target in TARGETS if any(_in_section(f, task) for f in own_options(target))]
    if not isinstance(found, Mapping):
        raise JobFileError(f"{source}: `{name}:` is a mapping of {', '.join(allowed)}")
    for inner in found:
        if inner not in allowed:
            where = _belongs(str(inner))
            raise JobFileError(f"{source}: `{name}: {str(inner)[:80]}` " + (
                f"belongs {where}" if where else
                f"is not a key: `{name}:` is a mapping of {', '.join(allowed)}"))
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
    if field.metadata["commas"]:
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
    known = experiment_fields.registered()
    if job.experiment not in known:
        close = difflib.get_close_matches(job.experiment, known, n=2)
        raise JobFileError(f"--experiment {job.experiment[:80]!r} is not a detection "
                           + (f"experiment (did you mean {' or '.join(close)}?): " if close
                              else "experiment: ")
                           + f"use {', '.join(EXPERIMENTS)} or one of Model Garden's "
                           "(`invoke models.pretrained` lists what fits each)")
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
    for name in (job.sweep.get("params") or {}) if isinstance(job.sweep, Mapping) else ():
        _field_kind(job.experiment, str(name), "--param")  # a sweep varies real fields too
    return check_overrides(job.experiment, job.override)


def trainer_args(job: JobFile, task: str) -> TrainArgs:
    """The trainer's arguments the file's values become (directories aside: the executor
    decides them): each field `task` takes on the TrainArgs field it `lands` on, plus what the
    kind sets itself (its mode). The launcher's checks of them are the trainer's (`check()`)."""
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
        """The file, with what the executor decided (a neutral field, or one of its target's
        own options: Vertex AI's region and image)."""
        if self.job.dataset or decided.get("dataset"):  # the data is the version, by name
            decided.pop("data_dir", None)
        decided = {name: value for name, value in decided.items() if value}
        own = {name: decided.pop(name) for name in list(decided) if name not in FIELDS}
        job = dataclasses.replace(self.job, **decided, target_options=dataclasses.replace(
            self.job.target_options, **own))
        return job.to_yaml(self.task, f"# invoke {self.task} --job FILE: this job again "
                                      "(flags given with it win)\n")


def written_keys(task: str) -> frozenset[str]:
    """The keys `Written(task, ...).text` can write at the top of a file (as `as_mapping`
    writes them): all a rerun of a run launched for `task` may replay."""
    fields = [*options(task), *(field for target in TARGETS
                                for field in own_options(target, task))]
    targets = {target for target in TARGETS
               if any(not _in_section(field, task) for field in own_options(target, task))}
    return frozenset({"version", *targets} |
                     {key(f) for f in options(task) if not _in_section(f, task)} |
                     ({SECTIONS[task]} if any(_in_section(f, task) for f in fields) else set()))


def given(flags: Mapping[str, Any]) -> frozenset[str]:
    """The fields and target options the command line gives (their values win over any
    file's)."""
    named = {*FIELDS, *options_by_name()}
    return frozenset(name for name, value in flags.items() if name in named and _given(value))


def into(job: JobFile, where: str) -> dict[str, Any]:
    """The job's own options (its target's) that go `where` (INTO), by name."""
    return {field.name: getattr(job.target_options, field.name)
            for field in dataclasses.fields(job.target_options)
            if field.metadata["into"] == where}


def request(job: JobFile, task: str) -> Request:
    """The job as the request executors run: the pretrained checkpoint resolved against
    the experiment, the hardware as the neutral Resources (its target's options ride
    along, checked by the target's `check` if it has one), the overrides as the trainer's."""
    customised = bool(job.config_file or job.params_override or any(
        (hparams.config_path(name) or "").startswith("task.model.") and
        name not in ("input_size", "task.model.input_size", "task.model.num_classes")
        for name in job.override))  # the model may differ from the recorded one
    init = pretrained.resolve(job.init_from, job.init_type, job.experiment, customised)
    resources = Resources.from_flags(accelerator=job.accelerator, tpu=job.tpu,
                                     workers=job.workers, spot=job.spot,
                                     flex_start=job.flex_start)
    if check := getattr(job.target_options, "check", None):
        check(resources)  # the target's own checks of its options with these needs
    args = dataclasses.replace(trainer_args(job, task), params_override=trainer_overrides(
        job), **({"init_checkpoint": init.checkpoint, "init_checkpoint_type": init.type}
                 if init else {}))
    kind = KINDS[task]
    return kind(args, resources, job.run_id, labels=dict(job.label),
                target_options=job.target_options, record=Written(task, job),
                **kind.own_values(job))
