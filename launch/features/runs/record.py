"""A training run as the files it left: what it trained (run.json), on what and how long and
whether it stopped early (training_summary.json), every evaluation (eval/ckpt-N.json, with AP
per class, the PR curve and its worst images) and every one on the test split
(eval-test/ckpt-N.json), the best checkpoint it keeps (best/best.json) and its loss (the
train/ TensorBoard events).

Read from a local directory: a local run's model directory, or the mirror of one in the
bucket. Files are input like any other: one that is missing, not JSON or holds no number is
left out (and the report says what is missing), never a traceback.
"""

from __future__ import annotations

import dataclasses
import os
import struct
from collections.abc import Iterator
from pathlib import Path

from trainer.common import jsonnum
from trainer.common.errors import JsonError
from trainer.common.files import (
    MAX_RUN_JSON_BYTES,
    METRICS_DIR,
    METRICS_FILE,
    RUN_FILE,
    TEST_METRICS_DIR,
    TRAINING_SUMMARY_FILE,
)
from trainer.model.best.choice import BEST, DEFAULT_CHOICE, Choice
from trainer.model.best.keeping import read_best
from trainer.model.eval_record import EvaluationRecord

LOSS_TAG = "total_loss"
LOGS_DIR = "logs"  # Vertex AI's AIP_TENSORBOARD_LOG_DIR, beside a run's checkpoints
LOSS_DIRS = ("train", f"../{LOGS_DIR}/train")
MAX_RECORD_BYTES = 64 << 20  # a TensorBoard summary record; a larger length is garbage


@dataclasses.dataclass(frozen=True)
class RunRecord:
    name: str
    path: Path  # the model directory here (a mirror for a run in the bucket)
    experiment: str | None = None
    hardware: str | None = None
    steps: int | None = None
    seconds: float | None = None
    evaluations: tuple[EvaluationRecord, ...] = ()  # by step
    losses: tuple[tuple[int, float], ...] = ()  # (step, total loss)
    cost: str | None = None  # for runs whose jobs Vertex AI knows
    best_step: int | None = None  # the step of the best checkpoint it keeps (best/)
    stopped: str | None = None  # why it stopped early, if it did
    choice: Choice = DEFAULT_CHOICE  # whose evaluation the report shows
    test_evaluations: tuple[EvaluationRecord, ...] = ()  # on the test split, by step

    @property
    def latest(self) -> EvaluationRecord | None:
        return self.evaluations[-1] if self.evaluations else None

    @property
    def shown(self) -> EvaluationRecord | None:
        """The evaluation `choice` names: the best checkpoint's (else the newest), the newest,
        or a step's (None: that step has none)."""
        at = {e.step: e for e in self.evaluations}
        if self.choice.kind == "step":
            return at.get(self.choice.step)
        if self.choice.kind == BEST and self.best_step in at:
            return at[self.best_step]
        return self.latest

    @property
    def shown_test(self) -> EvaluationRecord | None:
        """The test split's evaluation of the checkpoint shown (None: it has none)."""
        shown = self.shown
        return next((e for e in self.test_evaluations if shown and e.step == shown.step),
                    None)

    @property
    def shown_as(self) -> str:
        """Which checkpoint `shown` is: `best 300`, `latest 1000`, `ckpt-1200`."""
        evaluation = self.shown
        if evaluation is None:
            return "-"
        if self.choice.kind == "step":
            return str(self.choice)
        kind = "best" if self.choice.kind == BEST and evaluation.step == self.best_step \
            else "latest"
        return f"{kind} {evaluation.step}"


def _json(path: Path) -> dict | None:
    try:
        data = jsonnum.read_file(path, MAX_RUN_JSON_BYTES)
    except jsonnum.JsonError:
        return None
    return data if isinstance(data, dict) else None


def events(path: Path, max_record: int = MAX_RECORD_BYTES) -> Iterator:
    """The Event protos of a TensorBoard file, read without TensorFlow (TFRecord framing:
    length, its CRC, the record, its CRC). A truncated tail (a file still being written)
    ends the reading; a file that is not one, or a record declaring more than `max_record`
    bytes (no summary is that large), yields nothing more."""
    from google.protobuf.message import DecodeError
    from tensorboard.compat.proto import event_pb2

    with open(path, "rb") as stream:
        while len(header := stream.read(12)) == 12:
            (length,) = struct.unpack("<Q", header[:8])
            if length > max_record:
                return
            record = stream.read(length)
            if len(record) != length or len(stream.read(4)) != 4:
                return
            try:
                yield event_pb2.Event.FromString(record)
            except DecodeError:
                return


def _scalar(array) -> float | None:
    """A one-value numeric tensor as a finite float; None for anything else (two values, text)."""
    return jsonnum.number(array.item()) if array.size == 1 else None


def losses(model_dir: Path) -> tuple[tuple[int, float], ...]:
    """The total loss at each step the trainer summarised (TensorBoard events)."""
    from tensorboard.util import tensor_util

    found: dict[int, float] = {}
    for sub in LOSS_DIRS:
        for path in sorted((model_dir / sub).glob("events.out.tfevents.*")):
            for event in events(path):
                for value in event.summary.value:
                    if value.tag != LOSS_TAG:
                        continue
                    number = _scalar(tensor_util.make_ndarray(value.tensor)) \
                        if value.HasField("tensor") else jsonnum.number(value.simple_value)
                    if number is not None:
                        found[int(event.step)] = number
    return tuple(sorted(found.items()))


def _best_step(model_dir: Path) -> int | None:
    try:
        kept = read_best(str(model_dir))
    except (JsonError, OSError):
        return None  # a damaged record keeps no best: the newest is shown
    return kept.step if kept else None


def load_run(model_dir: Path, name: str | None = None, cost: str | None = None,
             choice: Choice = DEFAULT_CHOICE) -> RunRecord:
    """Everything the run's files say (what they lack stays None or empty)."""
    run = _json(model_dir / RUN_FILE) or {}
    summary = _json(model_dir / TRAINING_SUMMARY_FILE) or {}
    stopped = summary.get("stopped_early")
    evaluations = read_evaluations(model_dir / METRICS_DIR)
    steps = jsonnum.whole(summary.get("steps"))
    text = lambda value: value if isinstance(value, str) else None  # noqa: E731
    return RunRecord(
        name=name or model_dir.name, path=model_dir,
        experiment=text(run.get("experiment")) or text(summary.get("experiment")),
        hardware=text(summary.get("hardware")),
        steps=steps if steps is not None else (evaluations[-1].step if evaluations else None),
        seconds=jsonnum.number(summary.get("seconds")), evaluations=evaluations,
        losses=losses(model_dir), cost=cost, best_step=_best_step(model_dir),
        stopped=stopped[:300] if isinstance(stopped, str) else None, choice=choice,
        test_evaluations=read_evaluations(model_dir / TEST_METRICS_DIR))


def read_evaluations(directory: Path) -> tuple[EvaluationRecord, ...]:
    """The evaluation records of a directory (eval/ or eval-test/), by step."""
    found = []
    for path in directory.glob("ckpt-*.json"):
        if (match := METRICS_FILE.fullmatch(path.name)) and \
                (evaluation := EvaluationRecord.read(str(path), int(match[1]))):
            found.append(evaluation)
    return tuple(sorted(found, key=lambda e: e.step))


def find_runs(root: Path, skip: tuple[Path, ...] = ()) -> Iterator[Path]:
    """Model directories below `root` (they hold run.json), not following symlinks and not
    looking inside `skip` (the bucket's mirror)."""
    skipped = {p.resolve() for p in skip}
    for folder, subfolders, files in os.walk(root):
        here = Path(folder)
        if here.resolve() in skipped:
            subfolders[:] = []
            continue
        if RUN_FILE in files:
            yield here
        subfolders.sort()
