"""Which images to label first (`label.push --strategy S --budget N`): each strategy gives
every candidate image a value and a reason a person can read, and the N of highest value are
pushed. Pure functions of a model's detections (predict's report entries: `box` ymin, xmin,
ymax, xmax in 0-1, `class_id`, `score`, every detection the export returns, not only those
over the operating point) and of the images' embeddings; `benchmarks/active.py` measures
whether they save labels.

- random: a hash of the image's name and the seed, the baseline every other is measured by;
- uncertainty: detections whose scores sit near the operating point (the more, the
  higher), or a low top score (the model may miss something there);
- disagreement: two models (float against int8, or two checkpoints) that do not find the
  same boxes of the same classes, or both find nothing;
- diversity: the images farthest from everything labelled or chosen so far (k-centre
  greedy) in an embedding of their pixels; the export has no feature output, so the
  embedding is each image's colour layout (`pixel_embedding`), not the detector's.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping, Sequence

import numpy as np

from trainer.evaluation.analysis import iou_matrix

STRATEGIES = ("random", "uncertainty", "disagreement", "diversity")
NEEDS_MODEL = ("uncertainty", "disagreement")  # the others choose without one
EMBEDDING_SIDE = 8  # the thumbnail's side: 8 x 8 x RGB, 192 numbers
BOTH_MISS = 0.5  # disagreement's value for an image neither model finds anything in
CHUNK = 1024  # rows per block when measuring distances: memory stays CHUNK² floats

Found = Sequence[Mapping]  # one image's detections, as predict reports them


@dataclasses.dataclass(frozen=True)
class Chosen:
    image: str
    value: float  # the strategy's: higher is labelled first
    reason: str


def random_value(name: str, seed: int = 0) -> float:
    """A value in [0, 1) from the name alone: the same draw on every run and machine."""
    return int(hashlib.sha256(f"{seed}:{name}".encode()).hexdigest()[:13], 16) / 16 ** 13


def uncertainty(found: Found, threshold: float) -> tuple[float, str]:
    """How many objects the model may have got wrong: each detection counts from 1 exactly
    at the operating point down to 0 a whole side away, and only from half the operating
    point up (below that it is the detector's noise: every image has some), summed; or,
    when that is lower, one minus the top score (nothing found with confidence: maybe a
    miss). Two borderline detections weigh more than one, so images separate."""
    scores = [float(d["score"]) for d in found if np.isfinite(float(d["score"]))]
    if not scores:
        return 1.0, "nothing detected"
    side = max(threshold, 1 - threshold)
    counted = [score for score in scores if score >= threshold / 2]
    total, top = sum(1 - abs(score - threshold) / side for score in counted), max(scores)
    if 1 - top > total:
        return 1 - top, f"top score {top:.2f}: the model may miss what is there"
    nearest = min(counted, key=lambda score: abs(score - threshold))
    return total, (f"{len(counted)} detection(s) near the operating point {threshold:.2f}, "
                   f"the nearest at {nearest:.2f}")


def kept(found: Found, threshold: float) -> list[Mapping]:
    return sorted((d for d in found if float(d["score"]) >= threshold),
                  key=lambda d: -float(d["score"]))


def disagreement(ours: Found, theirs: Found, threshold: float) -> tuple[float, str]:
    """One minus the agreement of the two models' detections at the operating point: each
    of ours matched greedily (by score) to the unmatched one of theirs of its class with the
    highest IoU; agreement is the matches' IoUs summed over the larger count. Both finding
    nothing is half-way (BOTH_MISS): they agree, yet on an image that came to be labelled
    there is most likely something both miss, worth more than boxes they share."""
    a, b = kept(ours, threshold), kept(theirs, threshold)
    if not a and not b:
        return BOTH_MISS, "both models find nothing: a miss by both, or an empty image"
    overlaps = iou_matrix([d["box"] for d in a], [d["box"] for d in b])
    free = set(range(len(b)))
    total, matched = 0.0, 0
    for row, detection in enumerate(a):
        same = [(overlaps[row, i], i) for i in sorted(free)
                if b[i]["class_id"] == detection["class_id"]]
        best = max(same, default=(0.0, -1))
        if best[0] > 0:
            total += float(best[0])
            matched += 1
            free.discard(best[1])
    value = 1 - total / max(len(a), len(b))
    return value, (f"the models agree on {matched} of {max(len(a), len(b))} detection(s)"
                   f"{f', mean IoU {total / matched:.2f}' if matched else ''}")


def pixel_embedding(image) -> np.ndarray:
    """A PIL image's colour layout: its RGB thumbnail (EMBEDDING_SIDE square, box filter),
    0-1, flattened."""
    from PIL import Image

    small = image.convert("RGB").resize((EMBEDDING_SIDE, EMBEDDING_SIDE), Image.Resampling.BOX)
    return np.asarray(small, dtype=np.float32).reshape(-1) / 255


def nearest_distance(rows: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """Each row's Euclidean distance to its nearest centre, CHUNK by CHUNK blocks (no
    rows x centres x features array: a pool of 100,000 images against 2,000 labelled)."""
    best = np.full(len(rows), np.inf, dtype=np.float64)
    for start in range(0, len(rows), CHUNK):
        block = rows[start:start + CHUNK].astype(np.float64)
        for first in range(0, len(centres), CHUNK):
            other = centres[first:first + CHUNK].astype(np.float64)
            squared = ((block ** 2).sum(1)[:, None] + (other ** 2).sum(1)[None]
                       - 2 * block @ other.T)
            best[start:start + CHUNK] = np.minimum(best[start:start + CHUNK],
                                                   np.sqrt(np.clip(squared.min(1), 0, None)))
    return best


def farthest_first(candidates: np.ndarray, labelled: np.ndarray, budget: int
                   ) -> list[tuple[int, float]]:
    """k-centre greedy: each pick the candidate farthest from everything labelled or picked
    before it (from the candidates' mean when nothing is labelled); (index, that distance)."""
    if not len(candidates):
        return []
    centres = labelled if len(labelled) else candidates.mean(axis=0, keepdims=True)
    nearest = nearest_distance(candidates, centres)
    picked: list[tuple[int, float]] = []
    for _ in range(min(budget, len(candidates))):
        index = int(np.argmax(nearest))
        picked.append((index, float(nearest[index])))
        nearest = np.minimum(nearest, nearest_distance(candidates, candidates[index:index + 1]))
        nearest[index] = -1.0
    return picked


def choose(strategy: str, names: Sequence[str], budget: int, *, threshold: float = 0.5,
           found: Mapping[str, Found] | None = None, against: Mapping[str, Found] | None = None,
           embeddings: np.ndarray | None = None, labelled: np.ndarray | None = None,
           seed: int = 0) -> list[Chosen]:
    """The `budget` images of `names` to label first, best first. `found` (each name's
    detections) for uncertainty, and with `against` (the second model's) for disagreement;
    `embeddings` (a row per name) and those of the images labelled already for diversity.
    A name a model has no entry for (predict could not read it) comes last: nothing can be
    said of it. Ties go to the earlier name."""
    if strategy not in STRATEGIES:
        raise ValueError(f"no strategy {strategy!r}: one of {', '.join(STRATEGIES)}")
    if strategy == "diversity":
        assert embeddings is not None
        rest = labelled if labelled is not None else np.zeros((0, embeddings.shape[1]))
        return [Chosen(names[i], round(distance, 6),
                       f"{distance:.2f} from the nearest image labelled or chosen before it")
                for i, distance in farthest_first(embeddings, rest, budget)]
    valued: list[tuple[float, str, str]] = []
    for name in names:
        if strategy == "random":
            value, reason = random_value(name, seed), f"drawn at random (seed {seed})"
        elif any(name not in detections for detections in
                 (found or {}, *([against or {}] if strategy == "disagreement" else []))):
            value, reason = -1.0, "predict could not read it (its report's failures say why)"
        elif strategy == "uncertainty":
            value, reason = uncertainty(found[name], threshold)
        else:
            value, reason = disagreement(found[name], against[name], threshold)
        valued.append((value, name, reason))
    valued.sort(key=lambda entry: -entry[0])  # stable: ties keep the names' order
    return [Chosen(name, round(value, 6), reason) for value, name, reason in valued[:budget]]
