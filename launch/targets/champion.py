"""Champion and challenger: a run's model reaches the registry (`model.upload`) or an endpoint
(`endpoint.deploy`) only when it is no worse than the version serving now, measured the same
way: both checkpoints evaluated on the test split (`invoke eval --split test`), of the same
data. The measure is the experiment's gate metric (AP50 of boxes, or of masks) or, with
`--gate-class`, one class's recall at the operating point. Worse by more than `--max-drop` is
refused with both figures; `--force REASON` uploads anyway and the version records why.

As TFX's Evaluator blesses a model only against the serving baseline; unlike the fixed AP50
floor of a target's registry (Vertex AI's `models.gate`), which catches a broken run, this
judges a good one. Every target that serves models judges by it, and so does the local
pipeline (launch/features/pipeline/steps.py); how a version records what it was judged on is
the target's (Vertex AI: its labels, vertex/models.py).

The test records are files in `runs/`, which people and jobs can write, so nothing in them is
taken on trust: a serving version's record that exists but cannot be read (truncated, over
the read bound, a NaN figure, no `data`) refuses, as does one that is not the record the
version was judged on at its upload (each version keeps the sha256 of the records it was
judged on, with their run, checkpoint and data: `vouch`); `--force REASON` goes ahead anyway.
A record a caller's own evaluation wrote (`vouched`) stands for itself.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re

from launch.context.places import RunPaths, label_value
from launch.errors import InputError
from launch.stores.gcs.upload import read_bytes
from trainer.common import jsonnum
from trainer.common.files import MAX_RUN_JSON_BYTES, RUNS_PREFIX, TEST_METRICS_DIR, metrics_file
from trainer.model.eval_record import EvaluationRecord

DEFAULT_MAX_DROP = 0.01  # a test split of a few hundred objects moves AP50 by about this
# how much of a record's sha256 a version keeps (a label value is 63 characters at most, so
# its first 60 hexadecimal digits, 240 bits)
SHA_IN_LABEL = 60


class GateError(InputError):
    """A run whose evaluation does not allow it into the registry."""


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
    sha256: str = ""  # of the record it was read from ("": not known)
    where: str = ""  # that record

    def said(self) -> str:
        return f"{self.value:.3f} (run {self.run_id}, ckpt-{self.step})"


@dataclasses.dataclass(frozen=True)
class Unreadable:
    """A test record that exists but gives no figure the gate may use: why, in one line."""

    problem: str


class Refused(GateError):
    """The gate's refusal: what is wrong (`problem`), then what the person who asked can do;
    a pipeline, which takes no --force, says its own (pipeline/steps.py: refusal)."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(f"{problem}; {fix}")
        self.problem = problem


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The gate's pass, and what it judged."""

    line: str  # what the dry run and the upload print
    forced: str | None = None  # the reason given with --force, when it decided
    challenger: Figure | None = None  # what was judged, for the version's labels
    champion: Figure | None = None


def check_max_drop(max_drop: float | None) -> float:
    if max_drop is None:
        return DEFAULT_MAX_DROP
    if not 0 <= max_drop < 1:  # NaN fails both
        raise InputError(f"--max-drop {max_drop}: give the most the measure may fall below the "
                         f"serving version's, 0 to 1 (default {DEFAULT_MAX_DROP})")
    return max_drop


@dataclasses.dataclass(frozen=True)
class Challenge:
    """How a run is set against the version serving now: --max-drop, --gate-class, --force."""

    max_drop: float | None = None
    gate_class: str | None = None
    force: str | None = None
    # the sha256 of test records the caller's own evaluations wrote (the pipeline's
    # evaluate step): the run's must be one, and a serving version's one stands for itself
    vouched: frozenset[str] = frozenset()

    def checked(self) -> Challenge:
        return Challenge(check_max_drop(self.max_drop), self.gate_class,
                         check_force(self.force), self.vouched)


def check_force(reason: str | None) -> str | None:
    """--force's reason: it goes into the version's description, so it says something."""
    if reason is None:
        return None
    words = " ".join(reason.split())
    if not 3 <= len(words) <= 300 or not words.isprintable():
        raise InputError("--force: give the reason, 3 to 300 printable characters (it is "
                         "recorded in the version's description)")
    return words


def judge(measure: Measure, challenger: Figure | None, champion: Figure | Unreadable | None,
          serving: str | None, max_drop: float, force: str | None, run_id: str,
          step: int, serving_run: str = "RUN") -> Verdict:
    """Pass (a Verdict to print) or GateError naming both figures. `serving`: the version
    serving now (None: nothing serves yet), from run `serving_run`; `champion`: its figure
    (None: not evaluated on the test split; Unreadable: a record there that cannot be
    trusted, which refuses as a worse figure does)."""
    name = measure.words()
    if serving is None:
        return Verdict("champion: no version serving yet; nothing to compare against",
                       challenger=challenger)
    if champion is None:  # nothing measured to hold the run to: said, not refused
        return Verdict(f"champion: {serving} has no test evaluation of its checkpoint; not "
                       f"compared (evaluate it: `invoke eval --target vertex --run-id "
                       f"{serving_run} --split test`)", challenger=challenger)
    problem = fix = None
    if isinstance(champion, Unreadable):
        problem = f"the serving version ({serving}): {champion.problem}"
        fix = (f"restore it, or evaluate run {serving_run} on the test split again "
               f"(`invoke eval --target vertex --run-id {serving_run} --split test`) and "
               "pass --force REASON to go ahead")
    elif challenger is None:
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
    held = champion if isinstance(champion, Figure) else None
    if problem is None:
        return Verdict(f"champion: {name} on the test split {challenger.value:.3f} against "
                       f"the serving version's {champion.said()} ({serving}): no worse than "
                       f"{max_drop:g} below", challenger=challenger, champion=held)
    if force:
        return Verdict(f"champion: {problem}; going ahead: --force {force!r}", force,
                       challenger, held)
    raise Refused(problem, fix)


@dataclasses.dataclass(frozen=True)
class TestRecord:
    """A test evaluation's file as read: where, the sha256 of its bytes, and what it says
    (None, with `problem`: nothing the gate can use)."""

    where: str
    sha256: str
    evaluation: EvaluationRecord | None
    problem: str = ""


def test_record(storage, run: RunPaths, step: int) -> TestRecord | None:
    """The run's test evaluation of ckpt-`step` (eval-test/ckpt-N.json), read bounded (one
    byte past the bound tells a larger file); None when there is no such file."""
    name = f"{RUNS_PREFIX}/{run.run_id}/checkpoints/{TEST_METRICS_DIR}/{metrics_file(step)}"
    data = read_bytes(storage, run.bucket, name, MAX_RUN_JSON_BYTES)
    return None if data is None else read_record(data, step, f"gs://{run.bucket}/{name}")


def read_record(data: bytes, step: int, where: str) -> TestRecord:
    """A test record's bytes (at most one past the bound) as the gate reads them."""
    digest = hashlib.sha256(data).hexdigest()
    try:
        found = jsonnum.loads(data, MAX_RUN_JSON_BYTES, where)
    except jsonnum.JsonError as error:
        return TestRecord(where, digest, None, str(error).removeprefix(f"{where} "))
    evaluation = EvaluationRecord.parse(found, step, where)
    return TestRecord(where, digest, evaluation, "" if evaluation else "it holds no metrics")


def figure(record: EvaluationRecord | None, run_id: str, measure: Measure) -> Figure | None:
    """The measure of a test evaluation, or None when it has none or says not what it read."""
    value = measure.of(record) if record else None
    if value is None or not record.data:
        return None
    return Figure(run_id, record.step, value, record.data)


def read_figure(record: TestRecord | None, run_id: str, measure: Measure
                ) -> Figure | Unreadable | None:
    """A test record's figure, with the record's sha256; None when there is no record, and
    Unreadable when there is one the gate cannot use: damaged, too large, without its data
    or without the measure (a NaN figure is no figure)."""
    if record is None:
        return None
    if record.evaluation is None:
        return Unreadable(f"its test record {record.where} cannot be read ({record.problem})")
    found = figure(record.evaluation, run_id, measure)
    if found is None:
        lacks = ("`data` (which test records it read)" if not record.evaluation.data else
                 f"finite {measure.words()}")
        return Unreadable(f"its test record {record.where} has no {lacks}")
    return dataclasses.replace(found, sha256=record.sha256, where=record.where)


def owned(found: Figure, vouched: frozenset[str]) -> bool:
    """Whether the run's record is one the caller's own evaluation wrote (`vouched`; none
    given: not known, and taken as read)."""
    return not vouched or found.sha256 in vouched


def own(found: Figure, vouched: frozenset[str]) -> Figure:
    """The run's figure, when its record is `owned`."""
    if not owned(found, vouched):
        raise Refused(f"run {found.run_id}'s test record {found.where} is not the one its "
                      "evaluation wrote (rewritten since)", "evaluate it again")
    return found


def data_label(data: str) -> str:
    """A record's `data` as a label: the digest of the files it read (`sha256 D`), else the
    pattern as a label value."""
    found = re.search(r"sha256 ([0-9a-f]{1,64})\)$", data)
    return found[1] if found else label_value(data)


def vouch(found: Figure | Unreadable | None, judged: str, judged_data: str,
          vouched: frozenset[str]) -> Figure | Unreadable | None:
    """The serving version's figure, unless its record is not the one it was judged on at
    its upload (`judged`: that record's sha256, or its first 60 digits; "": not recorded)
    nor one the caller's own evaluation wrote (`vouched`): a record rewritten since (down,
    to let a weaker run through) refuses."""
    judged = judged[:SHA_IN_LABEL]
    if not isinstance(found, Figure) or not judged or \
            found.sha256[:SHA_IN_LABEL] == judged or found.sha256 in vouched:
        return found
    other = data_label(found.data) != judged_data
    return Unreadable(f"its test record (run {found.run_id}, ckpt-{found.step}) is not the "
                      f"one it was judged on (sha256 {judged[:12]}... at its upload, "
                      f"{found.sha256[:12]}... now{', on other test files' if other else ''}"
                      f", {found.value:.3f}): it was rewritten or evaluated again since")


def digest(data: str) -> str:
    """The part of a record's `data` that says which files it read (`PATTERN (N files,
    sha256 D)`): the same shards named two ways compare equal; an older record's bare
    pattern compares as itself."""
    head, _, tail = data.rpartition(" (")
    return tail.rstrip(")") if head and " files, sha256 " in tail else data
