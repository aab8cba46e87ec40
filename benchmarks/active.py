"""Does choosing which images to label save labels? Each strategy of `label.push --strategy`
(launch/features/label_choice.py) starts from the same few labelled images and the same
model, and each round has `budget` more images of an unlabelled pool labelled (the ground
truth plays the labeller), the model retrained and scored on a held-out test split. The goal
(the issue's): some strategy reaches random's final AP with at most 60% of its labels.

The data is the project's synthetic pets (trainer/data/sample.py, 3 breeds), the pool made
imbalanced as real collections are: beagles are rare in it (POOL), the test split is
balanced (TEST_PER_BREED), so a strategy that finds the rare breed is rewarded the way it
would be on real data. Each round trains from scratch (the default experiment, the same
steps and seed every round): a point is a function of the labelled set alone, not of the
path that led there. Disagreement compares the round's final checkpoint with its halfway
one, both exported."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import io
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.train_speed import run

if TYPE_CHECKING:
    import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")  # two trainings share the two cores

REPO = Path(__file__).resolve().parent.parent
PNG = REPO / "docs" / "images" / "active-learning.png"
JSON = REPO / "work" / "bench" / "active.json"
INITIAL = {"Abyssinian": 2, "Russian_Blue": 2, "beagle": 1}  # labelled before round 1
POOL = {"Abyssinian": 24, "Russian_Blue": 24, "beagle": 4}  # beagles 8% of the pool
RARE = "beagle"
TEST_PER_BREED = 20
GOAL = 0.6  # of random's final label count


@dataclasses.dataclass(frozen=True)
class Point:
    labels: int  # images labelled, the initial ones included
    rare: int  # of them, the rare breed's
    ap: float
    ap50: float


@dataclasses.dataclass(frozen=True)
class Model:
    export: Path
    earlier: Path | None  # the halfway checkpoint's export: disagreement's second model


def labels_to_reach(points: Sequence[Point], target: float) -> int | None:
    """The fewest labels at which the curve's AP reaches `target` (measured points only,
    no interpolation); None if it never does."""
    return min((p.labels for p in points if p.ap >= target), default=None)


def fractions(curves: Mapping[str, Sequence[Point]]) -> dict[str, float | None]:
    """Each strategy's labels to reach random's final AP, as a fraction of random's final
    label count: the key figure."""
    final = max(curves["random"], key=lambda p: p.labels)
    return {strategy: (None if (n := labels_to_reach(points, final.ap)) is None
                       else n / final.labels) for strategy, points in curves.items()}


def goal_met(reached: Mapping[str, float | None]) -> list[str]:
    """The strategies within GOAL of random's labels, and sooner than random itself: a
    random curve that reaches its own final AP early is flat within noise, and a strategy
    level with it has saved nothing."""
    return [s for s, share in reached.items() if s != "random" and share is not None
            and share <= GOAL and share < reached["random"]]


def breed(name: str) -> str:
    return name.rsplit("_", 1)[0]


def examples(root: Path, per_breed: int, seed: int) -> tuple[dict[str, bytes], Path]:
    """A sample of `per_breed` images of each breed, converted: each image's serialized
    tf.Example by its file name (whatever split conversion put it in), and the label map."""
    from trainer.data.convert import convert_directory
    from trainer.data.sample import SAMPLE_BREEDS, write_sample
    from trainer.data.tfrecord import parse_example, records

    pets = write_sample(root / "pets", num_images=per_breed * len(SAMPLE_BREEDS), seed=seed)
    convert_directory(pets, root / "records", num_shards=1, progress=False)
    found = {parse_example(record)["image/filename"][0].decode(): record
             for shard in sorted((root / "records").glob("*.record-*"))
             for record in records(shard)}
    return found, root / "records" / "label_map.pbtxt"


def write_records(chosen: Sequence[bytes], label_map: Path, out: Path, split: str) -> Path:
    """`chosen` as one shard of `split` beside the label map: a dataset the trainer reads."""
    from trainer.common.files import shard_name
    from trainer.data.tfrecord import TFRecordWriter

    out.mkdir(parents=True)
    shutil.copy(label_map, out / label_map.name)
    with TFRecordWriter(out / shard_name(split, 0, 1)) as writer:
        for record in chosen:
            writer.write(record)
    return out


@dataclasses.dataclass
class Bench:
    """The data, the trainer's settings and the in-process scoring every strategy shares."""

    work: Path
    pool: dict[str, bytes]
    label_map: Path
    test: Path  # the test split's records
    steps: int
    seed: int
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    def train(self, tag: str, labelled: Sequence[str], earlier: bool) -> Model:
        """Trains from scratch on `labelled` and exports the final checkpoint (and, for
        disagreement, the halfway one)."""
        from trainer.common.files import TRAIN

        root = self.work / tag
        data = write_records([self.pool[n] for n in labelled], self.label_map, root / "data",
                             TRAIN)
        half = self.steps // 2
        run([sys.executable, "-m", "trainer", "--mode=train", f"--data_dir={data}",
             f"--model_dir={root / 'model'}", f"--train_steps={self.steps}",
             f"--seed={self.seed}", f"--export_dir={root / 'export'}",
             # a checkpoint (and a loop, a summary) every half: the halfway one exists
             f"--params_override=trainer.checkpoint_interval={half},"
             f"trainer.steps_per_loop={half},trainer.summary_interval={half}"],
            root / "train.log")
        if not earlier:
            return Model(root / "export", None)
        run([sys.executable, "-m", "trainer", "export", f"--model_dir={root / 'model'}",
             f"--export_dir={root / 'earlier'}", f"--checkpoint={half}"], root / "export.log")
        return Model(root / "export", root / "earlier")

    def detections(self, export: Path, names: Sequence[str]) -> dict[str, list[dict]]:
        """Every detection the export returns on each named pool image, as predict reports
        them."""
        from PIL import Image

        from trainer.data.tfrecord import parse_example
        from trainer.detections.detector import Picture
        from trainer.prediction.predict import load_detector

        with self.lock:
            detector, _ = load_detector(str(export))
            found = {}
            for name in names:
                encoded = parse_example(self.pool[name])["image/encoded"][0]
                image = Image.open(io.BytesIO(encoded)).convert("RGB")
                got = detector(Picture(name, image, encoded))
                found[name] = [{"box": [float(v) for v in box], "class_id": int(label),
                                "score": float(score)}
                               for box, label, score in zip(got.boxes, got.classes, got.scores,
                                                            strict=True)]
        return found

    def score(self, export: Path) -> tuple[float, float]:
        """COCO AP and AP50 on the held-out test split."""
        from trainer.export.agreement import coco_stats, detect_all, labelled_images
        from trainer.prediction.predict import load_detector

        with self.lock:
            truth = list(labelled_images(f"{self.test}/*.record-*"))
            detector, _ = load_detector(str(export))
            stats = coco_stats(truth, detect_all(detector, truth))
        return max(float(stats[0]), 0.0), max(float(stats[1]), 0.0)

    def embedding(self, name: str) -> np.ndarray:
        """diversity's embedding of a pool image, as label.push computes it."""
        from PIL import Image

        from launch.features.label_choice import pixel_embedding
        from trainer.data.tfrecord import parse_example

        with Image.open(io.BytesIO(parse_example(self.pool[name])["image/encoded"][0])) as image:
            return pixel_embedding(image)


def pick(bench: Bench, strategy: str, remaining: list[str], labelled: list[str], model: Model,
         budget: int) -> list[str]:
    """The strategy's `budget` images among `remaining`, with what it needs and only that."""
    import numpy as np

    from launch.features.label_choice import choose
    from trainer.evaluation import operating

    found = bench.detections(model.export, remaining) \
        if strategy in ("uncertainty", "disagreement") else None
    against = bench.detections(model.earlier, remaining) \
        if strategy == "disagreement" and model.earlier else None
    embeddings = labels = None
    if strategy == "diversity":
        embeddings = np.array([bench.embedding(n) for n in remaining])
        labels = np.array([bench.embedding(n) for n in labelled])
    threshold = operating.threshold(None, operating.read_info(str(model.export)))[0]
    return [c.image for c in choose(strategy, remaining, budget, threshold=threshold,
                                    found=found, against=against, embeddings=embeddings,
                                    labelled=labels, seed=bench.seed)]


def curve(bench: Bench, strategy: str, initial: list[str], start: Model, first: Point,
          rounds: int, budget: int) -> list[Point]:
    """One strategy's rounds from the shared start: choose, label, retrain, score."""
    labelled, model, points = list(initial), start, [first]
    remaining = [n for n in bench.pool if n not in labelled]
    for round_ in range(1, rounds + 1):
        chosen = pick(bench, strategy, remaining, labelled, model, budget)
        labelled += chosen
        remaining = [n for n in remaining if n not in chosen]
        model = bench.train(f"{strategy}-{round_}", labelled,
                            earlier=strategy == "disagreement" and round_ < rounds)
        points.append(Point(len(labelled), sum(breed(n) == RARE for n in labelled),
                            *bench.score(model.export)))
        print(f"  {strategy} round {round_}: {points[-1]}", flush=True)
    return points


def table(curves: Mapping[str, Sequence[Point]]) -> str:
    """Strategy by images labelled: AP (AP50, rare images labelled)."""
    labels = [p.labels for p in next(iter(curves.values()))]
    lines = ["| strategy | " + " | ".join(f"{n} labelled" for n in labels) + " |",
             "| --- |" + " --- |" * len(labels)]
    for strategy, points in curves.items():
        lines.append(f"| {strategy} | " + " | ".join(
            f"{p.ap:.3f} ({p.ap50:.3f}; {p.rare} {RARE})" for p in points) + " |")
    return "\n".join(lines)


def mean_curves(runs: Mapping[int, Mapping[str, Sequence[Point]]]
                ) -> dict[str, list[Point]]:
    """Each strategy's curve averaged over the seeds, point by point (the label counts are
    the same in every run): one seed's curve moves by more than the gaps between strategies."""
    strategies = next(iter(runs.values()))
    mean = {}
    for strategy in strategies:
        each = [runs[seed][strategy] for seed in runs]
        mean[strategy] = [Point(points[0].labels,
                                round(sum(p.rare for p in points) / len(points), 2),
                                round(sum(p.ap for p in points) / len(points), 4),
                                round(sum(p.ap50 for p in points) / len(points), 4))
                          for points in zip(*each, strict=True)]
    return mean


def verdict(runs: Mapping[int, Mapping[str, Sequence[Point]]]) -> list[str]:
    """The strategies that meet the goal on the seeds' mean curves and on a majority of the
    seeds alone (each against the same seed's random): a verdict one lucky draw cannot make."""
    alone = [goal_met(fractions(curves)) for curves in runs.values()]
    return [s for s in goal_met(fractions(mean_curves(runs)))
            if sum(s in met for met in alone) * 2 > len(alone)]


def plot(runs: Mapping[int, Mapping[str, Sequence[Point]]], path: Path) -> None:
    """The seeds' mean curve of each strategy, each seed's own faint behind it."""
    from launch.plots import figure

    mean = mean_curves(runs)

    def draw(axes) -> bool:
        for index, (strategy, points) in enumerate(mean.items()):
            colour = f"C{index}"
            for curves in runs.values() if len(runs) > 1 else ():
                axes.plot([p.labels for p in curves[strategy]],
                          [p.ap for p in curves[strategy]], color=colour, alpha=0.25,
                          linewidth=1)
            axes.plot([p.labels for p in points], [p.ap for p in points], marker="o",
                      color=colour, label=strategy)
        return True

    seeds = ", ".join(map(str, runs))
    figure(draw, path, f"Choosing what to label: COCO AP on a balanced test split "
                       f"(seed{'s' if len(runs) > 1 else ''} {seeds})",
           "images labelled", "COCO AP (held-out test)")


def run_seed(work: Path, seed: int, strategies: Sequence[str], rounds: int, budget: int,
             steps: int, workers: int) -> dict[str, list[Point]]:
    """Every strategy's curve with `seed` (random's draw and the trainings'), from the same
    start; the pool and the test split are the same for every seed."""
    most = max(a + b for a, b in zip(INITIAL.values(), POOL.values(), strict=True))
    everything, label_map = examples(work / "pool", most, seed=0)
    initial = [f"{b}_{i}.jpg" for b, n in INITIAL.items() for i in range(1, n + 1)]
    pool = [f"{b}_{i}.jpg" for b, n in POOL.items()
            for i in range(INITIAL[b] + 1, INITIAL[b] + n + 1)]
    test, _ = examples(work / "test", TEST_PER_BREED, seed=1)
    bench = Bench(work, {n: everything[n] for n in initial + pool}, label_map,
                  write_records(list(test.values()), label_map, work / "test-split", "test"),
                  steps, seed)
    print(f"seed {seed}: pool {len(pool)} images ({POOL}), {len(initial)} labelled to start, "
          f"{len(test)} to test; {rounds} rounds of {budget}, {steps} steps from scratch")
    start = bench.train("start", initial, earlier="disagreement" in strategies)
    first = Point(len(initial), INITIAL[RARE], *bench.score(start.export))
    print(f"  start: {first}", flush=True)
    with concurrent.futures.ThreadPoolExecutor(workers) as pool_of:
        futures = {s: pool_of.submit(curve, bench, s, initial, start, first, rounds, budget)
                   for s in strategies}
        return {s: future.result() for s, future in futures.items()}


def main(rounds: int = 4, budget: int = 6, steps: int = 150, seeds: Sequence[int] = (1, 2, 3),
         workers: int = 2, png: Path = PNG, out: Path = JSON,
         strategies: Sequence[str] | None = None) -> dict:
    """Every strategy (or `strategies`, random always among them: the yardstick) with each
    of `seeds`; the verdict on their mean and on each seed alone."""
    from launch.features.label_choice import STRATEGIES

    strategies = ["random", *(s for s in strategies or STRATEGIES if s != "random")]
    began = time.perf_counter()
    runs = {}
    for seed in seeds:
        with tempfile.TemporaryDirectory() as workdir:
            runs[seed] = run_seed(Path(workdir), seed, strategies, rounds, budget, steps,
                                  workers)
    minutes = (time.perf_counter() - began) / 60
    mean = mean_curves(runs)
    for name, curves in [*((f"seed {seed}", c) for seed, c in runs.items()),
                         *([(f"the mean of seeds {', '.join(map(str, runs))}", mean)]
                           if len(runs) > 1 else [])]:
        final = curves["random"][-1]
        print(f"\n{name}: COCO AP (AP50; {RARE} images labelled) on the held-out test split\n"
              f"{table(curves)}\nlabels to reach random's final AP {final.ap:.3f} "
              f"({final.labels} labels):")
        for strategy, share in fractions(curves).items():
            print(f"  {strategy:13} " + ("never" if share is None else
                                        f"{round(share * final.labels)} labels, {share:.0%}"))
    met = verdict(runs)
    print(f"\ngoal (a strategy at <= {GOAL:.0%} of random's labels and sooner than random, on "
          f"the mean curves and on most seeds alone): "
          + (f"met by {', '.join(met)}" if met else "not met: no strategy does"))
    print(f"wall time {minutes:.1f} min")
    plot(runs, png)
    figures = {"setup": {"initial": INITIAL, "pool": POOL, "test_per_breed": TEST_PER_BREED,
                         "rounds": rounds, "budget": budget, "steps": steps,
                         "seeds": list(runs)},
               "curves": {str(seed): {s: [dataclasses.asdict(p) for p in points]
                                      for s, points in curves.items()}
                          for seed, curves in runs.items()},
               "mean": {s: [dataclasses.asdict(p) for p in points] for s, points in mean.items()},
               "fraction_of_random_labels": {str(seed): fractions(c) for seed, c in runs.items()},
               "goal_met_by": met, "minutes": minutes}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=1) + "\n")
    print(f"wrote {png} and {out}")
    return figures


if __name__ == "__main__":
    main()
