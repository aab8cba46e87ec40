"""best/: the run's best checkpoint kept apart from the rotated ones, and best/best.json
naming it; `after_evaluation` is what every evaluator calls. Its own module because writing
best/ safely (copy, replace, forget; a lock between local writers) is a protocol of its own."""

from __future__ import annotations

import dataclasses
import datetime
import json
import sys
from collections.abc import Callable, Sequence

from trainer.common import files, io, jsonnum, locks
from trainer.common.errors import JsonError
from trainer.model.best.stopping import (
    Score,
    Verdict,
    gains,
    judge,
    run_rule,
    scores,
    write_verdict,
)
from trainer.model.experiments import GOALS

LOCK_FILE = ".writer.lock"  # in best/: local evaluators of a run take turns


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



def _json(value: dict) -> str:
    return json.dumps(value, indent=2) + "\n"
