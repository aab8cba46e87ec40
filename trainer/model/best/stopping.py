"""Early stopping: the rule, the judge that ranks a run's evaluations (its best, and whether
to stop), and the verdict the evaluator writes for the trainer to obey. Its own module because
the trainer, its settings and the launcher's job values read the rule without best/."""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
from collections.abc import Sequence

from trainer.common import files, io, jsonnum
from trainer.common.errors import JsonError
from trainer.model import model_dir as model_dir_lib
from trainer.model.eval_record import EvaluationRecord
from trainer.model.experiments import GOALS, MAXIMIZE, ranking

TRAINER, EVAL_JOB = "trainer", "eval-job"  # who evaluates for early stopping
EVALUATORS = (TRAINER, EVAL_JOB)


# --- early stopping: the rule and the judge --------------------------------------------------

@dataclasses.dataclass(frozen=True)
class EarlyStopping:
    """Stop after `patience` evaluations in a row without a gain of more than `min_delta` in
    the experiment's metric. `evaluator`: who evaluates the checkpoints meanwhile, the
    training chief between its loops (`trainer`) or an eval job beside it (`eval-job`)."""

    patience: int
    min_delta: float = 0.0
    evaluator: str = TRAINER

    def __post_init__(self) -> None:
        problem = rule_problem(self.patience, self.min_delta)
        if problem or self.evaluator not in EVALUATORS:
            raise ValueError(problem or f"evaluator {self.evaluator!r}")

    def as_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, value: object, where: str) -> EarlyStopping:
        """As run.json records it; JsonError naming `where` for anything else."""
        if isinstance(value, dict):
            patience, delta = jsonnum.whole(value.get("patience")), \
                jsonnum.number(value.get("min_delta"))
            evaluator = value.get("evaluator")
            if patience is not None and delta is not None and evaluator in EVALUATORS and \
                    rule_problem(patience, delta) is None:
                return cls(patience, delta, evaluator)
        raise JsonError(f"{where}: early_stop is not a patience of at least 1, a min_delta of "
                        f"at least 0 and an evaluator ({', '.join(EVALUATORS)})")


def rule_problem(patience: object, min_delta: object) -> str | None:
    """What is wrong with a patience and a minimum gain (None: nothing), words for messages."""
    if isinstance(patience, bool) or not isinstance(patience, int) or patience < 1:
        return f"the patience must be a whole number of evaluations, at least 1, got " \
               f"{patience!r}"
    if isinstance(min_delta, bool) or not isinstance(min_delta, (int, float)) or \
            not math.isfinite(min_delta) or min_delta < 0:
        return f"the minimum gain must be a finite number, at least 0, got {min_delta!r}"
    return None


@dataclasses.dataclass(frozen=True)
class Score:
    """One evaluation's value of the metric; None when it is no finite number (a damaged or
    NaN evaluation), which the judge leaves out."""

    step: int
    value: float | None


@dataclasses.dataclass(frozen=True)
class Verdict:
    stop: bool
    best_step: int | None  # the best value's (the earliest of equals); None: no value yet
    best_value: float | None
    since_best: int  # evaluations since the last gain of more than min_delta
    last_step: int | None  # the newest evaluation judged
    ignored: tuple[int, ...] = ()  # steps whose value was no number


def gains(value: float, reference: float, min_delta: float, goal: str) -> bool:
    """Whether `value` beats `reference` by more than `min_delta` (a tie is no gain)."""
    return value - reference > min_delta if goal == MAXIMIZE else reference - value > min_delta


def judge(evaluations: Sequence[Score], patience: int | None, min_delta: float = 0.0,
          goal: str = MAXIMIZE) -> Verdict:
    """The verdict on a run's evaluations, in step order: its best (the best value, the
    earliest of equal ones), and whether the last `patience` evaluations each failed to gain
    more than `min_delta` over the value of the last evaluation that did (patience None:
    never stop). Values that are no finite number are left out."""
    if patience is not None and (problem := rule_problem(patience, min_delta)):
        raise ValueError(problem)
    if goal not in GOALS:
        raise ValueError(f"goal {goal!r}: use {' or '.join(GOALS)}")
    steps = [e.step for e in evaluations]
    if steps != sorted(set(steps)):
        raise ValueError(f"evaluations are not in step order, once each: {steps}")
    best: Score | None = None
    reference: float | None = None  # the value of the last gain
    since, ignored = 0, []
    for evaluation in evaluations:
        value = evaluation.value
        if value is None or not math.isfinite(value):
            ignored.append(evaluation.step)
            continue
        if best is None or gains(value, best.value, 0.0, goal):
            best = Score(evaluation.step, value)
        if reference is None or gains(value, reference, min_delta, goal):
            reference, since = value, 0
        else:
            since += 1
    return Verdict(patience is not None and since >= patience,
                   best.step if best else None, best.value if best else None, since,
                   steps[-1] if steps else None, tuple(ignored))


def reason(verdict: Verdict, metric: str, stopping: EarlyStopping, goal: str) -> str:
    """`no AP gain > 0.001 in 3 evaluations; best step 300`: why a run stops."""
    change = "gain" if goal == MAXIMIZE else "fall"
    evaluations = "evaluation" if stopping.patience == 1 else "evaluations"
    return (f"no {metric} {change} > {stopping.min_delta:g} in {stopping.patience} "
            f"{evaluations}; best step {verdict.best_step}")


# --- the run's files: what ranks it, its evaluations, its verdict ---------------------------

@dataclasses.dataclass(frozen=True)
class RunRule:
    """How a run's checkpoints are ranked, and when it stops: from its run.json."""

    metric: str
    goal: str
    stopping: EarlyStopping | None


def run_rule(model_dir: str) -> RunRule:
    """JsonError for a run.json that is not one; a directory without one (checkpoints from
    elsewhere) is ranked by AP and never stops."""
    if not io.exists(f"{model_dir}/{files.RUN_FILE}"):
        return RunRule(*ranking(None), None)
    run = model_dir_lib.read_run_info(model_dir)
    metric, goal = ranking(run["experiment"])
    found = run.get("early_stop")
    return RunRule(metric, goal, None if found is None else EarlyStopping.from_json(
        found, f"{model_dir}/{files.RUN_FILE}"))


def scores(model_dir: str, metric: str) -> list[Score]:
    """The metric of every evaluation in the run, in step order (None where a file is
    damaged or holds no number for it)."""
    found = []
    for path in io.glob(f"{model_dir}/{files.METRICS_DIR}/ckpt-*.json"):
        match = files.METRICS_FILE.fullmatch(path.rsplit("/", 1)[-1])
        if match:
            record = EvaluationRecord.read(path, int(match[1]))
            found.append(Score(int(match[1]), record.metrics.get(metric) if record else None))
    return sorted(found, key=lambda score: score.step)


def verdict_path(model_dir: str) -> str:
    return f"{model_dir}/{files.EARLY_STOP_FILE}"


def write_verdict(model_dir: str, verdict: Verdict, rule: RunRule) -> None:
    stopping = rule.stopping
    io.replace_text(verdict_path(model_dir), json.dumps({
        **dataclasses.asdict(verdict), "ignored": list(verdict.ignored),
        "metric": rule.metric, "goal": rule.goal, **stopping.as_json(),
        "reason": reason(verdict, rule.metric, stopping, rule.goal) if verdict.stop else None,
        "judged_at": _now()}, indent=2) + "\n")


@dataclasses.dataclass(frozen=True)
class StopOrder:
    """A verdict to stop, as the trainer obeys it."""

    step: int  # the evaluation that decided it
    reason: str


def read_stop(model_dir: str, stopping: EarlyStopping) -> StopOrder | None:
    """The run's verdict if it says stop under this very rule (a verdict judged with another
    patience or minimum gain, from an earlier run in the directory, is not this run's)."""
    path = verdict_path(model_dir)
    try:
        if not io.exists(path):
            return None
        data = jsonnum.loads(io.read_text(path, files.MAX_RUN_JSON_BYTES + 1),
                             files.MAX_RUN_JSON_BYTES, path)
    except (JsonError, OSError):
        return None  # half-visible or damaged: the next evaluation writes it again
    if not isinstance(data, dict) or data.get("stop") is not True:
        return None
    step, why = jsonnum.whole(data.get("last_step")), data.get("reason")
    same = (jsonnum.whole(data.get("patience")) == stopping.patience and
            jsonnum.number(data.get("min_delta")) == stopping.min_delta)
    if not same or step is None or not isinstance(why, str):
        return None
    return StopOrder(step, why[:300])


def stopped_at(model_dir: str) -> int | None:
    """The step whose evaluation stopped the run early (None: it has not stopped)."""
    try:
        rule = run_rule(model_dir)
    except (JsonError, OSError):
        return None
    order = read_stop(model_dir, rule.stopping) if rule.stopping else None
    return order.step if order else None


def last_step(model_dir: str, train_steps: int) -> int:
    """The last step an evaluator of the run waits for: its training length, or the
    evaluation that stopped it early, so that an eval job ends with the run."""
    stopped = stopped_at(model_dir)
    return train_steps if stopped is None else min(train_steps, stopped)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
