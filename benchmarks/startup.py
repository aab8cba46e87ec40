"""Start-up: seconds from `python -m trainer` to its first training step, against Model
Garden's own driver (`official/vision/train.py`) with the very same params (our run's
`params.yaml`, one-device strategy for both), runs alternated so that neither gets a warmer
machine; and how fast the trainer's CLI answers `--help` and a bad flag (no TensorFlow)."""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO = Path(__file__).resolve().parent.parent
EXPERIMENT = "pets_retinanet_mobilenet"
FIRST_STEP = re.compile(r"train \| step:\s+[1-9]")  # Orbit's line after step 1 (loops of 1)
ONE_STEP = ("trainer.steps_per_loop=1,trainer.summary_interval=1,"
            "trainer.checkpoint_interval=1,runtime.distribution_strategy=one_device")


def time_to_first_step(command: list[str], log: Path) -> tuple[float, float]:
    """(seconds to the first step's log line, seconds to exit) of one process."""
    start = time.perf_counter()
    first = None
    with log.open("w") as out:
        process = subprocess.Popen(command, cwd=REPO, text=True, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT,
                                   env={**os.environ, "PYTHONUNBUFFERED": "1"})
        for line in process.stdout:
            out.write(line)
            if first is None and FIRST_STEP.search(line):
                first = time.perf_counter() - start
        status = process.wait()
    total = time.perf_counter() - start
    if status != 0 or first is None:
        tail = "".join(log.read_text().splitlines(keepends=True)[-15:])
        raise SystemExit(f"{' '.join(command[:4])} ... failed ({status}):\n{tail}")
    return first, total


def cli_seconds(*args: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "trainer", *args], cwd=REPO,
                   capture_output=True, check=False)
    return time.perf_counter() - start


def main(repeats: int = 3) -> dict:
    from trainer.data.convert import convert_directory
    from trainer.data.sample import write_sample

    with tempfile.TemporaryDirectory() as workdir:
        work = Path(workdir)
        records = work / "records"
        convert_directory(write_sample(work / "pets", num_images=48), records, num_shards=2,
                          progress=False)
        # load the libraries once, so that neither driver pays for a cold page cache
        subprocess.run([sys.executable, "-c", "import official.vision.train, trainer.cli.main"],
                       cwd=REPO, check=True)
        ours, theirs = [], []
        for attempt in range(repeats):
            model_dir = work / f"ours-{attempt}"
            ours.append(time_to_first_step(
                [sys.executable, "-m", "trainer", f"--experiment={EXPERIMENT}", "--mode=train",
                 f"--data_dir={records}", f"--model_dir={model_dir}", "--train_steps=1",
                 f"--params_override={ONE_STEP}"], work / f"ours-{attempt}.log"))
            theirs.append(time_to_first_step(
                [sys.executable, "-m", "benchmarks.garden_driver", f"--experiment={EXPERIMENT}",
                 "--mode=train", f"--model_dir={work / f'garden-{attempt}'}",
                 f"--config_file={model_dir / 'params.yaml'}",
                 "--params_override=runtime.distribution_strategy=one_device"],
                work / f"garden-{attempt}.log"))
        help_seconds = min(cli_seconds("--help") for _ in range(3))
        bad_flag_seconds = min(cli_seconds(f"--data_dir={work}/missing",
                                           f"--model_dir={work}/m") for _ in range(3))
    ours_first = statistics.median(first for first, _ in ours)
    theirs_first = statistics.median(first for first, _ in theirs)
    ratio = ours_first / theirs_first
    print(f"\n{EXPERIMENT}: process start to the first training step, median of {repeats} "
          "(one-device strategy, the same params.yaml)")
    print(f"  our trainer:            {ours_first:5.1f} s  (to exit "
          f"{statistics.median(total for _, total in ours):5.1f} s; each: "
          f"{', '.join(f'{first:.1f}' for first, _ in ours)})")
    print(f"  Model Garden's driver:  {theirs_first:5.1f} s  (to exit "
          f"{statistics.median(total for _, total in theirs):5.1f} s; each: "
          f"{', '.join(f'{first:.1f}' for first, _ in theirs)})")
    print(f"  ratio ours/theirs:      {ratio:5.3f} (goal: at most 1.05)")
    print(f"  python -m trainer --help: {help_seconds:.2f} s; a missing --data_dir refused in "
          f"{bad_flag_seconds:.2f} s")
    return {"ours": ours_first, "theirs": theirs_first, "ratio": ratio,
            "help": help_seconds, "bad_flag": bad_flag_seconds}


if __name__ == "__main__":
    main()
