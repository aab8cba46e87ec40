"""A run's best checkpoint, and early stopping: what an evaluator does after each evaluation,
and what the trainer, export and the launcher read.

Every evaluation (eval/ckpt-N.json) holds the experiment's metric (`Experiment.metric`: AP
unless it says otherwise). After each one the evaluator (an eval job beside training, or the
training chief itself between its loops) ranks them all with `judge` and brings the run's
best/ up to date: a copy of the best checkpoint's files and best/best.json naming it. best/
lies apart from the checkpoints Model Garden's manager rotates (it deletes only what its
`checkpoint` file lists), so `trainer.max_to_keep` never removes the best.

An update never shows a reader a half-made pair: the new checkpoint's files are copied first,
best.json is replaced whole (a rename here; one object upload on Cloud Storage), and only
then are the previous best's files deleted. A crash between two of these leaves the previous
pair intact, and stray files that the next update reuses or deletes. Local evaluators of one
run take turns (a lock); Cloud Storage has no lock, so each writer re-reads best.json just
before replacing it and never replaces a better one: two eval jobs on one run converge.

With early stopping (`--early-stop-patience N`, recorded in run.json so an eval job needs no
flag of its own) the evaluator also writes the verdict, early_stop.json; the trainer reads it
at its loop boundaries and stops.

No TensorFlow at import: the launcher parses --checkpoint and reads best.json with this.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import sys
from collections.abc import Callable, Sequence

from trainer import files, io, jsonnum
from trainer.errors import JsonError, SettingsError
from trainer.experiments import GOALS, MAXIMIZE, ranking

TRAINER, EVAL_JOB = "trainer", "eval-job"  # who evaluates for early stopping
EVALUATORS = (TRAINER, EVAL_JOB)
LOCK_FILE = ".writer.lock"  # in best/: local evaluators of a run take turns


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
    return (f"no {metric} {change} > {stopping.min_delta:g} in {stopping.patience} "
            f"evaluations; best step {verdict.best_step}")


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
    from trainer import model_dir as model_dir_lib

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
            found.append(Score(int(match[1]), _metric(path, metric)))
    return sorted(found, key=lambda score: score.step)


def _metric(path: str, metric: str) -> float | None:
    try:
        data = jsonnum.loads(io.read_text(path, files.MAX_RUN_JSON_BYTES + 1),
                             files.MAX_RUN_JSON_BYTES, path)
    except (JsonError, OSError):
        return None
    metrics = data.get("metrics") if isinstance(data, dict) else None
    return jsonnum.number(metrics.get(metric)) if isinstance(metrics, dict) else None


def verdict_path(model_dir: str) -> str:
    return f"{model_dir}/{files.EARLY_STOP_FILE}"


def write_verdict(model_dir: str, verdict: Verdict, rule: RunRule) -> None:
    import json

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


# --- best/ -----------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Best:
    """best/best.json: which checkpoint best/ holds, and the value that made it the best."""

    step: int
    metric: str
    value: float
    goal: str
    evaluated_at: str

    @property
    def checkpoint(self) -> str:
        return files.checkpoint_name(self.step)

    def as_json(self) -> dict:
        return {"step": self.step, "metric": self.metric, "value": self.value,
                "goal": self.goal, "checkpoint": self.checkpoint,
                "evaluated_at": self.evaluated_at}

    def describe(self) -> str:
        return f"{self.metric} {self.value:.4f} at step {self.step}"

    @classmethod
    def parse(cls, data: object, where: str) -> Best:
        """A best.json document (written by any job, so checked); JsonError naming `where`."""
        if isinstance(data, dict):
            step, value = jsonnum.whole(data.get("step")), jsonnum.number(data.get("value"))
            metric, goal, at = data.get("metric"), data.get("goal"), data.get("evaluated_at")
            if step is not None and step >= 0 and value is not None and goal in GOALS and \
                    isinstance(metric, str) and metric.isidentifier() and \
                    isinstance(at, str) and len(at) < 64 and \
                    data.get("checkpoint") == files.checkpoint_name(step):
                return cls(step, metric, value, goal, at)
        raise JsonError(f"{where} is not a best checkpoint's record (step, metric, value, goal, "
                        "checkpoint ckpt-STEP, evaluated_at)")


def best_dir(model_dir: str) -> str:
    return f"{model_dir}/{files.BEST_DIR}"


def best_path(model_dir: str) -> str:
    return f"{best_dir(model_dir)}/{files.BEST_FILE}"


def read_best(model_dir: str) -> Best | None:
    """The run's best.json (None: no best kept yet); JsonError when it is no such record."""
    path = best_path(model_dir)
    if not io.exists(path):
        return None
    return Best.parse(jsonnum.loads(io.read_text(path, files.MAX_RUN_JSON_BYTES + 1),
                                    files.MAX_RUN_JSON_BYTES, path), path)


def after_evaluation(model_dir: str) -> Verdict:
    """What an evaluator does after each evaluation of the run in `model_dir`: judge every
    evaluation, bring best/ to the best one, and (with early stopping) write the verdict."""
    rule = run_rule(model_dir)
    found = scores(model_dir, rule.metric)
    stopping = rule.stopping
    verdict = judge(found, stopping.patience if stopping else None,
                    stopping.min_delta if stopping else 0.0, rule.goal)
    if verdict.best_step is not None:
        keep(model_dir, Best(verdict.best_step, rule.metric, verdict.best_value, rule.goal,
                             _evaluated_at(model_dir, verdict.best_step)), found)
    if stopping:
        write_verdict(model_dir, verdict, rule)
    return verdict


def keep(model_dir: str, candidate: Best, found: Sequence[Score] = (),
         say: Callable[[str], None] = lambda text: print(f"warning: {text}", file=sys.stderr)
         ) -> Best | None:
    """best/ holding `candidate`'s checkpoint, unless it holds one that ranks above it (as
    the judge ranks: value, then the earlier step); returns what best/ holds after. `found`,
    the evaluations, say which strays can go."""
    from trainer import locks

    with locks.taking_turns(best_dir(model_dir), LOCK_FILE):
        current = _intact_best(model_dir)
        if current and not _better(candidate, current):
            return current
        source = f"{model_dir}/{candidate.checkpoint}"
        shards = _checkpoint_files(source)
        if not shards:
            say(f"the best evaluated checkpoint {source} is gone (rotated away before it "
                "could be kept: raise trainer.max_to_keep), so best/ stays as it was")
            return current
        _copy(shards, best_dir(model_dir))
        again = _intact_best(model_dir)  # a second writer may have kept a better one
        if again and again != current and not _better(candidate, again):
            return again
        io.replace_text(best_path(model_dir), _json(candidate.as_json()))
        _forget(model_dir, candidate, current, found)
        return candidate


def _better(candidate: Best, current: Best) -> bool:
    """Whether `candidate` should replace `current`: another rule, or it ranks above."""
    return candidate.step != current.step and (
        candidate.metric != current.metric or candidate.goal != current.goal or
        _outranks(candidate.value, candidate.step, current))


def _outranks(value: float, step: int, than: Best) -> bool:
    """A better value, or an equal one evaluated at an earlier step (as the judge ranks)."""
    return gains(value, than.value, 0.0, than.goal) or (value == than.value and
                                                         step < than.step)


def _intact_best(model_dir: str) -> Best | None:
    """best.json if it reads and the checkpoint it names is there (else: none kept)."""
    try:
        found = read_best(model_dir)
    except (JsonError, OSError):
        return None
    if found is None or not _checkpoint_files(f"{best_dir(model_dir)}/{found.checkpoint}"):
        return None
    return found


def _checkpoint_files(prefix: str) -> list[str]:
    """A checkpoint's files, data shards first and its index last; none unless both are
    there (the index is what says a checkpoint is whole)."""
    found = io.glob(f"{prefix}.*")
    data = sorted(p for p in found if p.startswith(f"{prefix}.data-"))
    index = [p for p in found if p == f"{prefix}.index"]
    return data + index if data and index else []


def _copy(sources: list[str], directory: str) -> None:
    for source in sources:  # the index last: a reader finds the data whole before it
        io.copy(source, f"{directory}/{source.rsplit('/', 1)[-1]}")


def _forget(model_dir: str, kept: Best, replaced: Best | None, found: Sequence[Score]) -> None:
    """Deletes the checkpoint `kept` replaced, and strays of crashed updates that rank no
    better (never one a concurrent writer may be keeping: a better one, or one not judged)."""
    ranked = {s.step: s.value for s in found}
    for path in io.glob(f"{best_dir(model_dir)}/ckpt-*"):
        name = path.rsplit("/", 1)[-1].split(".", 1)[0]
        match = files.CHECKPOINT_NAME.fullmatch(name)
        if not match or int(match[1]) == kept.step:
            continue
        step = int(match[1])
        value = ranked.get(step)
        done = (replaced is not None and step == replaced.step) or (
            step in ranked and (value is None or not _outranks(value, step, kept)))
        if done:
            io.remove(path)


def _evaluated_at(model_dir: str, step: int) -> str:
    """When the evaluation of `step` was written (its file's time)."""
    seconds = io.modified(f"{model_dir}/{files.METRICS_DIR}/{files.metrics_file(step)}")
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).isoformat(timespec="seconds")


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def _json(value: dict) -> str:
    import json

    return json.dumps(value, indent=2) + "\n"


# --- which checkpoint: --checkpoint best | latest | STEP | PATH ------------------------------

BEST, LATEST = "best", "latest"


@dataclasses.dataclass(frozen=True)
class Choice:
    """What `--checkpoint` asks for: the best (the default), the newest, a step, or (the
    trainer's tools only) a checkpoint prefix."""

    kind: str = BEST  # BEST, LATEST, "step" or "path"
    step: int | None = None
    path: str | None = None

    @classmethod
    def parse(cls, text: str | None, flag: str = "--checkpoint", paths: bool = True
              ) -> Choice:
        """`best` (or nothing), `latest`, `1200`, `ckpt-1200`, or with `paths` a prefix
        (`.../ckpt-1200`); SettingsError naming `flag` for anything else."""
        text = (text or BEST).strip()
        if text in (BEST, LATEST):
            return cls(text)
        match = files.CHECKPOINT_NAME.fullmatch(text)
        if text.isdigit() or match:
            return cls("step", int(text if text.isdigit() else match[1]))
        if paths and "/" in text.rstrip("/"):
            return cls("path", path=text.rstrip("/"))
        where = ", or a checkpoint prefix (.../ckpt-1200)" if paths else ""
        raise SettingsError(f"{flag} {text[:80]!r}: give best (the default), latest, a step "
                            f"(1200) or a checkpoint name (ckpt-1200){where}")

    def __str__(self) -> str:
        if self.kind == "step":
            return files.checkpoint_name(self.step)
        return self.path if self.kind == "path" else self.kind


DEFAULT_CHOICE = Choice()


@dataclasses.dataclass(frozen=True)
class Chosen:
    path: str  # the checkpoint prefix
    choice: str  # BEST or LATEST as decided (a fallback says LATEST), or "asked"
    reason: str  # for people: the record of an export says it


def note(text: str) -> None:
    print(f"note: {text}", file=sys.stderr, flush=True)


def choose(model_dir: str, choice: Choice, model=None, say: Callable[[str], None] = note
           ) -> Chosen:
    """The checkpoint `choice` names in `model_dir`, checked to restore (into `model`, when
    given). The best falls back to the newest, saying why, in a run that keeps none."""
    from trainer import model_dir as model_dir_lib

    if choice.kind == "path":
        return Chosen(model_dir_lib.export_checkpoint(model_dir, choice.path, model),
                      "asked", f"{choice.path}, as asked (--checkpoint)")
    if choice.kind == "step":
        prefix = f"{model_dir}/{choice}"
        kept = _readable_best(model_dir, say)
        if not io.exists(f"{prefix}.index") and kept and kept.step == choice.step:
            prefix = f"{best_dir(model_dir)}/{kept.checkpoint}"  # rotated away, kept as best
        return Chosen(model_dir_lib.export_checkpoint(model_dir, prefix, model), "asked",
                      f"{choice}, as asked (--checkpoint)")
    if choice.kind == BEST:
        kept = _readable_best(model_dir, say)
        if kept is None:
            say(f"{model_dir} keeps no best checkpoint yet ({files.BEST_DIR}/"
                f"{files.BEST_FILE} is written when a checkpoint is evaluated): using the "
                "newest")
        else:
            prefix = f"{best_dir(model_dir)}/{kept.checkpoint}"
            problem = model_dir_lib.checkpoint_problem(prefix, model)
            if problem is None:
                return Chosen(prefix, BEST, f"the best evaluated: {kept.describe()}")
            say(f"the best checkpoint {prefix} cannot be restored ({problem}): using the "
                "newest")
        return Chosen(model_dir_lib.export_checkpoint(model_dir, None, model), LATEST,
                      "the newest that restores (no usable best checkpoint)")
    return Chosen(model_dir_lib.export_checkpoint(model_dir, None, model), LATEST,
                  "the newest that restores (--checkpoint latest)")


def _readable_best(model_dir: str, say: Callable[[str], None]) -> Best | None:
    try:
        return read_best(model_dir)
    except JsonError as error:
        say(str(error))
        return None
