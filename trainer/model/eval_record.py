"""One checkpoint's evaluation as a file (eval/ckpt-N.json), in one shape: the evaluator
writes it (`to_json`), and early stopping, `invoke runs.*` and the registry's gate read it
(`parse`), so a damaged or hostile file means the same thing to each of them: a value that
is not a finite number is left out, a part that is malformed is absent. TensorFlow-free."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from typing import Any

from trainer.common import files, io, jsonnum
from trainer.common.errors import JsonError


@dataclasses.dataclass(frozen=True)
class EvaluationRecord:
    step: int
    metrics: Mapping[str, float]  # COCO metrics, Model Garden's names (AP, AP50, mask_AP, ...)
    checkpoint: str = ""  # the checkpoint evaluated (its prefix)
    per_class: Mapping[str, Mapping[str, float]] = dataclasses.field(default_factory=dict)
    pr_curve: Mapping[str, list] | None = None  # recall and precision, as long as each other
    worst_images: tuple[Mapping, ...] = ()  # the report's gallery: errors and the picture
    # the F1-best score threshold, the confusion matrix there, P/R/F1
    # (trainer/evaluation/confusion.py)
    operating_point: Mapping[str, Any] | None = None
    # the records it read (a split's shard pattern): two evaluations compare only on the same
    data: str = ""
    path: str = dataclasses.field(default="", compare=False)  # where it is, not in it

    def to_json(self) -> dict[str, Any]:
        """The file's content; the breakdown (per class, PR curve, worst images) only when
        the evaluation had images to break down."""
        data: dict[str, Any] = {"checkpoint": self.checkpoint, "step": self.step,
                                "metrics": dict(self.metrics)}
        if self.per_class or self.pr_curve is not None or self.worst_images:
            data.update(per_class={name: dict(values) for name, values in self.per_class.items()},
                        pr_curve=self.pr_curve, worst_images=list(self.worst_images))
        if self.operating_point is not None:
            data["operating_point"] = dict(self.operating_point)
        if self.data:
            data["data"] = self.data
        return data

    @classmethod
    def parse(cls, data: object, step: int, path: str = "") -> EvaluationRecord | None:
        """The record in `data` (a parsed file of evaluation `step`); None without metrics."""
        if not isinstance(data, dict) or not isinstance(data.get("metrics"), dict):
            return None
        found = data.get("per_class")
        per_class = {str(name): _numbers(values) for name, values in found.items()
                     if isinstance(values, dict)} if isinstance(found, dict) else {}
        curve = data.get("pr_curve")
        if not (isinstance(curve, dict) and all(
                isinstance(curve.get(k), list) and all(jsonnum.number(v) is not None
                                                       for v in curve[k])
                for k in ("recall", "precision")) and
                len(curve["recall"]) == len(curve["precision"])):
            curve = None
        worst = data.get("worst_images")
        checkpoint = data.get("checkpoint")
        return cls(step, _numbers(data["metrics"]),
                   checkpoint if isinstance(checkpoint, str) else "", per_class, curve,
                   tuple(w for w in worst if isinstance(w, dict))
                   if isinstance(worst, list) else (), operating_point(
                       data.get("operating_point")),
                   read if isinstance(read := data.get("data"), str) else "", path)

    @classmethod
    def read(cls, path: str, step: int) -> EvaluationRecord | None:
        """The file at `path` (local or gs://), bounded; None if it is missing, too large,
        not JSON or holds no metrics."""
        limit = files.MAX_RUN_JSON_BYTES
        try:  # a local file by its size: never `limit` bytes allocated for a small one
            data = jsonnum.loads(io.read_text(path, limit + 1), limit, path) \
                if io.is_url(path) else jsonnum.read_file(path, limit)
        except (JsonError, OSError):
            return None
        return cls.parse(data, step, path)


def _numbers(values: Mapping) -> dict[str, float]:
    """The finite, in-range numbers (a 400-digit integer or NaN is left out: shown missing)."""
    return {str(k): number for k, v in values.items()
            if (number := jsonnum.number(v)) is not None}


SCORES = ("precision", "recall", "f1")


def _fraction(value: object) -> float | None:
    number = jsonnum.number(value)
    return number if number is not None and 0 <= number <= 1 else None


def operating_point(data: object) -> dict[str, Any] | None:
    """The recorded operating point, checked whole (None if any part is malformed): a
    threshold and scores in [0, 1], class names, a square matrix of counts as wide as the
    names, and each class's scores and own best threshold."""
    if not isinstance(data, dict):
        return None
    fractions = {k: _fraction(data.get(k)) for k in ("iou", "threshold", *SCORES)}
    names, matrix, per_class = data.get("classes"), data.get("confusion"), data.get("per_class")
    if None in fractions.values() or not isinstance(names, list) or len(names) < 2 or \
            not all(isinstance(n, str) for n in names) or len(set(names)) != len(names) or \
            not isinstance(matrix, list) or len(matrix) != len(names) or \
            not all(isinstance(row, list) and len(row) == len(names) and
                    all(type(n) is int and 0 <= n < 10**12 for n in row) for row in matrix) or \
            not isinstance(per_class, dict) or not set(per_class) <= set(names):
        return None
    classes = {}
    for name, values in per_class.items():
        keys = (*SCORES, "best_threshold", *(f"best_{k}" for k in SCORES))
        found = {k: _fraction(values.get(k)) if isinstance(values, dict) else None
                 for k in keys}
        if None in found.values():
            return None
        classes[name] = found
    overlap, source = data.get("overlap"), data.get("threshold_from")
    return {**fractions, "overlap": overlap if overlap in ("box", "mask") else "box",
            **({"threshold_from": source[:200]} if isinstance(source, str) else {}),
            "classes": list(names), "confusion": [list(row) for row in matrix],
            "per_class": classes}


def data_identity(input_path: str) -> str:
    """What an evaluation read, so that two are compared only on the same data: the files'
    pattern, and a digest of their names and sizes (a re-conversion to the same path is
    other data; the same shards named another way are the same). Local or gs://."""
    listed = sorted((path.rsplit("/", 1)[-1], io.size(path)) for path in io.match(input_path))
    digest = hashlib.sha256("\n".join(f"{n}:{size}" for n, size in listed).encode())
    return f"{input_path} ({len(listed)} files, sha256 {digest.hexdigest()[:16]})"

