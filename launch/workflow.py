"""Local workflows behind the invoke tasks: train, evaluate, export, predict and the demo."""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from launch import jobs
from launch.local import LocalExecutor, progress_printer
from trainer.data import pets
from trainer.experiments import default_train_steps

DEMO_PREDICT_IMAGES = 6


class WorkflowError(RuntimeError):
    """A step failed; the message names the step and where its output is."""


def _console():
    from rich.console import Console

    return Console()


def run_job(job: jobs.TrainerJob, total_steps: int | None = None,
            executor: LocalExecutor | None = None) -> None:
    """Runs a job locally with a progress bar; raises WorkflowError if it fails."""
    on_line, close = progress_printer(total_steps)
    executor = executor or LocalExecutor()
    executor = dataclasses.replace(executor, on_line=on_line)
    try:
        code = executor.run(job)
    finally:
        close()
    if code != 0:
        raise WorkflowError(f"{job.name} failed with exit status {code} (output above)")


def train(run: jobs.TrainingRun, workers: int = 0, export_dir: str | None = None) -> None:
    job = jobs.train_job(run, workers, export_dir)
    run_job(job, run.steps or default_train_steps(run.experiment))


def evaluate(run: jobs.TrainingRun, continuous: bool, idle_timeout: float | None = None) -> None:
    run_job(jobs.eval_job(run, continuous, idle_timeout))


def latest_metrics(model_dir: str) -> dict:
    """The newest evaluation results written by the trainer (eval/ckpt-N.json)."""
    paths = sorted(Path(model_dir, "eval").glob("ckpt-*.json"),
                   key=lambda p: int(p.stem.removeprefix("ckpt-")))
    if not paths:
        raise WorkflowError(f"no evaluation results in {model_dir}/eval")
    return json.loads(paths[-1].read_text())


@dataclasses.dataclass(frozen=True)
class DemoResult:
    metrics: dict
    saved_model: str
    annotated_image: str
    seconds: float


def demo(workdir: str, steps: int | None = None, num_images: int | None = None,
         say: Callable[[str], None] | None = None) -> DemoResult:
    """sample -> convert -> train -> evaluate -> export -> predict, everything under `workdir`."""
    console = _console()
    say = say or (lambda text: console.rule(f"[bold]{text}"))
    root = Path(workdir).resolve()
    data, records, model = root / "pets", root / "records", root / "model"
    exported, predictions = root / "exported", root / "predictions"
    if model.exists():  # a fresh run each time: stale checkpoints would be resumed
        shutil.rmtree(model)
    start = time.monotonic()

    say("1/6 Writing a synthetic Oxford-IIIT Pets sample")
    sample_args = ["data", "sample", f"--output_dir={data}"]
    if num_images:
        sample_args.append(f"--num_images={num_images}")
    run_job(jobs.tool_job("sample", sample_args))
    say("2/6 Converting to TFRecords")
    run_job(jobs.tool_job("convert", ["data", "convert", f"--data_dir={data}",
                                      f"--output_dir={records}", "--num_shards=4"]))
    run = jobs.TrainingRun(model_dir=str(model), data_dir=str(records), steps=steps)
    say("3/6 Training")
    train(run)
    say("4/6 Evaluating (COCO metrics)")
    evaluate(run, continuous=False)
    say("5/6 Exporting a SavedModel")
    run_job(jobs.tool_job("export", ["export", f"--model_dir={model}",
                                     f"--export_dir={exported}"]))
    say("6/6 Detecting pets in held-out test images")
    test_images = root / "test_images"
    test_images.mkdir(exist_ok=True)
    for name in pets.read_example_list(data / pets.TEST_LIST)[:DEMO_PREDICT_IMAGES]:
        shutil.copy(pets.image_path(data, name), test_images)
    run_job(jobs.tool_job("predict", ["predict", f"--model={exported}",
                                      f"--images={test_images}/*.jpg",
                                      f"--output_dir={predictions}"]))
    annotated = sorted(predictions.glob("*_detections.jpg"))
    metrics = latest_metrics(str(model))["metrics"]
    return DemoResult(metrics, str(exported), str(annotated[0]) if annotated else "",
                      time.monotonic() - start)
