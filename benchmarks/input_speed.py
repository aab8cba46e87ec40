"""Input pipeline vs training: tf.data images/s against what one train step consumes.

A ratio above 1 means the input pipeline outpaces the accelerator (here: the CPU), so
training is compute-bound, as it should be.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

WARMUP_BATCHES = 5


def _params(records: Path, model_dir: str):
    from trainer.training import settings
    from trainer.training.params import build_params

    return build_params(settings.parse([f"--data_dir={records}", f"--model_dir={model_dir}"],
                                       {}), "float32")


def images_per_second(step: Callable[[], object], steps: int, batch: int) -> float:
    for _ in range(WARMUP_BATCHES):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return steps * batch / (time.perf_counter() - start)


def main(steps: int = 60) -> dict:
    import tensorflow as tf
    from official.core import task_factory

    from trainer.data.convert import convert_directory
    from trainer.data.sample import write_sample

    with tempfile.TemporaryDirectory() as tmp:
        data = write_sample(Path(tmp) / "pets", num_images=300)
        records = Path(tmp) / "records"
        convert_directory(data, records, progress=False)
        params = _params(records, tmp)
        batch = params.task.train_data.global_batch_size
        task = task_factory.get_task(params.task)
        dataset = task.build_inputs(params.task.train_data)

        iterator = iter(dataset)
        input_rate = images_per_second(lambda: next(iterator), steps, batch)

        model = task.build_model()
        optimizer = task.create_optimizer(params.trainer.optimizer_config, params.runtime)
        metrics = task.build_metrics(training=True)
        fixed = next(iterator)  # the same batch each step: times compute alone

        @tf.function
        def train_step(inputs):
            return task.train_step(inputs, model, optimizer, metrics)

        train_rate = images_per_second(lambda: train_step(fixed), steps, batch)
    result = {"input_images_per_s": input_rate, "train_images_per_s": train_rate,
              "ratio": input_rate / train_rate, "batch": batch}
    print(f"\nexperiment pets_retinanet_mobilenet, batch {batch}, {steps} steps")
    print(f"  tf.data input:     {input_rate:8.1f} images/s")
    print(f"  train step:        {train_rate:8.1f} images/s")
    print(f"  input / training:  {result['ratio']:8.2f}x")
    return result


if __name__ == "__main__":
    main()
