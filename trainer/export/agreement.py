"""How closely an export answers like the SavedModel: the same top detection per image, and
COCO AP50 on labelled images. The tests hold TFLite exports to these; `invoke bench.serve`
prints them."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

import numpy as np

from trainer.common import io
from trainer.common.errors import SettingsError
from trainer.data.images import open_checked
from trainer.detections.detector import Detections, Detector, Picture
from trainer.evaluation.analysis import ImageBoxes, coco_evaluation, iou_matrix
from trainer.model.model_dir import first_line

SAME_BOX_IOU = 0.8  # two top boxes this close are the same box


@dataclasses.dataclass(frozen=True)
class Labelled:
    picture: Picture
    boxes: np.ndarray  # [n, 4] normalised ymin, xmin, ymax, xmax
    classes: np.ndarray  # [n]


def labelled_images(records: str, limit: int | None = None) -> Iterator[Labelled]:
    """The images of converted TFRecords with their boxes, as a detector sees them."""
    import tensorflow as tf

    features = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
                "image/filename": tf.io.FixedLenFeature([], tf.string, default_value=""),
                "image/object/class/label": tf.io.VarLenFeature(tf.int64),
                **{f"image/object/bbox/{k}": tf.io.VarLenFeature(tf.float32)
                   for k in ("ymin", "xmin", "ymax", "xmax")}}
    files = sorted(io.match(records))
    dataset = tf.data.TFRecordDataset(files).map(
        lambda record: tf.io.parse_single_example(record, features))
    for example in dataset.take(-1 if limit is None else limit):
        encoded = example["image/encoded"].numpy()
        image = open_checked(encoded).convert("RGB")  # the pixel cap before any decode
        boxes = np.stack([tf.sparse.to_dense(example[f"image/object/bbox/{k}"]).numpy()
                          for k in ("ymin", "xmin", "ymax", "xmax")], axis=-1)
        yield Labelled(Picture(example["image/filename"].numpy().decode(), image, encoded),
                       boxes.reshape(-1, 4),
                       tf.sparse.to_dense(example["image/object/class/label"]).numpy())


def held_out(validation: str, purpose: str, limit: int) -> list[Labelled]:
    """The first `limit` images of the run's validation split, which `purpose` (a flag as
    typed) is measured on; SettingsError when there are none to read."""
    import tensorflow as tf

    try:
        truth = list(labelled_images(validation, limit))
    except (tf.errors.OpError, OSError, ValueError) as error:
        raise SettingsError(f"{purpose} is measured on the validation split, and {validation} "
                            f"could not be read ({first_line(error)}): export where the run's "
                            "records are") from None
    if not truth:
        raise SettingsError(f"{purpose} is measured on the validation split, and {validation} "
                            "holds no image")
    return truth


def same_top(a: Detections, b: Detections) -> bool:
    """The highest-scoring detection of each is the same class and the same box."""
    if not len(a.scores) or not len(b.scores):
        return len(a.scores) == len(b.scores)
    i, j = int(np.argmax(a.scores)), int(np.argmax(b.scores))
    return int(a.classes[i]) == int(b.classes[j]) and iou_matrix(a.boxes[i], b.boxes[j])[0, 0] >= \
        SAME_BOX_IOU


def top_agreement(a: Sequence[Detections], b: Sequence[Detections]) -> float:
    return sum(map(same_top, a, b)) / len(a)


def coco_stats(truth: Sequence[Labelled], found: Sequence[Detections]) -> np.ndarray:
    """pycocotools' twelve figures (AP, AP50, ...) of `found` on `truth`, boxes in pixels as
    COCO counts them."""
    images = [ImageBoxes(labelled.picture.path, labelled.picture.image.height,
                         labelled.picture.image.width, labelled.boxes, labelled.classes,
                         detections.boxes, detections.classes, detections.scores)
              for labelled, detections in zip(truth, found, strict=True)]
    return coco_evaluation(images).stats


def ap50(truth: Sequence[Labelled], found: Sequence[Detections]) -> float:
    """COCO AP at IoU 0.5 (pycocotools)."""
    return float(max(coco_stats(truth, found)[1], 0.0))


def detect_all(detector: Detector, truth: Sequence[Labelled]) -> list[Detections]:
    return [detector(labelled.picture) for labelled in truth]


@dataclasses.dataclass(frozen=True)
class Allowance:
    """How closely an exported format must answer like the SavedModel on held-out images."""

    same_top: float = 0.99  # the share of images whose top detection is the same
    ap50_gap: float = 0.01  # |AP50 - the SavedModel's AP50|


@dataclasses.dataclass(frozen=True)
class FormatCheck:
    """One format against the SavedModel, on the same held-out images."""

    format: str
    images: int
    same_top: float
    ap50: float
    saved_model_ap50: float
    allowance: Allowance = Allowance()
    forced: str | None = None

    @property
    def passed(self) -> bool:
        return self.same_top >= self.allowance.same_top and \
            abs(self.ap50 - self.saved_model_ap50) <= self.allowance.ap50_gap

    def line(self) -> str:
        return (f"{self.format}: the same top detection on {round(self.same_top * self.images)} "
                f"of {self.images} held-out images ({self.same_top:.2%}, at least "
                f"{self.allowance.same_top:.0%}), "
                f"AP50 {self.ap50:.3f} against the SavedModel's {self.saved_model_ap50:.3f} "
                f"(within {self.allowance.ap50_gap:g})"
                + (f"; forced: {self.forced}" if self.forced else ""))

    def record(self) -> dict:
        return {"images": self.images, "same_top": self.same_top, "ap50": self.ap50,
                "saved_model_ap50": self.saved_model_ap50,
                "allowed": dataclasses.asdict(self.allowance), "passed": self.passed,
                "forced": self.forced}


def check_format(name: str, found: Sequence[Detections], reference: Sequence[Detections],
                 truth: Sequence[Labelled], allowance: Allowance = Allowance(),
                 force: str | None = None) -> FormatCheck:
    """`found` (a format's answers) against `reference` (the SavedModel's) on `truth`."""
    return FormatCheck(name, len(truth), top_agreement(found, reference), ap50(truth, found),
                       ap50(truth, reference), allowance, force)
