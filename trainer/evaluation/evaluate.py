"""Checkpoint evaluation with COCO metrics, once or continuously beside a training job.

Unlike the Object Detection API's eval jobs (and Model Garden's `continuous_eval`), this loop
never re-evaluates a checkpoint it has results for (results are files, so a restarted eval job
resumes), always evaluates the final checkpoint, exits by itself once it has, and gives up with
a clear message when no new checkpoint appears within the idle timeout.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import logging
import tempfile
import time
from collections.abc import Callable

import numpy as np

from trainer.args import TrainArgs, shown
from trainer.common import files
from trainer.common.errors import EvalTimeoutError, SettingsError
from trainer.common.io import match, write_text
from trainer.data.label_map import id_to_name, read_label_map
from trainer.detections.masks import paste, to_rle
from trainer.detections.visualize import draw_detections
from trainer.evaluation import analysis, confusion, operating
from trainer.model import eval_record
from trainer.model import model_dir as model_dir_lib
from trainer.model.best import keeping
from trainer.model.best.choice import DEFAULT_CHOICE, choose
from trainer.model.eval_record import EvaluationRecord
from trainer.model.experiments import MASK_PREFIX

SUMMARY_SUBDIR = "validation"
TEST_SUMMARY_SUBDIR = "test"  # an evaluation on the test split: beside validation/
# What each evaluated checkpoint prints. The metrics keep Model Garden's COCOEvaluator names:
# box AP, AP50, ... as before, and for an experiment with masks the same names prefixed
# `mask_` (pycocotools' `segm` evaluation).
SHOWN_METRICS = ("AP", "AP50", "AP75", f"{MASK_PREFIX}AP", f"{MASK_PREFIX}AP50")
NUM_SUMMARY_IMAGES = 4
NUM_WORST_IMAGES, WORST_SCALE = 8, 2  # the report's gallery: the worst images, enlarged
# Model Garden's input normalisation, undone to show validation images.
MEAN_RGB = np.array([0.485, 0.456, 0.406]) * 255  # Model Garden's normalisation, in pixels
STDDEV_RGB = np.array([0.229, 0.224, 0.225]) * 255

log = logging.getLogger(__name__)


def line(result: EvaluationRecord, split: str = files.VAL, why: str = "") -> str:
    """What each evaluated checkpoint prints (on the test split: that, and why this
    checkpoint)."""
    shown = {k: round(result.metrics[k], 4) for k in SHOWN_METRICS if k in result.metrics}
    on = f" on {split} ({why})" if split != files.VAL else ""
    return f"evaluated step {result.step}{on}: {shown} -> {result.path}"


def metrics_dir(split: str) -> str:
    """Where evaluations on `split` go: eval/ (validation: best/ and early stopping read
    it), or eval-test/, which nothing that picks a checkpoint reads."""
    return files.TEST_METRICS_DIR if split == files.TEST else files.METRICS_DIR


def metrics_path(model_dir: str, step: int, split: str = files.VAL) -> str:
    return f"{model_dir}/{metrics_dir(split)}/{files.metrics_file(step)}"


def evaluated_steps(model_dir: str) -> set[int]:
    import tensorflow as tf

    found = (files.METRICS_FILE.fullmatch(path.rsplit("/", 1)[-1])
             for path in tf.io.gfile.glob(f"{model_dir}/{files.METRICS_DIR}/ckpt-*.json"))
    return {int(match[1]) for match in found if match}


def within_images(logs: dict, task) -> dict:
    """`logs` with the COCO metric's detection boxes clipped to each image in the model's
    frame (its original size times its scale: `image_info[:, 1]` is the padded frame's), as
    the export clips them to the image: boxes reaching into the frame's padding were counted
    against the run (AP 0.009 to 0.019 below the served model's on the same checkpoint, AP50
    equal; trainer/export/saved_model.py normalises and clips)."""
    import tensorflow as tf

    name = getattr(getattr(task, "coco_metric", None), "name", None)
    if name not in logs:
        return logs
    groundtruths, outputs = logs[name]
    info = tf.cast(outputs["image_info"], tf.float32)
    extent = tf.tile(info[:, 0:1, :] * info[:, 2:3, :], [1, 1, 2])
    boxes = tf.minimum(tf.maximum(outputs["detection_boxes"], 0.0), extent)
    return {**logs, name: (groundtruths, {**outputs, "detection_boxes": boxes})}


class CheckpointEvaluator:
    """Builds the model and the evaluation data (`params.task.validation_data`: the
    validation split, or the test split's records in its place) once; evaluates any number
    of checkpoints. Only evaluations on validation (eval/) keep best/ and judge early
    stopping; the test split's (eval-test/) are records and nothing more."""

    def __init__(self, params, model_dir: str, summary_dir: str,
                 class_names: dict[int, str] | None = None, split: str = files.VAL) -> None:
        import tensorflow as tf
        from official.core import task_factory

        self.params, self.model_dir, self.class_names = params, model_dir, class_names or {}
        self.split = split
        # A Mask R-CNN task with masks scans the validation records into COCO annotations
        # (the masks' ground truth) at `logging_dir`/annotation.json, and reuses any file it
        # finds there: a directory of this evaluator's own keeps one written from other data
        # (an earlier evaluation of the model directory) from being read.
        self._scratch = tempfile.TemporaryDirectory(prefix="eval-annotations-")
        self.task = task_factory.get_task(params.task, logging_dir=self._scratch.name)
        self.model = self.task.build_model()
        self.checkpoint = tf.train.Checkpoint(model=self.model)
        self.dataset = self.task.build_inputs(params.task.validation_data)
        with analysis.pycocotools_quiet():  # a Mask R-CNN's evaluator loads its annotations here
            metrics = self.task.build_metrics(training=False)
        self._step = tf.function(lambda inputs: within_images(
            self.task.validation_step(inputs, self.model, metrics), self.task))
        self.writer = tf.summary.create_file_writer(summary_dir)

    def evaluate(self, checkpoint: str) -> EvaluationRecord:
        import tensorflow as tf

        step = model_dir_lib.checkpoint_step(checkpoint)
        model_dir_lib.restore(self.checkpoint, checkpoint)
        state, pictures, seen = None, None, []
        worst = WorstImages()
        for inputs in self.dataset:
            logs = self._step(inputs)
            batch = list(self._images(inputs, logs))
            if pictures is None:
                pictures = np.stack([np.asarray(self._draw(image, pixels, scale=2))
                                     for image, pixels in batch[:NUM_SUMMARY_IMAGES]])
            for image, pixels in batch:
                if image is not None:
                    seen.append(image)
                    worst.offer(image, pixels)
            state = self.task.aggregate_logs(state, logs)
        if state is None:
            raise RuntimeError(f"{self.split} data {self.params.task.validation_data.input_path}"
                               " is empty")
        with analysis.pycocotools_quiet():
            raw = self.task.reduce_aggregated_logs(state, step)
        metrics = {k: float(np.asarray(v)) for k, v in raw.items() if np.asarray(v).size == 1}
        breakdown = self._breakdown(seen, worst, step) if seen else {}
        point = breakdown.get("operating_point")
        with self.writer.as_default(step=step):
            for name, value in metrics.items():
                tf.summary.scalar(name, value)
            if point:
                for name in ("threshold", "precision", "recall", "f1"):
                    tf.summary.scalar(f"operating_point/{name}", point[name])
                tf.summary.text("confusion matrix", confusion.markdown(point))
            tf.summary.image("detections (white: ground truth)", pictures,
                             max_outputs=NUM_SUMMARY_IMAGES)
        self.writer.flush()
        path = metrics_path(self.model_dir, step, self.split)
        record = EvaluationRecord(step, metrics, checkpoint, path=path,
                                  data=eval_record.data_identity(
                                      self.params.task.validation_data.input_path),
                                  **breakdown)
        write_text(path, json.dumps(record.to_json(), indent=2) + "\n")
        if self.split == files.VAL:  # never on test: it picks no checkpoint, stops no run
            keeping.after_evaluation(self.model_dir)  # best/ kept, early stopping judged
        return record

    def _breakdown(self, seen: list, worst: WorstImages, step: int) -> dict:
        """AP per class, the PR curve, the worst images drawn beside the metrics, and the
        operating point: the F1-best threshold and the confusion matrix there."""
        evaluation = analysis.coco_evaluation(seen)
        per_class = analysis.per_class(evaluation, self.class_names)
        if all(image.has_masks for image in seen):
            by_mask = analysis.per_class(analysis.coco_evaluation(seen, analysis.MASK),
                                         self.class_names, prefix=MASK_PREFIX)
            per_class = {name: {**values, **by_mask.get(name, {})}
                         for name, values in per_class.items()}
        point = confusion.operating_point(seen, self.class_names, at=self._served_at(step))
        # the gallery is drawn, and its errors counted, at the operating point the report
        # shows above it (and records the score it was drawn at)
        drawn_at = point.threshold if point else analysis.SHOWN_SCORE
        shown = []
        for rank, (errors, image, pixels) in enumerate(worst.ranked(drawn_at), 1):
            name = files.worst_image_file(step, rank)
            buffer = io.BytesIO()
            self._draw(image, pixels, WORST_SCALE, drawn_at).save(buffer, "JPEG", quality=90)
            write_text(f"{self.model_dir}/{metrics_dir(self.split)}/{name}",
                       buffer.getvalue())
            shown.append({**dataclasses.asdict(errors), "picture": name, "score": drawn_at})
        return {"per_class": per_class, "pr_curve": analysis.pr_curve(evaluation),
                "worst_images": tuple(shown),
                "operating_point": point.as_json() if point else None}

    def _served_at(self, step: int) -> tuple[float, str] | None:
        """On the test split, the threshold the validation chose for this checkpoint (the one
        its export serves at) and where it is; None on validation (it chooses)."""
        if self.split != files.TEST:
            return None
        served = operating.from_evaluation(self.model_dir, files.checkpoint_name(step))
        return (served["value"], served["evaluation"]) if served else None

    def _images(self, inputs, logs):
        """Each validation image of a batch as the model saw it (the padded, resized frame,
        uint8), with its objects and detections normalised to that frame (None without
        Model Garden's COCO outputs)."""
        features, labels = inputs
        coco = logs[self.task.coco_metric.name] if hasattr(self.task, "coco_metric") else None
        frames = np.clip(features.numpy() * STDDEV_RGB + MEAN_RGB, 0, 255).astype(np.uint8)
        info = labels["image_info"].numpy()
        for i, pixels in enumerate(frames):
            if coco is None:
                yield None, pixels
                continue
            groundtruths, outputs = coco
            size = np.tile(np.array(pixels.shape[:2], np.float32), 2)
            n = int(outputs["num_detections"][i])
            scale, offset = info[i, 2], info[i, 3]
            truth = groundtruths["boxes"][i].numpy() * np.tile(scale, 2) - np.tile(offset, 2)
            keep = np.any(truth > 0, axis=1)
            source = groundtruths["source_id"][i].numpy() if "source_id" in groundtruths \
                else i
            boxes = outputs["detection_boxes"][i][:n].numpy() / size
            masks = {}
            if "masks" in groundtruths and "detection_masks" in outputs:
                masks = {"truth_masks": _frame_masks(groundtruths["masks"][i].numpy()[keep],
                                                     truth[keep] / size, pixels.shape[:2]),
                         "masks": _frame_masks(outputs["detection_masks"][i][:n].numpy(),
                                               boxes, pixels.shape[:2])}
            yield analysis.ImageBoxes(
                str(source.decode() if isinstance(source, bytes) else source),
                pixels.shape[0], pixels.shape[1], truth[keep] / size,
                groundtruths["classes"][i].numpy()[keep].astype(np.int64), boxes,
                outputs["detection_classes"][i][:n].numpy().astype(np.int64),
                outputs["detection_scores"][i][:n].numpy(), **masks), pixels

    def _draw(self, image, pixels: np.ndarray, scale: int,
              min_score: float = analysis.SHOWN_SCORE):
        """The frame enlarged `scale` times, detections from `min_score` and ground truth
        (white) drawn."""
        from PIL import Image

        picture = Image.fromarray(pixels).resize((scale * pixels.shape[1],
                                                  scale * pixels.shape[0]))
        if image is None:
            return picture
        return draw_detections(picture, image.boxes, image.classes, image.scores,
                               self.class_names, min_score, ground_truth=image.truth,
                               masks=_enlarged(image.masks, scale) if image.masks else None)


def _frame_masks(masks: np.ndarray, boxes: np.ndarray, frame: tuple[int, int]
                 ) -> tuple[dict, ...]:
    """Per-box masks (each S x S over its normalised box) as COCO RLE of the frame, as
    predict writes them."""
    return tuple(to_rle(paste(mask, box, *frame)) for mask, box in zip(masks, boxes,
                                                                      strict=True))


def _enlarged(masks: tuple[dict, ...], scale: int) -> list[np.ndarray]:
    """Frame masks (COCO RLE) as bool pixels of the picture drawn `scale` times larger."""
    from pycocotools import mask as coco_mask

    return [np.kron(coco_mask.decode(m), np.ones((scale, scale), np.uint8)).astype(bool)
            for m in masks]


class WorstImages:
    """Keeps the `size` worst images seen (analysis.badness) with their pixels, not all."""

    def __init__(self, size: int = NUM_WORST_IMAGES) -> None:
        self.size, self.kept = size, []

    def offer(self, image, pixels: np.ndarray) -> None:
        errors = analysis.image_errors(image)
        if not errors.objects:
            return  # an image without objects has nothing to miss
        self.kept.append((analysis.badness(errors), image, pixels))
        self.kept.sort(key=lambda entry: entry[0])
        del self.kept[self.size:]

    def ranked(self, min_score: float = analysis.SHOWN_SCORE) -> list:
        """The images kept, worst first, their errors counted from `min_score` (the score
        they are drawn at; they were chosen at SHOWN_SCORE, before any threshold was known)."""
        counted = [(analysis.image_errors(image, min_score), image, pixels)
                   for _, image, pixels in self.kept]
        return sorted(counted, key=lambda entry: analysis.badness(entry[0]))


def image_digests(input_path: str) -> dict[str, str]:
    """Each image's sha256 in the records `input_path` reads -> its file name (the first
    record that holds it)."""
    import tensorflow as tf

    features = {key: tf.io.FixedLenFeature((), tf.string, default_value="")
                for key in ("image/encoded", "image/filename")}
    found: dict[str, str] = {}
    paths = match(input_path)
    if not paths:
        return found
    for batch in tf.data.TFRecordDataset(paths).batch(256).map(
            lambda records: tf.io.parse_example(records, features)):
        for image, name in zip(batch["image/encoded"].numpy(), batch["image/filename"].numpy(),
                               strict=True):
            found.setdefault(hashlib.sha256(image).hexdigest(), name.decode(errors="replace"))
    return found


def check_held_out(train_input: str | None, test_input: str, asked: str = "") -> None:
    """A test split that shares images with the training split (by content, as conversion
    holds the test split out: trainer/data/changes.py) would be recorded, and gated on, as
    held out when it is not: refused in one line before any checkpoint is evaluated (and
    before training, for `asked` --test), by the trainer as it starts."""
    trained = image_digests(train_input) if train_input else {}
    if not trained:
        return
    test = image_digests(test_input)
    shared = sorted(name for digest, name in test.items() if digest in trained)
    if shared:
        flag = asked or f"{shown(TrainArgs, 'eval_split')} {files.TEST}"
        raise SettingsError(
            f"{flag}: {len(shared)} of the test split's {len(test)} images are "
            f"in the training split too, by content ({', '.join(map(repr, shared[:3]))}"
            f"{', ...' if len(shared) > 3 else ''}): its figures would not be held out. "
            "Convert the data again (`invoke data.convert` keeps each image in one split), or "
            + (f"drop {asked}" if asked else f"evaluate on {files.VAL}"))


def evaluator_for(settings, params) -> CheckpointEvaluator:
    """The evaluator of a run: its evaluation data (validation, or the test split's with
    --eval_split test, which the trainer checked is held out: check_held_out), class names
    and summary directory (validation/ or test/)."""
    names = id_to_name(read_label_map(settings.label_map)) if settings.label_map else {}
    split = settings.eval_split
    subdir = TEST_SUMMARY_SUBDIR if split == files.TEST else SUMMARY_SUBDIR
    summary_dir = f"{settings.tensorboard_dir or settings.model_dir}/{subdir}"
    return CheckpointEvaluator(params, settings.model_dir, summary_dir, names, split)


def evaluate_latest(evaluator: CheckpointEvaluator) -> EvaluationRecord:
    checkpoint = model_dir_lib.newest_restorable(evaluator.model_dir, model=evaluator.model)
    if checkpoint is None:
        raise FileNotFoundError(f"no checkpoint in {evaluator.model_dir} to evaluate")
    return evaluator.evaluate(checkpoint)


def evaluate_chosen(evaluator: CheckpointEvaluator, choice=None):
    """The checkpoint export would choose (`choice`: the best the run keeps, by default;
    the newest when it keeps none, saying so) evaluated once; (its record, why that one)."""
    chosen = choose(evaluator.model_dir, choice or DEFAULT_CHOICE, model=evaluator.model)
    return evaluator.evaluate(chosen.path), chosen.reason


def evaluate_continuously(
    evaluator: CheckpointEvaluator,
    final_step: Callable[[], int],
    idle_timeout: float,
    poll_interval: float = 10.0,
    on_result: Callable[[EvaluationRecord], None] = lambda result: None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[EvaluationRecord]:
    """Evaluates new checkpoints as they appear until the one at `final_step()` is done (asked
    anew each time: training may record its length after the evaluator starts)."""
    import tensorflow as tf

    model_dir = evaluator.model_dir
    done = evaluated_steps(model_dir)
    if done and max(done) >= final_step():
        log.info("final checkpoint (step %d) already evaluated", final_step())
        return []
    results, last_progress = [], clock()
    unusable: set[int] = set()
    while True:
        skip = done | unusable
        pending = [c for c in model_dir_lib.list_checkpoints(model_dir)
                   if model_dir_lib.checkpoint_step(c) not in skip]
        if pending:
            newest = pending[-1]  # behind the trainer: skip to the newest, never to a stale one
            try:
                result = evaluator.evaluate(newest)
            except (model_dir_lib.ForeignCheckpoint, tf.errors.OpError, IndexError) as error:
                # another model's, deleted or half-written
                problem = str(error) if isinstance(error, model_dir_lib.ForeignCheckpoint) \
                    else model_dir_lib.first_line(error)
                model_dir_lib.warn(model_dir_lib.unrestorable(newest, problem))
                unusable.add(model_dir_lib.checkpoint_step(newest))
                continue
            done.add(result.step)
            results.append(result)
            on_result(result)
            last_progress = clock()
            if result.step >= final_step():
                return results
            continue
        if done and max(done) >= final_step():  # the run ended early (its verdict)
            return results
        idle = clock() - last_progress
        if idle > idle_timeout:
            last = f"step {max(done)}" if done else "none yet"
            raise EvalTimeoutError(
                f"no new checkpoint in {model_dir} for {idle:.0f} s (last evaluated: {last}; "
                f"waiting for step {final_step()}). Is the training job running? Raise "
                f"{shown(TrainArgs, 'eval_idle_timeout')} if checkpoints are far apart."
            )
        sleep(poll_interval)
