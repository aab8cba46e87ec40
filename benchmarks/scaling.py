"""The times the tests leave out, because a bound on them fails on a slower or busier
machine: triage and label planning linear in their input, a pixel bomb refused from its
header, and a conversion whose worker is killed ending at once. Each figure is the fastest
of three runs (load slows a run; nothing makes one faster), beside the ratio to watch."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # the converter's TensorFlow: no chatter


def fastest(action: Callable[[], object], repeats: int = 3) -> float:
    """Seconds of the fastest of `repeats` runs of `action()`."""
    def once() -> float:
        started = time.perf_counter()
        action()
        return time.perf_counter() - started
    return min(once() for _ in range(repeats))


def triage() -> dict[str, float]:
    """An OOM line, then 30 KB and 300 KB of each pattern's opening words: ten times the line
    is ten times as long when every pattern is linear (a quadratic one: a hundred)."""
    from launch.targets import triage
    from tests.test_triage import OPENINGS, oom_then

    print("triage: 30 KB and 300 KB of a pattern's opening words after an OOM line "
          "(goal: 300 KB under 2 s, ratio under 30)")
    ratios = {}
    for opening in OPENINGS:
        small, large = (fastest(lambda size=size, opening=opening: triage.classify(
                            oom_then(opening, size))) for size in (30_000, 300_000))
        ratios[opening] = large / small
        print(f"  {opening[:36]!r:40} {small:8.4f} s {large:8.4f} s  ratio {large / small:5.1f}")
    return ratios


def planning(root: Path) -> dict[str, float]:
    """Planning 2 and 8 label files of the costliest shapes: the same seconds a file."""
    from tests.test_convert_hostile import LABEL_CAP, _hostile_labels, plan_hostile

    print("planning label files at the size cap (goal: a file of 8 costs under 1.5x a file "
          "of 2)")
    ratios = {}
    for kind in ("yolo", "labelme"):
        per_file = {}
        for files in (2, 8):
            _hostile_labels(root / f"{kind}{files}", kind, files, LABEL_CAP)
            per_file[files] = fastest(lambda kind=kind, files=files: plan_hostile(
                root / f"{kind}{files}", kind)) / files
        ratios[kind] = per_file[8] / per_file[2]
        print(f"  {kind:8} {per_file[2]:8.4f} s a file of 2, {per_file[8]:8.4f} s a file of 8"
              f"  ratio {ratios[kind]:5.2f}")
    return ratios


def pixel_bomb(root: Path) -> float:
    """A 9-image sample converted with and without a 2.5-gigapixel PNG among them."""
    from tests.test_convert_hostile import names, png_bomb
    from trainer.data import pets
    from trainer.data.convert import convert_directory
    from trainer.data.sample import write_sample

    sample = write_sample(root / "pets", num_images=9)

    def convert() -> None:
        with contextlib.redirect_stdout(io.StringIO()):  # its summary, each time
            convert_directory(sample, root / "records", num_shards=1, progress=False)

    plain = fastest(convert)
    pets.image_path(sample, names(sample)[0]).write_bytes(png_bomb(50_000, 50_000))
    bombed = fastest(convert)
    print(f"pixel bomb: the sample in {plain:.3f} s, with a 2.5-gigapixel PNG {bombed:.3f} s"
          f"  ratio {bombed / plain:.2f} (goal: about 1, refused from its header)")
    return bombed / plain


def killed_worker(root: Path) -> float:
    """Seconds from a worker's death to the end of its two-worker conversion, against the
    whole conversion's: a run that waited for the other worker's images would take most."""
    from tests.test_convert_hostile import convert_process, kill_a_worker, slow_dataset

    data = slow_dataset(root)
    started = time.perf_counter()
    whole = convert_process(data, root / "whole", "--processes=2")
    assert whole.wait() == 0, whole.stderr.read()
    entire = time.perf_counter() - started
    run = kill_a_worker(data, root / "killed")
    killed = time.perf_counter()
    try:
        assert run.wait() == 1, run.stderr.read()
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    ending = time.perf_counter() - killed
    print(f"killed worker: the run ends {ending:.2f} s after, the whole conversion takes "
          f"{entire:.2f} s  ratio {ending / entire:.3f} (goal: well under 0.5)")
    return ending / entire


def main() -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-scaling-") as scratch:
        root = Path(scratch)
        for part in ("planning", "bomb", "kill"):
            (root / part).mkdir()
        return {"triage": triage(), "planning": planning(root / "planning"),
                "pixel_bomb": pixel_bomb(root / "bomb"),
                "killed_worker": killed_worker(root / "kill")}


if __name__ == "__main__":
    main()
