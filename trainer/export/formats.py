"""`export --format onnx,openvino`: the runtimes people deploy on, each checked against the
SavedModel before its file is written.

Both are the fixed-size graph (trainer/export/pixels.py) with the SavedModel's own
non-maximum suppression inside: ONNX through tf2onnx, OpenVINO from that ONNX file. Each is
run on the run's held-out images beside the SavedModel of the same checkpoint and written only
when it answers like it (agreement.Allowance: the same top detection on 99% of the images,
AP50 within 0.01), or when `--force REASON` says why anyway; export.json records the figures.
Single-stage RetinaNet experiments only: the two-stage detectors did not convert (measured,
REFUSED_TWO_STAGE), and neither format carries masks.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np

from trainer.common.errors import PredictError, SettingsError
from trainer.common.files import EXPORT_INFO_FILE, MODEL_FILES
from trainer.common.io import write_text
from trainer.detections.detector import Detections, Detector
from trainer.evaluation import operating
from trainer.export import onnx, openvino, pixels, saved_model
from trainer.export.agreement import FormatCheck, check_format, detect_all, held_out
from trainer.export.saved_model import ExportOptions
from trainer.export.tflite import TfliteDetector
from trainer.export.tflite import check_exportable as check_tflite
from trainer.model import model_dir as model_dir_lib
from trainer.model.best.choice import DEFAULT_CHOICE, Choice, Chosen

RUNTIMES = ("onnx", "openvino")  # what this module writes; saved_model and tflite have theirs
CHECK_IMAGES = 200  # held-out images each format is checked on: 2 misses of 200 still pass
# pets_fasterrcnn_resnetfpn, 5 steps, exported with Model Garden's v2 NMS (issue 56, 2026-12)
REFUSED_TWO_STAGE = ("a two-stage detector did not convert when measured (Faster R-CNN: "
                     "tf2onnx ran 30 minutes at 6.6 GB without finishing; OpenVINO took 7.5 "
                     "minutes and had not answered its first image after 10)")
# The NMS every runtime file carries, whatever the experiment trains with: TensorFlow's
# CombinedNonMaxSuppression, which tf2onnx maps to one ONNX NonMaxSuppression. Model Garden's
# per-class `v2` (pets_retinanet_resnetfpn's) becomes an ONNX Loop a class, which OpenVINO
# refused ("Conversion is failed for: Loop-17") after tf2onnx took 6 minutes at 10 GB
# (2026-12-02); the check against the SavedModel, which keeps the experiment's, holds them alike.
COMBINED_NMS = {"task": {"model": {"detection_generator": {"nms_version": "batched"}}}}
# A model file's runner: its path -> a function of an RGB image to boxes, classes, scores
RUNNERS: dict[str, Callable[[str], Callable[[np.ndarray], tuple]]] = {
    "tflite": TfliteDetector, "onnx": onnx.OnnxDetector, "openvino": openvino.OpenvinoDetector}
SHOWN = {"tflite": "TFLite", "onnx": "ONNX", "openvino": "OpenVINO"}  # in messages


@dataclasses.dataclass(frozen=True)
class Written:
    format: str
    path: str
    size_bytes: int
    conversion_seconds: float
    check: FormatCheck


def file_detector(model: str, kind: str) -> Detector:
    """A model file of format `kind` (files.model_format) as a Detector."""
    try:
        run = RUNNERS[kind](model)
    except Exception as error:  # each runtime raises its own types for a foreign file
        raise PredictError(f"{model} is not a readable {SHOWN[kind]} detector "
                           f"({model_dir_lib.first_line(error)}); export one with "
                           f"`invoke export --format {kind}`") from None
    return lambda picture: Detections(*run(picture.pixels))


def check_holds(params, kind: str) -> None:
    """Refuses, in one line, an experiment `kind` cannot hold."""
    from official.vision import configs  # start-up time

    if params.task.model.get("include_mask"):
        raise SettingsError(f"--format {kind} carries no masks, and {REFUSED_TWO_STAGE}: "
                            "export this Mask R-CNN model as a SavedModel, whose signatures "
                            "return detection_masks")
    if not isinstance(params.task.model, configs.retinanet.RetinaNet):
        raise SettingsError(f"--format {kind} holds RetinaNet experiments (e.g. "
                            f"pets_retinanet_mobilenet): {REFUSED_TWO_STAGE}; export this "
                            "model as a SavedModel")


def check_formats(model_dir: str, kinds: Sequence[str]) -> None:
    """Refuses, before anything is exported, a format among `kinds` (--format's names) that
    cannot hold the run's experiment."""
    params = model_dir_lib.load_params(model_dir)
    if "tflite" in kinds:
        check_tflite(params)
    for kind in kinds:
        if kind in RUNTIMES:
            check_holds(params, kind)


def export_runtimes(model_dir: str, output_dir: str, kinds: Sequence[str],
                    choice: Choice = DEFAULT_CHOICE, options: ExportOptions | None = None,
                    force: str | None = None, reference: str | None = None) -> list[Written]:
    """Writes each of `kinds` (RUNTIMES) of the checkpoint `choice` names into `output_dir`,
    each checked against the SavedModel at `reference` (a SavedModel export of the same
    checkpoint; default: one written aside for the check). A format that answers unlike it
    (agreement.Allowance) is not written, unless `force` gives the reason: SettingsError
    names it, after the others are written."""
    import tensorflow as tf

    options = options or ExportOptions()
    params = model_dir_lib.load_params(model_dir)
    for kind in kinds:
        check_holds(params, kind)
    params.override(options.overrides(), is_strict=True)
    tf.get_logger().setLevel("ERROR")
    truth = held_out(str(params.task.validation_data.input_path),
                     f"--format {','.join(kinds)}", CHECK_IMAGES)
    with tempfile.TemporaryDirectory() as folder:
        staging = Path(folder)
        graph = copy.deepcopy(params)
        graph.override(COMBINED_NMS, is_strict=True)
        chosen = pixels.write_model(model_dir, graph, choice, str(staging / "graph"),
                                    pixels.FLOAT)
        if reference is None:
            reference = str(staging / "reference")
            saved_model.write_model(model_dir, params, options, Choice("path", path=chosen.path),
                                    reference)
        expected = detect_all(saved_model.detector(reference), truth)
        made = convert(staging, kinds, params.task.model.input_size[0])
        checks = [check_format(kind, detect_all(file_detector(str(staging / MODEL_FILES[kind]),
                                                              kind), truth),
                               expected, truth, force=force) for kind in kinds]
        written, failed = land(staging, Path(output_dir), checks, made)
    if written:
        model_dir_lib.copy_label_map(model_dir, output_dir)
        record(Path(output_dir), written, chosen,
               operating.from_evaluation(model_dir, chosen.path), params.task.model.input_size[0])
    if failed:
        raise SettingsError(refusal(failed, written))
    return written


def land(staging: Path, output: Path, checks: Sequence[FormatCheck],
         seconds: dict[str, float]) -> tuple[list[Written], list[FormatCheck]]:
    """Each file in `staging` whose check passed (or was forced) moved into `output`, and the
    checks that failed: their files stay behind, with the staging directory."""
    written, failed = [], []
    for check in checks:
        if not check.passed and check.forced is None:
            failed.append(check)
            continue
        written.append(place(staging / MODEL_FILES[check.format], output, check.format,
                             seconds[check.format], check))
    return written, failed


def refusal(failed: Sequence[FormatCheck], written: Sequence[Written]) -> str:
    """One line: the formats not written, each with its figures, and what was written."""
    kept = "; written: " + ", ".join(w.path for w in written) if written else ""
    return ("answers unlike the SavedModel, not written: " + "; ".join(c.line() for c in failed)
            + kept + ". Export a SavedModel or TFLite file instead, or pass --force REASON to "
            "write it anyway")


def convert(staging: Path, kinds: Sequence[str], size: int) -> dict[str, float]:
    """Each of `kinds` from the fixed-size graph in `staging`, into `staging`: its
    conversion's seconds (OpenVINO's includes the ONNX file's it is converted from)."""
    started = time.monotonic()
    onnx_file = staging / MODEL_FILES["onnx"]
    with refused_as("onnx"):
        onnx.convert(str(staging / "graph"), onnx_file, size)
    seconds = {"onnx": time.monotonic() - started}
    if "openvino" in kinds:
        with refused_as("openvino"):
            openvino.convert(onnx_file, staging / MODEL_FILES["openvino"])
        seconds["openvino"] = time.monotonic() - started
    return seconds


@contextlib.contextmanager
def refused_as(kind: str) -> Iterator[None]:
    """A converter's failure (each raises its own types, with pages of log) as one line."""
    try:
        yield
    except SettingsError:
        raise
    except Exception as error:
        raise SettingsError(f"--format {kind} could not convert this model "
                            f"({model_dir_lib.first_line(error)}); export a SavedModel, and "
                            "tell us the experiment") from None


def place(file: Path, output: Path, kind: str, seconds: float, check: FormatCheck) -> Written:
    """`file` (and OpenVINO's weights beside it) moved into `output`, whole: a reader never
    sees half a model."""
    output.mkdir(parents=True, exist_ok=True)
    parts = [file] + ([file.with_suffix(openvino.WEIGHTS_SUFFIX)] if kind == "openvino" else [])
    for part in reversed(parts):  # the graph last: its weights are in place when it appears
        partial = output / f"{part.name}.partial"
        shutil.copyfile(part, partial)
        partial.replace(output / part.name)
    return Written(kind, str(output / file.name), sum(part.stat().st_size for part in parts),
                   seconds, check)


def record(output: Path, written: Sequence[Written], chosen: Chosen,
           threshold: dict | None, size: int) -> None:
    """export.json's section of each written format: its file, checkpoint, input, score
    threshold, check, size and conversion time. The folder's other sections are kept."""
    import tensorflow as tf

    sections = {w.format: {
        "file": Path(w.path).name, "checkpoint": chosen.path.rsplit("/", 1)[-1],
        "input": {"name": pixels.INPUT, "dtype": pixels.FLOAT, "shape": [1, size, size, 3],
                  "pixels": "RGB values 0-255, letterboxed: resized to fit the square keeping "
                            "the aspect ratio (bilinear, unrounded), padded at the bottom and "
                            "right with the mean colour "
                            f"{[round(float(v), 3) for v in pixels.MEAN_RGB]} "
                            "(docs/guides/export-formats.md)"},
        operating.KEY: threshold, "check": w.check.record(), "size_bytes": w.size_bytes,
        "conversion_seconds": round(w.conversion_seconds, 1), "tensorflow": tf.__version__,
        **versions(w.format)} for w in written}
    write_text(str(output / EXPORT_INFO_FILE),
               json.dumps({**operating.export_info(output), **sections}, indent=2) + "\n")


def versions(kind: str) -> dict[str, str]:
    """The converter and runtime versions a format was written and checked with."""
    from importlib.metadata import version  # start-up time

    names = {"onnx": ("tf2onnx", "onnx", "onnxruntime"), "openvino": ("tf2onnx", "openvino")}
    return {name: version(name) for name in names[kind]}
