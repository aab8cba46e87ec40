"""What an evaluation says beyond its headline metrics: AP per class, the precision-recall
curve, and which images went worst (objects missed, boxes off). Pure numpy and pycocotools,
so the evaluator, the export checks and the run report compute them the same way.

Boxes are normalised (ymin, xmin, ymax, xmax) in the frame the image was seen in; COCO
counts them in that frame's pixels (IoU does not change with the frame's scale). An image
of a mask experiment also carries its objects' and detections' masks in that frame (COCO
RLE): its errors are then measured by mask IoU, and COCO's `segm` evaluation gives each
class its mask AP.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
from collections.abc import Mapping, Sequence

import numpy as np

MATCH_IOU = 0.5  # a detection this close to an object (and of its class) finds it
SHOWN_SCORE = 0.3  # detections below this score are not counted as found, nor drawn
BOX, MASK = "box", "mask"  # what an IoU compares; pycocotools' iouType is bbox or segm
COCO_IOU_TYPE = {BOX: "bbox", MASK: "segm"}


@dataclasses.dataclass(frozen=True)
class ImageBoxes:
    """One image's objects and detections."""

    key: str  # the image's source id or file name
    height: int
    width: int
    truth: np.ndarray  # [n, 4] normalised
    truth_classes: np.ndarray  # [n]
    boxes: np.ndarray  # [m, 4] normalised
    classes: np.ndarray  # [m]
    scores: np.ndarray  # [m]
    truth_masks: tuple[dict, ...] | None = None  # [n] COCO RLE in the frame, for masks
    masks: tuple[dict, ...] | None = None  # [m] COCO RLE in the frame, for masks

    @property
    def has_masks(self) -> bool:
        return self.truth_masks is not None and self.masks is not None


@dataclasses.dataclass(frozen=True)
class ImageErrors:
    key: str
    objects: int
    missed: int  # objects no shown detection of their class overlaps by MATCH_IOU
    mean_iou: float  # of each object with its best shown detection of its class (0: none)
    extra: int  # shown detections that overlap no object of their class
    overlap: str = BOX  # what the IoUs compare: boxes, or masks (an image with masks)


def pycocotools_quiet() -> contextlib.AbstractContextManager:
    """pycocotools prints its progress (`creating index...`, `DONE (t=0.45s)`) and, in Model
    Garden's COCO evaluator, a 12-line table of the metrics the project's own line gives: its
    stdout, dropped (errors still raise)."""
    return contextlib.redirect_stdout(io.StringIO())


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box in `a` [n, 4] with every box in `b` [m, 4] -> [n, m]."""
    a, b = np.asarray(a, np.float64).reshape(-1, 4), np.asarray(b, np.float64).reshape(-1, 4)
    low = np.maximum(a[:, None, :2], b[None, :, :2])
    high = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(high - low, 0, None), axis=-1)
    area = lambda boxes: np.prod(np.clip(boxes[:, 2:] - boxes[:, :2], 0, None), axis=-1)  # noqa: E731
    union = area(a)[:, None] + area(b)[None, :] - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)


def mask_iou_matrix(a: Sequence[dict], b: Sequence[dict]) -> np.ndarray:
    """IoU of every mask in `a` with every mask in `b` (COCO RLE of one frame) -> [n, m]."""
    from pycocotools import mask as coco_mask

    if not a or not b:
        return np.zeros((len(a), len(b)))
    return np.asarray(coco_mask.iou(list(b), list(a), [0] * len(a)), np.float64).reshape(
        len(b), len(a)).T


def image_errors(image: ImageBoxes, min_score: float = SHOWN_SCORE) -> ImageErrors:
    """Objects missed and found, by mask IoU for an image with masks, else by box IoU."""
    shown = image.scores >= min_score
    classes = image.classes[shown]
    if image.has_masks:
        overlap = mask_iou_matrix(image.truth_masks, [m for m, keep in zip(
            image.masks, shown, strict=True) if keep])
    else:
        overlap = iou_matrix(image.truth, image.boxes[shown])
    same = image.truth_classes[:, None] == classes[None, :]
    best = np.where(same, overlap, 0).max(axis=1) if len(classes) else \
        np.zeros(len(image.truth))
    matched = np.where(same, overlap, 0).max(axis=0) if len(image.truth) else \
        np.zeros(len(classes))
    return ImageErrors(image.key, len(image.truth), int(np.sum(best < MATCH_IOU)),
                       float(best.mean()) if len(best) else 1.0,
                       int(np.sum(matched < MATCH_IOU)), MASK if image.has_masks else BOX)


def badness(errors: ImageErrors) -> tuple:
    """Sort key, worst first: more objects missed, then poorer boxes, then more extras."""
    return (-errors.missed, errors.mean_iou, -errors.extra, errors.key)


def coco_evaluation(images: Sequence[ImageBoxes], overlap: str = BOX):
    """pycocotools' COCOeval over the images, evaluated and accumulated (quietly): of their
    boxes, or of their masks (`overlap=MASK`, images with masks)."""
    from pycocotools import mask as coco_mask
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    entries, annotations, results = [], [], []
    for image_id, image in enumerate(images, 1):
        scale = np.array([image.height, image.width] * 2, np.float64)
        entries.append({"id": image_id, "width": image.width, "height": image.height})
        masks = image.has_masks and overlap == MASK
        truth_masks = image.truth_masks if masks else [None] * len(image.truth)
        for box, cls, mask in zip(image.truth * scale, image.truth_classes, truth_masks,
                                  strict=True):
            shape = {"segmentation": mask, "area": float(coco_mask.area(mask))} if masks \
                else {"area": float(np.prod(box[2:] - box[:2]))}
            annotations.append({"id": len(annotations) + 1, "image_id": image_id,
                                "category_id": int(cls), "iscrowd": 0, "bbox": _xywh(box),
                                **shape})
        found_masks = image.masks if masks else [None] * len(image.boxes)
        for box, cls, score, mask in zip(image.boxes * scale, image.classes, image.scores,
                                         found_masks, strict=True):
            results.append({"image_id": image_id, "category_id": int(cls),
                            "bbox": _xywh(box), "score": float(score),
                            **({"segmentation": mask} if masks else {})})
    categories = sorted({a["category_id"] for a in annotations} |
                        {r["category_id"] for r in results})
    with pycocotools_quiet():
        truth = COCO()
        truth.dataset = {"images": entries, "annotations": annotations,
                         "categories": [{"id": c} for c in categories]}
        truth.createIndex()
        evaluation = COCOeval(truth, truth.loadRes(results) if results else COCO(),
                              COCO_IOU_TYPE[overlap])
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
    return evaluation


def _xywh(box: np.ndarray) -> list[float]:
    ymin, xmin, ymax, xmax = (float(v) for v in box)
    return [xmin, ymin, xmax - xmin, ymax - ymin]


def _mean_precision(precision: np.ndarray) -> float:
    """COCO's mean over the valid (> -1) entries; -1 when there are none."""
    valid = precision[precision > -1]
    return float(valid.mean()) if valid.size else -1.0


def per_class(evaluation, names: Mapping[int, str], prefix: str = ""
              ) -> dict[str, dict[str, float]]:
    """AP and AP50 of each class that has objects, named by the label map (`mask_AP`,
    `mask_AP50` with prefix `mask_`, as the headline metrics are named)."""
    precision = evaluation.eval["precision"]  # [IoU, recall, class, area, max detections]
    objects = {}
    for annotation in evaluation.cocoGt.dataset["annotations"]:
        objects[annotation["category_id"]] = objects.get(annotation["category_id"], 0) + 1
    out = {}
    for k, class_id in enumerate(evaluation.params.catIds):
        if class_id not in objects:
            continue
        every = precision[:, :, k, 0, -1]  # all areas, the most detections
        out[names.get(class_id, f"class {class_id}")] = {
            f"{prefix}AP": _mean_precision(every), f"{prefix}AP50": _mean_precision(every[0]),
            "objects": objects[class_id]}
    return out


def pr_curve(evaluation) -> dict[str, list[float]]:
    """Precision at COCO's 101 recall points, IoU 0.5, averaged over the classes."""
    precision = evaluation.eval["precision"][0, :, :, 0, -1]  # [recall, class]
    points = [float(row[row > -1].mean()) if np.any(row > -1) else 0.0 for row in precision]
    return {"recall": [float(r) for r in evaluation.params.recThrs], "precision": points}
