"""What a detector gets wrong at the score you would serve it at: a confusion matrix with a
background row and column, precision, recall and F1 per class, and the score threshold that
maximises F1 (per class and overall). Pure numpy, on `analysis.ImageBoxes`, so the
evaluator, the export and the run report read one computation.

Matching follows supervision's `ConfusionMatrix` (MMDetection's `confusion_matrix.py` counts
the same cells): detections below the threshold are dropped; an object and a detection
overlapping by more than `MATCH_IOU` are candidates whatever their classes; candidates of the
same class are matched first, then by IoU, each object and each detection at most once. A
match of two classes is a confusion; an object left unmatched is missed (its row's
background column); a detection left unmatched is a false detection (the background row).
A mask model's images are matched by mask IoU.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from trainer.evaluation.analysis import (
    BOX,
    MASK,
    MATCH_IOU,
    ImageBoxes,
    iou_matrix,
    mask_iou_matrix,
)

BACKGROUND = "background"
MAX_THRESHOLDS = 200  # scores tried for the best F1 (candidate_thresholds says which)
MIN_THRESHOLD = 0.01  # below this a detection is noise, whatever F1 says


@dataclasses.dataclass(frozen=True)
class Matched:
    """One image made ready for matching at any threshold: its objects' and detections'
    class indices, the detections' scores and every object-detection overlap (computed
    once: a threshold only drops columns)."""

    truth: np.ndarray  # [n] row of each object
    found: np.ndarray  # [m] column of each detection
    scores: np.ndarray  # [m]
    overlap: np.ndarray  # [n, m] box or mask IoU

    @classmethod
    def of(cls, image: ImageBoxes, index: Mapping[int, int]) -> Matched:
        overlap = mask_iou_matrix(image.truth_masks, image.masks) if image.has_masks \
            else iou_matrix(image.truth, image.boxes)
        return cls(np.array([index[int(c)] for c in image.truth_classes], np.int64),
                   np.array([index[int(c)] for c in image.classes], np.int64),
                   np.asarray(image.scores, np.float64),
                   overlap.reshape(len(image.truth_classes), len(image.classes)))

    def counts(self, size: int, threshold: float, iou: float = MATCH_IOU) -> np.ndarray:
        """[size+1, size+1]: rows are the objects' classes then background, columns the
        detections' classes then background."""
        keep = self.scores >= threshold
        truth, found, overlap = self.truth, self.found[keep], self.overlap[:, keep]
        counts = np.zeros((size + 1, size + 1), np.int64)
        objects, detections = np.nonzero(overlap > iou)
        same = truth[objects] == found[detections]
        order = np.lexsort((-overlap[objects, detections], ~same))  # same class, then IoU
        matched_objects, matched_detections = set(), set()
        for k in order:
            o, d = int(objects[k]), int(detections[k])
            if o not in matched_objects and d not in matched_detections:
                counts[truth[o], found[d]] += 1
                matched_objects.add(o)
                matched_detections.add(d)
        for o, row in enumerate(truth):
            if o not in matched_objects:
                counts[row, size] += 1
        for d, column in enumerate(found):
            if d not in matched_detections:
                counts[size, column] += 1
        return counts


def class_ids(images: Sequence[ImageBoxes]) -> list[int]:
    """The classes an object or a detection carries: a label map's other classes (the 37
    breeds of Pets' map, of which a sample may hold 3) would add rows and columns of zeros."""
    return sorted({int(c) for i in images for c in (*i.truth_classes, *i.classes)})


def _prepared(images: Sequence[ImageBoxes], classes: Sequence[int]) -> list[Matched]:
    index = {class_id: k for k, class_id in enumerate(classes)}
    return [Matched.of(image, index) for image in images]


def _total(ready: Sequence[Matched], size: int, threshold: float, iou: float) -> np.ndarray:
    """Every prepared image's counts at `threshold`, added up."""
    total = np.zeros((size + 1, size + 1), np.int64)
    for image in ready:
        total += image.counts(size, threshold, iou)
    return total


def matrix(images: Sequence[ImageBoxes], classes: Sequence[int], threshold: float,
           iou: float = MATCH_IOU) -> np.ndarray:
    """The counts of `images` at `threshold`, [C+1, C+1] (`classes`: ids, in order)."""
    return _total(_prepared(images, classes), len(classes), threshold, iou)


@dataclasses.dataclass(frozen=True)
class Scores:
    precision: float
    recall: float
    f1: float

    def as_json(self) -> dict[str, float]:
        return {"precision": self.precision, "recall": self.recall, "f1": self.f1}


def _scores(tp: float, detected: float, objects: float) -> Scores:
    """Precision of `detected` detections, recall of `objects` objects; 0 where undefined
    (no detection, no object): a class nobody detects has nothing right."""
    precision = float(tp / detected) if detected else 0.0
    recall = float(tp / objects) if objects else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return Scores(precision, recall, f1)


def class_scores(counts: np.ndarray) -> list[Scores]:
    """Each class's precision, recall and F1 from a matrix: its diagonal cell against its
    column (everything detected as it) and its row (every object of it)."""
    size = counts.shape[0] - 1
    return [_scores(counts[k, k], counts[:, k].sum(), counts[k, :].sum()) for k in range(size)]


def overall_scores(counts: np.ndarray) -> Scores:
    """Every class at once (micro): right detections against all detections and objects."""
    size = counts.shape[0] - 1
    return _scores(np.trace(counts[:size, :size]), counts[:, :size].sum(),
                   counts[:size, :].sum())


def candidate_thresholds(images: Sequence[ImageBoxes]) -> list[float]:
    """The scores where F1 can change: each distinct detection score (at least
    MIN_THRESHOLD); when there are more than MAX_THRESHOLDS, half of them at the scores'
    quantiles and half evenly over [MIN_THRESHOLD, 1] (quantiles alone crowd into the dense
    low scores). MIN_THRESHOLD alone when nothing scores that much: everything missed."""
    scores = np.unique(np.concatenate([np.asarray(i.scores, np.float64) for i in images]
                                      or [np.zeros(0)]))
    scores = scores[(scores >= MIN_THRESHOLD) & (scores <= 1)]
    if len(scores) > MAX_THRESHOLDS:
        half = MAX_THRESHOLDS // 2
        scores = np.unique(np.concatenate([np.quantile(scores, np.linspace(0, 1, half)),
                                           np.linspace(MIN_THRESHOLD, 1, half)]))
    return [float(s) for s in scores] or [MIN_THRESHOLD]


def labels(classes: Sequence[int], names: Mapping[int, str]) -> tuple[str, ...]:
    """Each class's name, unique and never BACKGROUND's: a label map may name a class
    "background", or "class 7" beside an unnamed id 7; such a name gets its id."""
    found = [names.get(c, f"class {c}") for c in classes]
    return tuple(name if found.count(name) == 1 and name != BACKGROUND else f"{name} (id {c})"
                 for name, c in zip(found, classes, strict=True))


@dataclasses.dataclass(frozen=True)
class OperatingPoint:
    """The threshold that maximises overall F1, what it gives, and each class's own best."""

    threshold: float
    overall: Scores
    names: tuple[str, ...]  # the classes, then BACKGROUND: the matrix's rows and columns
    confusion: np.ndarray  # at `threshold`
    per_class: Mapping[str, Scores]  # at `threshold`
    best: Mapping[str, tuple[float, Scores]]  # each class's own F1-best threshold
    iou: float = MATCH_IOU
    overlap: str = BOX
    # where a threshold given, not found here, came from (the test split is measured at the
    # validation's: tuning on the test split would flatter it)
    threshold_from: str | None = None

    def as_json(self) -> dict:
        return {
            "iou": self.iou, "overlap": self.overlap, "threshold": self.threshold,
            **({"threshold_from": self.threshold_from} if self.threshold_from else {}),
            **self.overall.as_json(), "classes": list(self.names),
            "confusion": self.confusion.tolist(),
            "per_class": {name: {**scores.as_json(),
                                 "best_threshold": self.best[name][0],
                                 **{f"best_{k}": v
                                    for k, v in self.best[name][1].as_json().items()}}
                          for name, scores in self.per_class.items()}}


def operating_point(images: Sequence[ImageBoxes], names: Mapping[int, str],
                    iou: float = MATCH_IOU, at: tuple[float, str] | None = None
                    ) -> OperatingPoint | None:
    """The F1-best threshold over `images` and the matrix there; None without any object to
    judge (with objects and no detection: everything missed, recall 0). `names`: the label
    map (id -> name) that names the classes. `at`: (threshold, where it came from) to measure
    at instead of the F1-best one; each class's own best is still searched."""
    classes = class_ids(images)
    if not any(len(i.truth_classes) for i in images):
        return None
    ready, size = _prepared(images, classes), len(classes)
    names_shown = labels(classes, names)

    def rank(found: tuple[float, Scores]) -> tuple[float, float]:
        """Better F1 first; of equal ones the higher threshold (fewer detections for it)."""
        return round(found[1].f1, 12), found[0]

    # one pass over the thresholds, keeping only the bests: overall and each class's own
    best_overall: tuple[float, Scores] | None = None
    best: dict[str, tuple[float, Scores]] = {}
    for t in candidate_thresholds(images):
        counts = _total(ready, size, t, iou)
        if best_overall is None or rank((t, overall_scores(counts))) >= rank(best_overall):
            best_overall = (t, overall_scores(counts))
        for name, scores in zip(names_shown, class_scores(counts), strict=True):
            if name not in best or rank((t, scores)) >= rank(best[name]):
                best[name] = (t, scores)
    threshold = best_overall[0] if at is None else at[0]
    counts = _total(ready, size, threshold, iou)  # the matrix at the threshold shown
    return OperatingPoint(threshold, overall_scores(counts), (*names_shown, BACKGROUND), counts,
                          dict(zip(names_shown, class_scores(counts), strict=True)), best, iou,
                          MASK if any(i.has_masks for i in images) else BOX,
                          at[1] if at else None)


def markdown(point: Mapping) -> str:
    """The recorded matrix as a Markdown table (TensorBoard's text tab renders it): objects
    by row, detections by column, at the threshold."""
    names = point["classes"]
    rows = [f"| {name} | " + " | ".join(str(n) for n in row) + " |"
            for name, row in zip(names, point["confusion"], strict=True)]
    return "\n".join([
        f"At score {point['threshold']:.3g} (F1 {point['f1']:.3f}, precision "
        f"{point['precision']:.3f}, recall {point['recall']:.3f}), IoU {point['iou']:g}: "
        "objects by row, detections by column; background's row counts false detections, "
        "its column missed objects.", "",
        "| object \\ detected | " + " | ".join(names) + " |",
        "|" + " --- |" * (len(names) + 1), *rows])
