"""Champion and challenger: a run's model reaches the registry (`model.upload`) or an endpoint
(`endpoint.deploy`) only when it is no worse than the version serving now, measured the same
way: both checkpoints evaluated on the test split (`invoke eval --split test`), of the same
data. The measure is the experiment's gate metric (AP50 of boxes, or of masks) or, with
`--gate-class`, one class's recall at the operating point. Worse by more than `--max-drop` is
refused with both figures; `--force REASON` uploads anyway and the version records why.

As TFX's Evaluator blesses a model only against the serving baseline; unlike the fixed AP50
floor of `registry.gate`, which catches a broken run, this judges a good one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from google.cloud import aiplatform_v1

from launch.context.places import RunPaths
from launch.errors import InputError
from launch.features.serving.registry import GateError
from launch.stores.gcs.upload import read_json
from trainer import jsonnum
from trainer.eval_record import EvaluationRecord
from trainer.files import MAX_RUN_JSON_BYTES, RUNS_PREFIX, TEST_METRICS_DIR, metrics_file

DEFAULT_MAX_DROP = 0.01  # a test split of a few hundred objects moves AP50 by about this
DEFAULT_ALIAS = "default"
FORCED_LABEL = "forced"


@dataclasses.dataclass(frozen=True)
class Measure:
    """What is compared: a metric of the test evaluation, or a class's recall there."""

    metric: str  # the experiment's gate metric
    class_name: str | None = None

    def of(self, record: EvaluationRecord) -> float | None:
        if self.class_name is None:
            return record.metrics.get(self.metric)
        point = record.operating_point or {}
        found = point.get("per_class", {}).get(self.class_name)
        return found["recall"] if found else None

    def words(self) -> str:
        return self.metric if self.class_name is None else f"recall of {self.class_name!r}"


@dataclasses.dataclass(frozen=True)
class Figure:
    """One version's measure on the test split."""

    run_id: str
    step: int
    value: float
    data: str  # the test records it was measured on

    def said(self) -> str:
        return f"{self.value:.3f} (run {self.run_id}, ckpt-{self.step})"


@dataclasses.dataclass(frozen=True)
class Verdict:
    line: str  # what the dry run and the upload print
    forced: str | None = None  # the reason given with --force, when it decided


def check_max_drop(max_drop: float | None) -> float:
    if max_drop is None:
        return DEFAULT_MAX_DROP
    if not 0 <= max_drop < 1:  # NaN fails both
        raise InputError(f"--max-drop {max_drop}: give the most the measure may fall below the "
                         f"serving version's, 0 to 1 (default {DEFAULT_MAX_DROP})")
    return max_drop


def check_force(reason: str | None) -> str | None:
    """--force's reason: it goes into the version's description, so it says something."""
    if reason is None:
        return None
    words = " ".join(reason.split())
    if not 3 <= len(words) <= 300 or not words.isprintable():
        raise InputError("--force: give the reason, 3 to 300 printable characters (it is "
                         "recorded in the version's description)")
    return words


def judge(measure: Measure, challenger: Figure | None, champion: Figure | None,
          serving: str | None, max_drop: float, force: str | None, run_id: str,
          step: int, serving_run: str = "RUN") -> Verdict:
    """Pass (a Verdict to print) or GateError naming both figures. `serving`: the version
    serving now (None: nothing serves yet), from run `serving_run`; `champion`: its figure
    (None: not evaluated on the test split)."""
    name = measure.words()
    if serving is None:
        return Verdict("champion: no version serving yet; nothing to compare against")
    if champion is None:  # nothing measured to hold the run to: said, not refused
        return Verdict(f"champion: {serving} has no test evaluation of its checkpoint; not "
                       f"compared (evaluate it: `invoke eval --target vertex --run-id "
                       f"{serving_run} --split test`)")
    problem = fix = None
    if challenger is None:
        problem = (f"run {run_id}'s ckpt-{step} has no test evaluation to set against the "
                   f"serving version's {name} {champion.said()}")
        fix = f"evaluate it first: `invoke eval --target vertex --run-id {run_id} --split test`"
    elif digest(challenger.data) != digest(champion.data):
        problem = (f"run {run_id} was tested on {challenger.data[:200]}, the serving version "
                   f"({serving}) on {champion.data[:200]}")
        fix = (f"evaluate both on the same test split (`invoke eval --split test --run-id "
               f"{champion.run_id}` with the same data)")
    elif challenger.value < champion.value - max_drop:
        problem = (f"run {run_id}'s {name} on the test split is {challenger.said()}, the "
                   f"serving version's ({serving}) {champion.said()}: worse by "
                   f"{champion.value - challenger.value:.3f}, more than {max_drop:g} "
                   "(--max-drop)")
        fix = "train it further, or pass --force REASON to go ahead anyway"
    if problem is None:
        return Verdict(f"champion: {name} on the test split {challenger.value:.3f} against "
                       f"the serving version's {champion.said()} ({serving}): no worse than "
                       f"{max_drop:g} below")
    if force:
        return Verdict(f"champion: {problem}; going ahead: --force {force!r}", force)
    raise GateError(f"{problem}; {fix}")


def test_record(storage, run: RunPaths, step: int) -> EvaluationRecord | None:
    """The run's test evaluation of ckpt-`step` (eval-test/ckpt-N.json), or None."""
    name = f"{RUNS_PREFIX}/{run.run_id}/checkpoints/{TEST_METRICS_DIR}/{metrics_file(step)}"
    try:
        found = read_json(storage, run.bucket, name, MAX_RUN_JSON_BYTES)
    except jsonnum.JsonError:
        return None
    return EvaluationRecord.parse(found, step) if found is not None else None


def figure(record: EvaluationRecord | None, run_id: str, measure: Measure) -> Figure | None:
    """The measure of a test evaluation, or None when it has none or says not what it read."""
    value = measure.of(record) if record else None
    if value is None or not record.data:
        return None
    return Figure(run_id, record.step, value, record.data)



def digest(data: str) -> str:
    """The part of a record's `data` that says which files it read (`PATTERN (N files,
    sha256 D)`): the same shards named two ways compare equal; an older record's bare
    pattern compares as itself."""
    head, _, tail = data.rpartition(" (")
    return tail.rstrip(")") if head and " files, sha256 " in tail else data


def model_id(resource: str) -> str:
    """`projects/P/locations/L/models/ID@3` -> ID: a deployed model names its Model with the
    project's number or id, and a version or alias after '@'."""
    return resource.split("@", 1)[0].rsplit("/models/", 1)[-1]


def serving_version(place, parent: str, endpoints: Sequence[aiplatform_v1.Endpoint]
                    ) -> aiplatform_v1.Model | None:
    """The version of `parent` serving now: the one taking the most traffic on `endpoints`
    (a tie: the newest version), else the model's `default` alias, else None."""
    from google.api_core import exceptions

    found: list[tuple[int, int]] = []
    for target in endpoints:
        for deployed in target.deployed_models:
            if model_id(deployed.model) != model_id(parent):
                continue
            version = deployed.model_version_id or deployed.model.partition("@")[2]
            if version.isascii() and version.isdigit():
                found.append((target.traffic_split.get(deployed.id, 0), int(version)))
    names = [f"{parent}@{version}" for _, version in sorted(found, reverse=True)]
    for name in [*names, f"{parent}@{DEFAULT_ALIAS}"]:
        try:
            return place.models().get_model(name=name)
        except exceptions.NotFound:
            continue
    return None


def run_and_step(version: aiplatform_v1.Model) -> tuple[str, int] | None:
    """The run and checkpoint step a version was uploaded from (its labels), if it says."""
    run_id, step = version.labels.get("run"), version.labels.get("step", "")
    return (run_id, int(step)) if run_id and step.isascii() and step.isdigit() else None


def champion_figure(storage, version: aiplatform_v1.Model, run_of, measure: Measure
                    ) -> Figure | None:
    """The serving version's figure: None when its labels do not say its run and step (or
    name no run we could read), or its run has no test evaluation of that step."""
    found = run_and_step(version)
    try:
        return figure(test_record(storage, run_of(found[0]), found[1]), found[0], measure) \
            if found else None
    except InputError:  # a `run` label that is no run id of ours
        return None


def version_name(version: aiplatform_v1.Model) -> str:
    return f"{version.name}@{version.version_id}"
