"""Runs a detector on image files: annotated pictures and a JSON of detections.

The detector may be an exported SavedModel, a `.tflite` file, or (from the launcher) a
Vertex AI endpoint: each is a function from one picture to its detections, and everything
else (reading the images, drawing, the report) is the same for all of them. A Mask R-CNN
detector also returns each detection's mask over its box: the pictures fill it translucent in
the class colour and detections.json holds it as COCO RLE in the image's pixels.
"""

from __future__ import annotations

import glob
import io
import json
from pathlib import Path

from PIL import ExifTags, ImageOps

from trainer.common.errors import PredictError, SettingsError
from trainer.common.files import DETECTIONS_FILE, LABEL_MAP_FILE, model_format
from trainer.common.io import open_regular
from trainer.data.defaults import MAX_PIXELS, max_pixels_problem
from trainer.data.images import open_checked
from trainer.data.label_map import id_to_name, read_label_map
from trainer.detections.detector import Detector, ImageRefused, Picture
from trainer.detections.masks import paste, to_rle
from trainer.detections.visualize import draw_detections
from trainer.evaluation import operating
from trainer.export import saved_model
from trainer.export.formats import file_detector
from trainer.export.saved_model import serving_takes
from trainer.model import model_dir as model_dir_lib
from trainer.prediction.results import DETECTIONS_ONLY, ResultForms

MASK_FORMAT = "COCO RLE in image pixels (pycocotools.mask.decode), for a mask model's detections"


def read_picture(path: str, max_pixels: int = MAX_PIXELS) -> Picture:
    """Raises ImageError for an image over `max_pixels` (from its header, before decoding)
    and PIL's many error types for undecodable bytes; the caller reports them. An animation
    is its first frame, as in conversion (Pillow decodes no other)."""
    with open_regular(path) as file:  # a FIFO among the --images would wait for a writer
        data = file.read()
    with open_checked(data, max_pixels) as opened:
        # read from the header: exif_transpose returns a copy whether it turns or not
        turned = opened.getexif().get(ExifTags.Base.Orientation, 1) != 1
        image = ImageOps.exif_transpose(opened).convert("RGB")
        if turned or not serving_takes(data):
            png = io.BytesIO()
            image.save(png, "PNG")
            data = png.getvalue()
    return Picture(path, image, data)


def load_detector(model: str) -> tuple[Detector, dict[int, str]]:
    """A SavedModel directory or a model file (.tflite, .onnx, OpenVINO's .xml), with the
    class names of the label map exported beside it."""
    kind = model_format(model)
    folder = Path(model).parent if kind else Path(model)
    label_map = folder / LABEL_MAP_FILE
    names = id_to_name(read_label_map(str(label_map))) if label_map.exists() else {}
    return (file_detector(model, kind) if kind else saved_model.detector(model)), names


def predict(model: str, images: str, output_dir: str, score_threshold: float | None = None,
            max_pixels: int = MAX_PIXELS, forms: ResultForms = DETECTIONS_ONLY) -> dict:
    """Detects with a local export at `score_threshold`, else at the one its export.json
    records (trainer/evaluation/operating.py); `forms`: what else the report is written as."""
    if problem := max_pixels_problem(max_pixels):
        raise SettingsError(problem)
    paths = sorted(glob.glob(images))
    if not paths:
        raise PredictError(f"no image matches {images}")
    detector, names = load_detector(model)
    return detect_files(detector, names, model, paths, output_dir,
                        operating.threshold(score_threshold, operating.read_info(model)),
                        max_pixels, forms)


def detect_files(detector: Detector, names: dict[int, str], model: str, paths: list[str],
                 output_dir: str, threshold: tuple[float, str],
                 max_pixels: int = MAX_PIXELS, forms: ResultForms = DETECTIONS_ONLY) -> dict:
    """Detects in every file, keeping detections at `threshold` (the score, and where it
    came from, which the report says); an image that cannot be read, or that the detector
    fails on (a 100000x1 strip, say), is reported with its error and the others go on.
    The report is also written in each of `forms` (refused first if it cannot be)."""
    min_score, threshold_from = threshold
    index = forms.prepare(paths, names)
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    results, failures = [], []
    for path in paths:
        try:
            picture = read_picture(path, max_pixels)
        except Exception as error:  # PIL raises many types for undecodable bytes
            failures.append({"image": path, "error": str(error)})
            continue
        annotated = out / f"{Path(path).stem}_detections.jpg"
        try:
            found = detector(picture)
            kept = found.scores >= min_score
            masks = None if found.masks is None else [
                paste(mask, box, picture.image.height, picture.image.width)
                for mask, box in zip(found.masks[kept], found.boxes[kept], strict=True)]
            draw_detections(picture.image, found.boxes[kept], found.classes[kept],
                            found.scores[kept], names, min_score, masks=masks
                            ).save(annotated, quality=92)
        except ImageRefused as error:
            failures.append({"image": path, "error": str(error)})
            continue
        except Exception as error:  # TF, TFLite and PIL raise many types for odd images
            failures.append({"image": path, "error": model_dir_lib.first_line(error)})
            continue
        results.append({
            "image": path, "annotated": str(annotated), "width": picture.image.width,
            "height": picture.image.height,
            "detections": [
                {"box": [round(float(v), 5) for v in box], "class_id": int(cls),
                 "class": names.get(int(cls), str(int(cls))), "score": round(float(score), 5),
                 **({} if masks is None else {"mask": to_rle(masks[i])})}
                for i, (box, cls, score) in enumerate(zip(
                    found.boxes[kept], found.classes[kept], found.scores[kept], strict=True))
            ],
        })
    report = {"model": model, operating.KEY: min_score, "score_threshold_from": threshold_from,
              "box_format": "ymin,xmin,ymax,xmax (0-1)",
              "mask_format": MASK_FORMAT,
              "images": results, "failures": failures, "path": str(out / DETECTIONS_FILE)}
    report["results"] = forms.write(report, names, out, index)
    Path(report["path"]).write_text(json.dumps(report, indent=2) + "\n")
    return report
