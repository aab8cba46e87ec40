"""The score threshold that travels with a model: an export records the operating point its
checkpoint's evaluation chose (eval/ckpt-N.json: the F1-best threshold, confusion.py) in
export.json, and whoever detects with that export (`predict`, here, on an endpoint or in a
batch job) drops detections below it unless told otherwise, so what was measured is what is
served. TensorFlow-free: read by the launcher too."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainer.common import files, io, jsonnum
from trainer.common.errors import JsonError
from trainer.evaluation.analysis import SHOWN_SCORE
from trainer.model import model_dir
from trainer.model.eval_record import EvaluationRecord

KEY = "score_threshold"  # export.json's (and, for a .tflite, its "tflite" section's) key
FLAG = "--score-threshold"


def from_evaluation(model_directory: str, checkpoint: str) -> dict[str, Any] | None:
    """What export.json records of `checkpoint`'s evaluation: its F1-best threshold, what
    that gives, and each class's own best; None when it was not evaluated with one."""
    step = model_dir.checkpoint_step(checkpoint)
    name = files.metrics_file(step)
    record = EvaluationRecord.read(f"{model_directory}/{files.METRICS_DIR}/{name}", step)
    point = record.operating_point if record else None
    if not point:
        return None
    return {"value": point["threshold"], "f1": point["f1"], "precision": point["precision"],
            "recall": point["recall"], "iou": point["iou"], "overlap": point["overlap"],
            "evaluation": f"{files.METRICS_DIR}/{name}",
            "per_class": {name: values["best_threshold"]
                          for name, values in point["per_class"].items()}}


def recorded(info: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """export.json's threshold, if it is a well-formed one (a value in [0, 1], the bounds
    of the evaluation record's)."""
    found = info.get(KEY) if isinstance(info, Mapping) else None
    value = jsonnum.number(found.get("value")) if isinstance(found, dict) else None
    return found if value is not None and 0 <= value <= 1 else None


def export_info(folder: Path) -> dict[str, Any]:
    """`folder`'s export.json ({} when there is none or it is unreadable: an export from
    before it, or a model copied alone)."""
    try:
        info = jsonnum.read_file(str(folder / files.EXPORT_INFO_FILE), files.MAX_RUN_JSON_BYTES)
    except (JsonError, OSError):
        return {}
    return info if isinstance(info, dict) else {}


def read_info(model: str) -> dict[str, Any]:
    """What export.json says of `model`: a SavedModel directory's whole file, a model file's
    (.tflite, .onnx, OpenVINO's .xml) own section of its folder's."""
    kind = files.model_format(model)
    if kind is None:
        return export_info(Path(model))
    section = export_info(Path(model).parent).get(kind)
    return section if isinstance(section, dict) else {}


def model_sections(folder: str) -> dict[str, Any]:
    """export.json's sections of the model files (files.MODEL_FILES) still in `folder`: what
    a new SavedModel export there keeps of the file it rewrites."""
    info = export_info(Path(folder))
    return {kind: info[kind] for kind, file in files.MODEL_FILES.items()
            if isinstance(info.get(kind), dict) and io.exists(f"{folder}/{file}")}


def threshold(given: float | None, info: Mapping[str, Any]) -> tuple[float, str]:
    """The threshold to detect at and why: `given` (the flag), else the export's evaluated
    one, else SHOWN_SCORE."""
    if given is not None:
        return given, FLAG
    found = recorded(info)
    if found:
        f1 = jsonnum.number(found.get("f1"))
        return float(found["value"]), (f"export.json: the F1-best score of "
                                       f"{found.get('evaluation', 'its evaluation')}"
                                       + (f" (F1 {f1:.3f})" if f1 is not None else ""))
    return SHOWN_SCORE, "the default: the export records no evaluated threshold"
