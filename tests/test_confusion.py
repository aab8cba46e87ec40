"""The confusion matrix and the operating point (trainer/evaluation/confusion.py) on images
with known answers, counted by hand: a right detection, a duplicate of it, a detection on the
wrong class, one on background, a missed object and a low-scored find; and the same matrices
as supervision's `ConfusionMatrix` on the same detections (boxes and masks)."""

from __future__ import annotations

import numpy as np
import pytest
import supervision as sv
from pycocotools import mask as coco_mask
from supervision.metrics import MetricTarget

from trainer.evaluation import confusion
from trainer.evaluation.analysis import ImageBoxes

NAMES = {1: "cat", 2: "dog"}
CAT_A1, DOG_A, CAT_A2, DOG_B = [0, 0, .5, .5], [.5, .5, 1, 1], [0, .6, .3, .9], [0, 0, .4, .4]


def image(key, truth, truth_classes, found) -> ImageBoxes:
    """`found`: (box, class, score) of each detection."""
    return ImageBoxes(key, 100, 100, np.array(truth, float).reshape(-1, 4),
                      np.array(truth_classes), np.array([b for b, _, _ in found], float
                                                        ).reshape(-1, 4),
                      np.array([c for _, c, _ in found]), np.array([s for _, _, s in found]))


IMAGES = [
    image("a", [CAT_A1, DOG_A, CAT_A2], [1, 2, 1], [
        (CAT_A1, 1, 0.9),  # right
        ([0, 0, .45, .5], 1, 0.6),  # a duplicate of it: IoU 0.9 with the cat already found
        (DOG_A, 1, 0.8),  # the dog called a cat
        (CAT_A2, 1, 0.5)]),  # right, at a lower score
    image("b", [DOG_B], [2], [
        ([.6, .6, .9, .9], 2, 0.7),  # a dog on background
        (DOG_B, 2, 0.2)]),  # right, scored low
]
# rows: cat, dog, background objects; columns: detected as cat, dog, background
BY_HAND = {
    0.9: [[1, 0, 1], [0, 0, 2], [0, 0, 0]],
    0.8: [[1, 0, 1], [1, 0, 1], [0, 0, 0]],
    0.7: [[1, 0, 1], [1, 0, 1], [0, 1, 0]],
    0.6: [[1, 0, 1], [1, 0, 1], [1, 1, 0]],
    0.5: [[2, 0, 0], [1, 0, 1], [1, 1, 0]],
    0.2: [[2, 0, 0], [1, 1, 0], [1, 1, 0]],
}


@pytest.mark.parametrize("threshold", BY_HAND)
def test_the_matrix_counts_what_was_found_confused_missed_and_made_up(threshold):
    assert confusion.matrix(IMAGES, [1, 2], threshold).tolist() == BY_HAND[threshold]


def test_precision_recall_f1_and_the_best_threshold_are_the_hand_counts():
    point = confusion.operating_point(IMAGES, NAMES)
    # overall F1 by threshold: 0.9 .4, 0.8 .333, 0.7 .286, 0.6 .25, 0.5 .444, 0.2 .6
    assert point.threshold == 0.2
    assert (point.overall.precision, point.overall.recall, point.overall.f1) == \
        pytest.approx((3 / 6, 3 / 4, 0.6))
    assert point.confusion.tolist() == BY_HAND[0.2]
    assert point.names == ("cat", "dog", "background")
    cat, dog = point.per_class["cat"], point.per_class["dog"]
    assert (cat.precision, cat.recall, cat.f1) == pytest.approx((2 / 4, 1, 2 / 3))
    assert (dog.precision, dog.recall, dog.f1) == pytest.approx((1 / 2, 1 / 2, 1 / 2))
    # cat's own best: F1 2/3 at 0.9, 0.5 and 0.2: the highest threshold of the tie
    assert point.best["cat"][0] == 0.9 and point.best["cat"][1].f1 == pytest.approx(2 / 3)
    assert point.best["dog"][0] == 0.2 and point.best["dog"][1].f1 == pytest.approx(0.5)
    shown = point.as_json()
    assert shown["threshold"] == 0.2 and shown["confusion"] == BY_HAND[0.2]
    assert shown["per_class"]["cat"]["best_threshold"] == 0.9


def test_nothing_to_judge_has_no_operating_point_and_nothing_found_is_all_missed():
    assert confusion.operating_point([image("x", [], [], [(DOG_B, 2, 0.9)])], NAMES) is None
    for found in ([], [(DOG_B, 2, 0.005)]):  # a dead model: no detection worth a threshold
        point = confusion.operating_point([image("x", [DOG_B], [2], found)], NAMES)
        assert point.confusion.tolist() == [[0, 1], [0, 0]] and point.overall.recall == 0
        assert point.threshold == confusion.MIN_THRESHOLD


def test_a_class_named_background_or_like_an_unnamed_id_keeps_its_own_row():
    images = [image("x", [CAT_A1, DOG_A], [1, 2], [(CAT_A1, 1, 0.9), (DOG_A, 7, 0.8)])]
    point = confusion.operating_point(images, {1: "background", 2: "class 7"})
    assert point.names == ("background (id 1)", "class 7 (id 2)", "class 7 (id 7)",
                           "background")
    assert set(point.per_class) == set(point.names[:-1])
    from trainer.model.eval_record import operating_point as parse

    assert parse(point.as_json()) is not None  # unique names: the record keeps it


def test_only_classes_seen_are_shown_and_one_outside_the_label_map_by_its_id():
    point = confusion.operating_point([image("x", [DOG_B], [2], [(DOG_B, 7, 0.9)])], NAMES)
    assert point.names == ("dog", "class 7", "background")  # no cat in sight: no cat row
    assert point.confusion.tolist() == [[0, 1, 0], [0, 0, 0], [0, 0, 0]]


def supervision_matrix(images, threshold, masks=False) -> list:
    """supervision's matrix of the same detections, in pixels (class ids 0-based)."""
    def detections(boxes, classes, scores=None, rles=None):
        xyxy = np.asarray(boxes, float).reshape(-1, 4)[:, [1, 0, 3, 2]] * 100
        return sv.Detections(xyxy=xyxy, class_id=np.asarray(classes, int) - 1,
                             confidence=scores, mask=None if rles is None else
                             np.asarray([coco_mask.decode(r).astype(bool) for r in rles]
                                        ).reshape(-1, 100, 100))
    predictions = [detections(i.boxes, i.classes, i.scores, i.masks if masks else None)
                   for i in images]
    targets = [detections(i.truth, i.truth_classes, None, i.truth_masks if masks else None)
               for i in images]
    return sv.ConfusionMatrix.from_detections(
        predictions, targets, ["cat", "dog"], conf_threshold=threshold, iou_threshold=0.5,
        metric_target=MetricTarget.MASKS if masks else MetricTarget.BOXES).matrix.tolist()


@pytest.mark.parametrize("threshold", BY_HAND)
def test_supervision_counts_the_same(threshold):
    assert supervision_matrix(IMAGES, threshold) == BY_HAND[threshold]


def rle(box) -> dict:
    """A box's mask in a 100x100 frame, as COCO RLE."""
    pixels = np.zeros((100, 100), np.uint8, order="F")
    y0, x0, y1, x1 = (round(v * 100) for v in box)
    pixels[y0:y1, x0:x1] = 1
    return coco_mask.encode(pixels)


def test_masks_are_matched_by_mask_iou_as_supervision_does():
    """Two objects share a box; the detection's mask covers only a quarter of the second."""
    box = [0, 0, .6, .6]
    truth_masks = (rle([0, 0, .3, .3]), rle([.3, .3, .6, .6]))
    found_masks = (rle([0, 0, .3, .3]), rle([.3, .3, .45, .45]))
    masked = ImageBoxes("m", 100, 100, np.array([box, box]), np.array([1, 1]),
                        np.array([box, box]), np.array([1, 1]), np.array([0.9, 0.8]),
                        truth_masks, found_masks)
    counts = confusion.matrix([masked], [1, 2], 0.5)
    assert counts.tolist() == [[1, 0, 1], [0, 0, 0], [1, 0, 0]]
    assert counts.tolist() == supervision_matrix([masked], 0.5, masks=True)
    assert confusion.operating_point([masked], NAMES).overlap == "mask"


def test_random_scenes_agree_with_supervision():
    """Many objects and detections, overlapping at random: every threshold's matrix."""
    generator = np.random.default_rng(7)
    images = []
    for k in range(40):
        truth = generator.uniform(0, 0.6, (generator.integers(0, 6), 2))
        truth = np.concatenate([truth, truth + generator.uniform(0.1, 0.4, truth.shape)], 1)
        found = [(np.clip(b + generator.normal(0, 0.05, 4), 0, 1), int(generator.integers(1, 3)),
                  float(generator.uniform())) for b in truth for _ in range(2)]
        found += [(np.sort(generator.uniform(0, 1, 4).reshape(2, 2), 0).T.reshape(4)[[0, 2, 1, 3]],
                   int(generator.integers(1, 3)), float(generator.uniform()))
                  for _ in range(generator.integers(0, 3))]
        images.append(image(str(k), truth, generator.integers(1, 3, len(truth)), found))
    for threshold in (0.1, 0.3, 0.5, 0.8):
        assert confusion.matrix(images, [1, 2], threshold).tolist() == \
            supervision_matrix(images, threshold)


def test_a_given_threshold_is_measured_at_not_searched():
    """The test split is measured at the validation's threshold (what the export serves)."""
    point = confusion.operating_point(IMAGES, NAMES, at=(0.9, "eval/ckpt-300.json"))
    assert point.threshold == 0.9 and point.confusion.tolist() == BY_HAND[0.9]
    assert point.overall.f1 == pytest.approx(0.4)  # not the 0.6 the search would find at 0.2
    assert point.as_json()["threshold_from"] == "eval/ckpt-300.json"
    assert point.best["dog"][0] == 0.2  # each class's own best is still shown
