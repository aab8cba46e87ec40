"""Which images to label first (`label.push --strategy S --budget N`): each strategy gives
every candidate image a value and a reason a person can read, and the N of highest value are
pushed. Pure functions of a model's detections (predict's report entries: `box` ymin, xmin,
ymax, xmax in 0-1, `class_id`, `score`, every detection the export returns, not only those
over the operating point) and of the images' embeddings; `benchmarks/active.py` measures
whether they save labels.

- random: a hash of the image's name and the seed, the baseline every other is measured by;
- uncertainty: a detection whose score sits near the operating point, or a low top score
  (the model may miss something there);
- disagreement: two models (float against int8, or two checkpoints) that do not find the
  same boxes of the same classes;
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
    """1 for a detection exactly at the operating point (or no detection at all), falling
    to 0 as the nearest score moves a whole side away; or one minus the top score when that
    is higher (nothing found with confidence: maybe a miss)."""
    scores = [float(d["score"]) for d in found if np.isfinite(float(d["score"]))]
    if not scores:
        return 1.0, "nothing detected"
    nearest = min(scores, key=lambda s: abs(s - threshold))
    near = 1 - abs(nearest - threshold) / max(threshold, 1 - threshold)
    top = max(scores)
    if 1 - top > near:
        return 1 - top, f"top score {top:.2f}: the model may miss what is there"
    return near, f"a detection at {nearest:.2f} beside the operating point {threshold:.2f}"


def kept(found: Found, threshold: float) -> list[Mapping]:
    return sorted((d for d in found if float(d["score"]) >= threshold),
                  key=lambda d: -float(d["score"]))


def disagreement(ours: Found, theirs: Found, threshold: float) -> tuple[float, str]:
    """One minus the agreement of the two models' detections at the operating point: each
    of ours matched greedily (by score) to the unmatched one of theirs of its class with the
    highest IoU; agreement is the matches' IoUs summed over the larger count. Both empty: 0."""
    a, b = kept(ours, threshold), kept(theirs, threshold)
    if not a and not b:
        return 0.0, "both models find nothing"
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


def farthest_first(candidates: np.ndarray, labelled: np.ndarray, budget: int
                   ) -> list[tuple[int, float]]:
    """k-centre greedy: each pick the candidate farthest from everything labelled or picked
    before it (from the candidates' mean when nothing is labelled); (index, that distance)."""
    if not len(candidates):
        return []
    centres = labelled if len(labelled) else candidates.mean(axis=0, keepdims=True)
    nearest = np.min(np.linalg.norm(candidates[:, None] - centres[None], axis=2), axis=1)
    picked: list[tuple[int, float]] = []
    for _ in range(min(budget, len(candidates))):
        index = int(np.argmax(nearest))
        picked.append((index, float(nearest[index])))
        nearest = np.minimum(nearest, np.linalg.norm(candidates - candidates[index], axis=1))
        nearest[index] = -1.0
    return picked


def choose(strategy: str, names: Sequence[str], budget: int, *, threshold: float = 0.5,
           found: Mapping[str, Found] | None = None, against: Mapping[str, Found] | None = None,
           embeddings: np.ndarray | None = None, labelled: np.ndarray | None = None,
           seed: int = 0) -> list[Chosen]:
    """The `budget` images of `names` to label first, best first. `found` (each name's
    detections) for uncertainty, and with `against` (the second model's) for disagreement;
    `embeddings` (a row per name) and those of the images labelled already for diversity.
    Ties go to the earlier name."""
    if strategy == "diversity":
        assert embeddings is not None
        rest = labelled if labelled is not None else np.zeros((0, embeddings.shape[1]))
        return [Chosen(names[i], distance,
                       f"{distance:.2f} from the nearest image labelled or chosen before it")
                for i, distance in farthest_first(embeddings, rest, budget)]
    valued: list[tuple[float, str, str]] = []
    for name in names:
        if strategy == "random":
            value, reason = random_value(name, seed), f"drawn at random (seed {seed})"
        elif strategy == "uncertainty":
            assert found is not None
            value, reason = uncertainty(found.get(name, ()), threshold)
        elif strategy == "disagreement":
            assert found is not None and against is not None
            value, reason = disagreement(found.get(name, ()), against.get(name, ()),
                                         threshold)
        else:
            raise ValueError(f"no strategy {strategy!r}: one of {', '.join(STRATEGIES)}")
        valued.append((value, name, reason))
    valued.sort(key=lambda entry: -entry[0])  # stable: ties keep the names' order
    return [Chosen(name, round(value, 6), reason) for value, name, reason in valued[:budget]]
