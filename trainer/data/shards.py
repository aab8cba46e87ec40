"""The records written in shards, each shard by one process: what runs the examples, counts
them per class and reports progress. Its own module because the process pool (fork, a shared
counter, a dead worker ending the run) is the only concurrency in the converter; a shard's
bytes depend only on its examples, however many processes share the work.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from trainer.common import files
from trainer.common.errors import ConversionFailed
from trainer.data.example import Classes, convert_one
from trainer.data.planning import Limits, Source, SplitPlan
from trainer.data.problems import ProblemLog
from trainer.data.tfrecord import TFRecordWriter


def shard_path(output_dir: Path, split: str, index: int, num_shards: int) -> Path:
    return output_dir / files.shard_name(split, index, num_shards)


@dataclasses.dataclass(frozen=True)
class Shard:
    """One record file and its examples: every `num_shards`-th of a split, in input order.
    A shard's bytes depend only on its examples, however many processes share the work."""

    split: str
    path: Path
    sources: tuple[tuple[int, Source], ...]  # (position in the split, example)


@dataclasses.dataclass
class ClassCounts:
    """The images and objects of each class."""

    images: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    objects: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)

    def add(self, classes: Sequence[str]) -> None:
        """One example's objects, by class."""
        self.objects.update(classes)
        self.images.update(set(classes))

    @staticmethod
    def table(counts: Sequence[ClassCounts]) -> dict[str, dict[str, int]]:
        """Several counts summed, as the report holds them: class -> images, objects."""
        images = sum((c.images for c in counts), collections.Counter())
        objects = sum((c.objects for c in counts), collections.Counter())
        return {name: {"images": images[name], "objects": objects[name]}
                for name in sorted(objects)}


@dataclasses.dataclass
class Written:
    """What a shard writer reports, as small however many examples it converted: how many
    it wrote, their problems (where: position in the split, example name) and the images
    and objects of each class."""

    examples: int = 0
    background: int = 0  # examples written without objects (Source.background)
    problems: ProblemLog = dataclasses.field(default_factory=ProblemLog)
    classes: ClassCounts = dataclasses.field(default_factory=ClassCounts)
    before: ClassCounts = dataclasses.field(default_factory=ClassCounts)  # with --classes


def plan_shards(plan: SplitPlan, staging: Path, num_shards: int) -> list[Shard]:
    return [Shard(split, shard_path(staging, split, i, num_shards),
                  tuple(enumerate(sources))[i::num_shards])
            for split, sources in plan.splits.items() for i in range(num_shards)]


_examples_done = None  # in a worker process: the count shared with the parent, for progress


def _start_worker(counter) -> None:
    global _examples_done
    _examples_done = counter


def _count_in_worker() -> None:
    with _examples_done.get_lock():
        _examples_done.value += 1


def _write_shard(shard: Shard, classes: Classes, limits: Limits,
                 on_example: Callable[[], object]) -> Written:
    """Converts and writes one shard, holding one example's bytes at a time."""
    done = Written()
    with TFRecordWriter(shard.path) as writer:
        for position, source in shard.sources:
            outcome = convert_one(source, classes, limits)
            if outcome.serialized is not None:
                writer.write(outcome.serialized)
                done.examples += 1
                done.background += not outcome.classes
            for problem in outcome.problems:
                done.problems.add((position, outcome.name), problem)
            done.classes.add(outcome.classes)
            done.before.add(outcome.before)
            on_example()
    return done


def write_all(shards: Sequence[Shard], classes: Classes, limits: Limits,
               processes: int, on_progress: Callable[[int], object]) -> list[Written]:
    """Each shard written by one process; the parent only counts. A worker that dies (the
    OOM killer, a signal) ends the run at once instead of hanging it."""
    if processes <= 1:
        return [_write_shard(shard, classes, limits, lambda: on_progress(1))
                for shard in shards]
    context = multiprocessing.get_context("fork")
    counter = context.Value("q", 0)
    pool = ProcessPoolExecutor(processes, mp_context=context, initializer=_start_worker,
                               initargs=(counter,))
    try:
        futures = [pool.submit(_write_shard, shard, classes, limits, _count_in_worker)
                   for shard in shards]
        reported = 0
        while running := [f for f in futures if not f.done()]:
            concurrent.futures.wait(running, timeout=0.2, return_when="FIRST_COMPLETED")
            done = counter.value  # read once: a count between two reads was lost (311/324)
            on_progress(done - reported)
            reported = done
        try:
            results = [future.result() for future in futures]
        except BrokenProcessPool:
            raise ConversionFailed(
                "a conversion worker process died (killed by the out-of-memory killer or "
                "a signal?); nothing was replaced. Retry with fewer --processes, or lower "
                "--max-pixels if images are huge") from None
        on_progress(counter.value - reported)
        return results
    finally:
        for process in list(pool._processes.values()):  # no public way before Python 3.14
            process.terminate()  # an error or Ctrl-C: do not finish shards nobody will use
        pool.shutdown(cancel_futures=True)
