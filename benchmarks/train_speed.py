"""Training speed: steps/s of our trainer (`python -m trainer`) against Model Garden's own
driver (`official/vision/train.py`) on the same experiment, data, config and steps, one after
the other on this machine. Steps/s come from each run's own train summaries (Orbit's
`steps_per_second`), the first interval (tracing, warm-up) left out."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO = Path(__file__).resolve().parent.parent
EXPERIMENT = "pets_retinanet_mobilenet"


def steps_per_second(model_dir: Path) -> list[float]:
    """Orbit's `steps_per_second` scalars in the run's train summaries, in step order."""
    import tensorflow as tf

    found = []
    for events in sorted((model_dir / "train").glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(events)):
            for value in event.summary.value:
                if value.tag == "steps_per_second":
                    found.append((event.step, float(tf.make_ndarray(value.tensor))
                                  if value.HasField("tensor") else value.simple_value))
    return [rate for _, rate in sorted(found)]


def run(command: list[str], log: Path) -> float:
    start = time.perf_counter()
    with log.open("w") as out:
        status = subprocess.run(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"}).returncode
    if status != 0:
        tail = "".join(log.read_text().splitlines(keepends=True)[-15:])
        raise SystemExit(f"{' '.join(command[:4])} ... failed ({status}):\n{tail}")
    return time.perf_counter() - start


def main(steps: int = 300, interval: int = 50) -> dict:
    from trainer.data.convert import convert_directory
    from trainer.data.sample import write_sample

    with tempfile.TemporaryDirectory() as workdir:
        work = Path(workdir)
        records = work / "records"
        convert_directory(write_sample(work / "pets", num_images=48), records, num_shards=2)
        ours, theirs = work / "ours", work / "garden"
        # load the libraries once, so that neither driver pays for a cold page cache
        run([sys.executable, "-c", "import official.vision.train, trainer.cli.main"],
            work / "warm.log")
        override = (f"trainer.steps_per_loop={interval},trainer.summary_interval={interval},"
                    f"trainer.checkpoint_interval={steps},"
                    f"trainer.validation_interval={steps * 10}")
        our_seconds = run([sys.executable, "-m", "trainer", f"--experiment={EXPERIMENT}",
                           "--mode=train", f"--data_dir={records}", f"--model_dir={ours}",
                           f"--train_steps={steps}", f"--params_override={override}"],
                          work / "ours.log")
        # the very config our run used (its params.yaml): same model, data, steps, intervals
        their_seconds = run([sys.executable, "-m", "benchmarks.garden_driver",
                             f"--experiment={EXPERIMENT}", "--mode=train",
                             f"--model_dir={theirs}", f"--config_file={ours / 'params.yaml'}"],
                            work / "garden.log")
        our_rates, their_rates = steps_per_second(ours)[1:], steps_per_second(theirs)[1:]
    if not our_rates or not their_rates:
        raise SystemExit("no steps_per_second summaries after the first interval: raise steps")
    ours_sps, theirs_sps = statistics.mean(our_rates), statistics.mean(their_rates)
    print(f"\n{EXPERIMENT}, {steps} steps on this CPU (summaries every {interval}; first "
          "interval left out)")
    print(f"  our trainer:            {ours_sps:6.3f} steps/s ({our_seconds:5.1f} s wall, "
          "process start to exit)")
    print(f"  Model Garden's driver:  {theirs_sps:6.3f} steps/s ({their_seconds:5.1f} s wall)")
    print(f"  ratio ours/theirs:      {ours_sps / theirs_sps:6.3f} (goal: at least 0.95)")
    return {"ours": ours_sps, "theirs": theirs_sps, "ratio": ours_sps / theirs_sps,
            "our_seconds": our_seconds, "their_seconds": their_seconds}


if __name__ == "__main__":
    main()
