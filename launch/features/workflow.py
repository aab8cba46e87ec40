"""Local workflows behind the invoke tasks: export, predict and the demo, each a trainer tool
run on this machine by the target that offers the trainer's tools (`base.TOOLS`, through the
registry: the local target's processes)."""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from launch import targets
from launch.context.cloud import Cloud
from launch.errors import InputError, StepFailed
from launch.stores.gcs import mirror
from launch.targets.base import TOOLS
from launch.text import console as shown_console
from launch.values import jobfile, jobs
from trainer.args import (
    TRAIN_AND_EVAL,
    ConvertArgs,
    ExportArgs,
    PredictArgs,
    SampleArgs,
    TrainArgs,
)
from trainer.common import jsonnum
from trainer.common.errors import SettingsError
from trainer.common.files import MAX_RUN_JSON_BYTES, METRICS_DIR, METRICS_FILE, SAMPLE_COCO_FILE
from trainer.data import pets
from trainer.data.defaults import MAX_PIXELS, max_pixels_problem
from trainer.model.best.choice import DEFAULT_CHOICE
from trainer.model.experiments import MASK_DEMO_EXPERIMENT
from trainer.prediction.results import DETECTIONS_ONLY, ResultForms

DEMO_PREDICT_IMAGES = 6
DEMO_STEPS = 4


def run_job(job: jobs.TrainerJob, steps: int | None = None) -> None:
    """Runs a trainer tool here and waits; `steps`: a training's, for its progress bar."""
    targets.first(TOOLS, Cloud()).run(job, steps)


def demo_dir(work: str, masks: bool) -> str:
    """Each demo its own directory: `--masks` would otherwise replace the box model that
    `bench.serve` and the quick start's next steps read."""
    return f"{work}/demo-masks" if masks else f"{work}/demo"


def across_classes(names: list[str], count: int) -> list[str]:
    """`count` of the held-out `names`, one breed after another (a sorted list starts with
    as many Abyssinians as the sample has): the demo's pictures show several classes."""
    by_breed: dict[str | None, list[str]] = {}
    for name in names:
        by_breed.setdefault(pets.breed_of(name), []).append(name)
    groups = list(by_breed.values())
    longest = max(map(len, groups), default=0)
    return [group[i] for i in range(longest) for group in groups if i < len(group)][:count]


def export(wanted: ExportArgs, storage_client: Callable[[], object] | None = None) -> str:
    """Exports a SavedModel or a .tflite of the checkpoint `wanted.checkpoint` names (default:
    the run's best, else its newest); a gs:// model directory is staged first (the run files
    and that checkpoint) and a gs:// export directory is uploaded after exporting locally."""
    model_dir, output_dir = wanted.model_dir, wanted.export_dir
    choice = mirror.checkpoint_choice(wanted.checkpoint, paths=not mirror.is_gcs(model_dir))
    args = dataclasses.replace(wanted, export_dir=str(mirror.written_first(output_dir)),
                               checkpoint=None if choice == DEFAULT_CHOICE else str(choice))
    try:
        args.check()  # the export's own check, before a checkpoint is staged
    except SettingsError as error:
        raise InputError(str(error)) from None
    client = _client_if_remote(storage_client, model_dir, output_dir)
    if mirror.is_gcs(model_dir):
        args = dataclasses.replace(args, model_dir=str(mirror.stage_checkpoint(
            client, model_dir, choice)))
    run_job(jobs.tool_job(args))
    return mirror.publish(client, output_dir)


def pixel_cap(max_pixels: int | None) -> int:
    """`predict --max-pixels` (default: the converter's cap), checked by the converter's rule
    before any image is read or sent."""
    cap = MAX_PIXELS if max_pixels is None else max_pixels
    if problem := max_pixels_problem(cap):
        raise InputError(problem)
    return cap


def predict(model: str, images: str, output_dir: str, score_threshold: float | None = None,
            storage_client: Callable[[], object] | None = None,
            max_pixels: int = MAX_PIXELS, forms: ResultForms = DETECTIONS_ONLY) -> str:
    """Detects with a SavedModel; gs:// models and image directories are staged first, and a
    gs:// output directory is uploaded (with the report's other `forms`)."""
    client = _client_if_remote(storage_client, model, images, output_dir)
    if mirror.is_gcs(model):
        model = str(mirror.stage_directory(client, model))
    local_out = mirror.written_first(output_dir)
    run_job(jobs.tool_job(PredictArgs(model, mirror.stage_images(client, images),
                                      str(local_out), max_pixels=max_pixels,
                                      score_threshold=score_threshold, results=forms.forms,
                                      coco_annotations=forms.coco_annotations)))
    return mirror.publish_predictions(client, output_dir)


def result_forms(args: PredictArgs) -> ResultForms:
    """What `predict --results` writes, its flags checked as the trainer checks them (the
    endpoint's and the batch job's reports are written here, not by a trainer)."""
    try:
        args.check()
    except SettingsError as error:
        raise InputError(str(error)) from None
    return ResultForms.of(args)


def _client_if_remote(factory: Callable[[], object] | None, *paths: str):
    if not any(map(mirror.is_gcs, paths)):
        return None
    if factory is None:
        raise InputError(f"{' '.join(paths)}: gs:// paths need cloud settings")
    return factory()


def latest_metrics(model_dir: str) -> dict:
    """The newest evaluation results written by the trainer (eval/ckpt-N.json)."""
    found = {int(match[1]): path for path in Path(model_dir, METRICS_DIR).glob("ckpt-*.json")
             if (match := METRICS_FILE.fullmatch(path.name))}
    if not found:
        raise StepFailed(f"no evaluation results in {model_dir}/{METRICS_DIR}")
    try:
        metrics = jsonnum.read_file(found[max(found)], MAX_RUN_JSON_BYTES)
    except jsonnum.JsonError as error:
        raise StepFailed(str(error)) from None
    if not isinstance(metrics, dict):
        raise StepFailed(f"{found[max(found)]} is not an evaluation (not a JSON object)")
    return metrics


@dataclasses.dataclass(frozen=True)
class DemoResult:
    metrics: dict
    saved_model: str
    annotated_image: str
    seconds: float

    def summary(self) -> str:
        m = self.metrics
        masks = (f"\nmask AP {m['mask_AP']:.3f}  mask AP50 {m['mask_AP50']:.3f}  mask AP75 "
                 f"{m['mask_AP75']:.3f}" if "mask_AP" in m else "")
        return (f"\nAP {m['AP']:.3f}  AP50 {m['AP50']:.3f}  AP75 {m['AP75']:.3f}  "
                f"({self.seconds / 60:.1f} min){masks}\nSavedModel:      {self.saved_model}\n"
                f"annotated image: {self.annotated_image}")


def demo_data(data: Path, records: Path, num_images: int | None,
              say: Callable[[str], None], format: str = "pets", masks: bool = False) -> None:
    """The demo's first two steps: a synthetic sample in `data`, converted into `records`
    from its Pets files or, with `format` coco, from its COCO JSON; with `masks`, each
    pet's mask too."""
    say(f"1/{DEMO_STEPS} Writing a synthetic Oxford-IIIT Pets sample")
    run_job(jobs.tool_job(SampleArgs(str(data), format=format,
                                     **({"num_images": num_images} if num_images else {}))))
    say(f"2/{DEMO_STEPS} Converting {'the COCO JSON ' if format == 'coco' else ''}to TFRecords"
        f"{' with masks' if masks else ''}")
    if format == "coco":
        run_job(jobs.tool_job(ConvertArgs(None, str(records), num_shards=4, format="coco",
                                          annotations=str(data / SAMPLE_COCO_FILE),
                                          images=str(data / pets.IMAGES_DIR), masks=masks)))
    else:
        run_job(jobs.tool_job(ConvertArgs(str(data), str(records), num_shards=4,
                                          masks=masks)))


def demo_model_job(model: Path, records: Path, exported: Path, steps: int | None,
                   masks: bool) -> tuple[str, jobs.TrainerJob, int | None]:
    """The demo's middle step (what it says, the job, its steps): one trainer process that
    trains, evaluates its last checkpoint (`--mode train_and_eval`: the eval job's evaluator)
    and exports it, so that the export carries the threshold the evaluation chose
    (trainer/evaluation/operating.py) and the demo's predict detects at it; three processes
    did this before, each paying TensorFlow's start (about 15 CPU-seconds here)."""
    training = jobs.Training(TrainArgs(
        train_steps=steps, mode=TRAIN_AND_EVAL, export_dir=str(exported),
        **({"experiment": MASK_DEMO_EXPERIMENT} if masks else {})))
    return (f"3/{DEMO_STEPS} Training, evaluating (COCO metrics) and exporting a SavedModel "
            "with the evaluated score threshold",
            training.trainer_job(jobs.TrainerDirs(str(model), str(records))), training.steps)


def demo_job_file(model: Path, records: Path, steps: int | None, masks: bool) -> str:
    """The job file `invoke train` would store for the demo's training: with it in the model
    directory, `invoke eval`, `export` and `train --model-dir` find the run's data as they
    find any local run's (launch/stores/runs/jobfiles.py)."""
    job = jobfile.resolve(jobfile.TRAIN, {
        "model_dir": str(model), "data_dir": str(records), "steps": steps,
        **({"experiment": MASK_DEMO_EXPERIMENT} if masks else {})})
    return jobfile.Written(jobfile.TRAIN, job).text()


def demo(workdir: str, steps: int | None = None, num_images: int | None = None,
         say: Callable[[str], None] | None = None, format: str = "pets",
         masks: bool = False) -> DemoResult:
    """sample -> convert -> train, evaluate and export -> predict, everything under `workdir`;
    `format` coco converts the sample from its COCO JSON instead of its Pets files; `masks`
    converts with masks and trains the CPU Mask R-CNN experiment (200 steps by default)."""
    if format not in ("pets", "coco"):
        raise InputError(f"--format must be pets or coco, got {format!r}")
    console = shown_console()
    say = say or (lambda text: console.rule(f"[bold]{text}"))
    root = Path(workdir).resolve()
    data, records, model = root / "pets", root / "records", root / "model"
    exported, predictions = root / "exported", root / "predictions"
    if model.exists():  # a fresh run each time: stale checkpoints would be resumed
        shutil.rmtree(model)
    start = time.monotonic()

    demo_data(data, records, num_images, say, format, masks)
    from launch.stores.runs.jobfiles import store_local  # Google's clients: only here

    store_local(str(model), demo_job_file(model, records, steps, masks))
    text, job, total = demo_model_job(model, records, exported, steps, masks)
    say(text)
    run_job(job, total)
    say(f"4/{DEMO_STEPS} Detecting pets in held-out test images")
    test_images = root / "test_images"
    test_images.mkdir(exist_ok=True)
    for name in across_classes(pets.read_example_list(data / pets.TEST_LIST),
                               DEMO_PREDICT_IMAGES):
        shutil.copy(pets.image_path(data, name), test_images)
    run_job(jobs.tool_job(PredictArgs(str(exported), f"{test_images}/*.jpg", str(predictions))))
    annotated = sorted(predictions.glob("*_detections.jpg"))
    metrics = latest_metrics(str(model))["metrics"]
    return DemoResult(metrics, str(exported), str(annotated[0]) if annotated else "",
                      time.monotonic() - start)
