"""Runs an exported detector on image files: annotated pictures and a JSON of detections."""

from __future__ import annotations

import glob
import json
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

from trainer import model_dir as model_dir_lib
from trainer.data.label_map import id_to_name, read_label_map
from trainer.visualize import draw_detections

DETECTIONS_FILE = "detections.json"


class PredictError(RuntimeError):
    pass


def load_model(model: str):
    import tensorflow as tf

    try:
        return tf.saved_model.load(model).signatures["serving_default"]
    except Exception as error:  # missing, truncated or foreign files raise many types
        raise PredictError(f"{model} is not a readable SavedModel with a serving_default "
                           f"signature ({model_dir_lib.first_line(error)}); export one with "
                           "`invoke export`") from None


def predict(model: str, images: str, output_dir: str, min_score: float = 0.3) -> dict:
    """Detects in every image matching `images`; unreadable images are reported, not fatal."""
    import tensorflow as tf

    paths = sorted(glob.glob(images))
    if not paths:
        raise PredictError(f"no image matches {images}")
    serve = load_model(model)
    label_map_path = f"{model}/{model_dir_lib.LABEL_MAP_FILE}"
    names = id_to_name(read_label_map(label_map_path)) if Path(label_map_path).exists() else {}
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    results, failures = [], []
    for path in paths:
        try:
            with Image.open(path) as opened:
                image = ImageOps.exif_transpose(opened).convert("RGB")  # as a person sees it
        except Exception as error:  # PIL raises many types for undecodable bytes
            failures.append({"image": path, "error": str(error)})
            continue
        outputs = serve(tf.constant(np.asarray(image)[None]))
        n = int(outputs["num_detections"][0])
        boxes = outputs["detection_boxes"][0][:n].numpy()
        classes = outputs["detection_classes"][0][:n].numpy()
        scores = outputs["detection_scores"][0][:n].numpy()
        annotated = out / f"{Path(path).stem}_detections.jpg"
        draw_detections(image, boxes, classes, scores, names, min_score).save(annotated,
                                                                               quality=92)
        results.append({
            "image": path, "annotated": str(annotated), "width": image.width,
            "height": image.height,
            "detections": [
                {"box": [round(float(v), 5) for v in box], "class_id": int(cls),
                 "class": names.get(int(cls), str(int(cls))), "score": round(float(score), 5)}
                for box, cls, score in zip(boxes, classes, scores, strict=True)
                if score >= min_score
            ],
        })
    report = {"model": model, "min_score": min_score, "box_format": "ymin,xmin,ymax,xmax (0-1)",
              "images": results, "failures": failures, "path": str(out / DETECTIONS_FILE)}
    Path(report["path"]).write_text(json.dumps(report, indent=2) + "\n")
    return report
