"""A prediction report in the forms other tools read, beside the project's detections.json.

- `coco`: COCO results (`[{image_id, category_id, bbox: [x, y, w, h] in pixels, score}]`, and
  `segmentation` as RLE for a mask model), which pycocotools' `loadRes` reads against the
  dataset's COCO file: the ids come from that file (`--coco-annotations`), by file name and
  by class name, and an image or class it does not hold is refused before anything runs.
- `yolo`: a `.txt` per image (`class x_center y_center width height score`, normalised, as
  Ultralytics' `save_txt` with `save_conf` writes), the class as its position in
  `classes.txt` beside them (the label map's ids in order; a YOLO dataset's own order).
- `supervision`: the rows supervision's `JSONSink` writes (corners in pixels, `class_id`,
  `confidence`, `tracker_id`), with `class_name` and `image` as its custom data.
- `labelstudio`: Label Studio tasks with pre-annotations (`rectanglelabels` in percent of the
  image), to import and correct.

Pure functions of the report (trainer/prediction/predict.py: `detect_files`) and the label
map's names; `ResultForms.write` is the only I/O.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

from trainer.args import PredictArgs
from trainer.common.errors import PredictError
from trainer.common.files import RESULT_FILES

YOLO_CLASSES = "classes.txt"
# Label Studio's default image labelling config names its tags so (`<RectangleLabels
# name="label" toName="image">`); a project with other names renames them on import
LS_FROM, LS_TO = "label", "image"


@dataclasses.dataclass(frozen=True)
class CocoIndex:
    """What COCO results need of the dataset's file: each image's id by its file's name,
    each class's category id by its label-map name."""

    image_ids: Mapping[str, int | str]
    category_ids: Mapping[str, int]
    source: str

    @classmethod
    def read(cls, path: str) -> CocoIndex:
        from trainer.data import coco  # start-up time: numpy, for `python -m trainer --help`

        try:
            parsed = coco.parse_coco(coco.read_json(Path(path)))
        except (coco.CocoError, OSError) as error:
            raise PredictError(f"--coco-annotations {path}: {error}") from None
        ids: dict[str, int | str] = {}
        twice = set()
        for image in parsed.images:
            name = PurePosixPath(image.file_name).name
            if name in ids:
                twice.add(name)
            ids[name] = image.image_id
        for name in twice:  # which id a result means would be a guess
            del ids[name]
        return cls(ids, {name: i for i, name in parsed.names.items()}, path)

    def check(self, paths: Sequence[str], names: Mapping[int, str]) -> None:
        """Refuses, before any image is read, an image or a class the file does not hold."""
        missing = [p for p in paths if Path(p).name not in self.image_ids]
        if missing:
            raise PredictError(
                f"--results coco: {len(missing)} of {len(paths)} image(s) are not in "
                f"--coco-annotations {self.source} (or their file name is there twice), e.g. "
                f"{Path(missing[0]).name[:100]!r}: predict on the dataset's images, or drop coco")
        foreign = sorted(set(names.values()) - set(self.category_ids))
        if foreign:
            raise PredictError(f"--results coco: the model's class {foreign[0][:80]!r} (and "
                               f"{len(foreign) - 1} more) is no category of "
                               f"--coco-annotations {self.source}: give the COCO file of the "
                               "dataset the model was trained on")


def coco_results(report: Mapping, index: CocoIndex) -> list[dict]:
    """The report's detections as COCO results: boxes in the image's pixels."""
    results = []
    for entry in report["images"]:
        image_id = index.image_ids[Path(entry["image"]).name]
        width, height = entry["width"], entry["height"]
        for found in entry["detections"]:
            ymin, xmin, ymax, xmax = found["box"]
            result = {"image_id": image_id, "category_id": index.category_ids[found["class"]],
                      "bbox": [round(xmin * width, 2), round(ymin * height, 2),
                               round((xmax - xmin) * width, 2),
                               round((ymax - ymin) * height, 2)],
                      "score": found["score"]}
            if "mask" in found:
                result["segmentation"] = found["mask"]
            results.append(result)
    return results


def yolo_classes(names: Mapping[int, str]) -> list[int]:
    """The label map's ids in order: a YOLO class is an id's position here."""
    return sorted(names)


def yolo_text(entry: Mapping, classes: Sequence[int]) -> str:
    """One image's detections, a line each: class x_center y_center width height score."""
    position = {class_id: i for i, class_id in enumerate(classes)}
    lines = []
    for found in entry["detections"]:
        ymin, xmin, ymax, xmax = found["box"]
        lines.append(f"{position[found['class_id']]} {(xmin + xmax) / 2:.6f} "
                     f"{(ymin + ymax) / 2:.6f} {xmax - xmin:.6f} {ymax - ymin:.6f} "
                     f"{found['score']:.5f}")
    return "".join(f"{line}\n" for line in lines)


def supervision_rows(report: Mapping) -> list[dict]:
    """The rows of supervision's JSONSink for each image's detections (no tracker)."""
    rows = []
    for entry in report["images"]:
        width, height = entry["width"], entry["height"]
        for found in entry["detections"]:
            ymin, xmin, ymax, xmax = found["box"]
            rows.append({"x_min": xmin * width, "y_min": ymin * height, "x_max": xmax * width,
                         "y_max": ymax * height, "class_id": found["class_id"],
                         "confidence": found["score"], "tracker_id": "",
                         "class_name": found["class"], "image": entry["image"]})
    return rows


def label_studio_tasks(report: Mapping) -> list[dict]:
    """A task an image, its detections as one prediction (the model's: `model_version`),
    scored by its weakest detection (Label Studio sorts tasks by it: the least sure first)."""
    tasks = []
    for entry in report["images"]:
        width, height = entry["width"], entry["height"]
        result = []
        for n, found in enumerate(entry["detections"]):
            ymin, xmin, ymax, xmax = found["box"]
            result.append({
                "id": f"d{n}", "type": "rectanglelabels", "from_name": LS_FROM,
                "to_name": LS_TO, "original_width": width, "original_height": height,
                "image_rotation": 0, "score": found["score"],
                "value": {"x": xmin * 100, "y": ymin * 100, "width": (xmax - xmin) * 100,
                          "height": (ymax - ymin) * 100, "rotation": 0,
                          "rectanglelabels": [found["class"]]}})
        scores = [found["score"] for found in entry["detections"]]
        tasks.append({"data": {LS_TO: entry["image"]}, "predictions": [{
            "model_version": str(report["model"]), "result": result,
            "score": min(scores) if scores else 0.0}]})
    return tasks


@dataclasses.dataclass(frozen=True)
class ResultForms:
    """What `predict --results` writes beside detections.json, and the COCO file it reads
    (PredictArgs.check has refused what does not go together)."""

    forms: tuple[str, ...] = ()
    coco_annotations: str | None = None

    @classmethod
    def of(cls, args: PredictArgs) -> ResultForms:
        return cls(args.result_forms(), args.coco_annotations)

    def prepare(self, paths: Sequence[str], names: Mapping[int, str]) -> CocoIndex | None:
        """Refuses, before any image is read, what a form cannot say (a model without class
        names, two images one YOLO file); the COCO file's ids, checked against the images
        and classes."""
        named = [form for form in self.forms if form in ("coco", "yolo")]
        if named and not names:
            raise PredictError(f"--results {named[0]} names each class as the label map does, "
                               "and the model has no label_map.pbtxt beside it: export it "
                               "with `invoke export`")
        stems = [Path(p).stem for p in paths]
        if "yolo" in self.forms and len(set(stems)) < len(stems):
            twice = next(stem for stem in stems if stems.count(stem) > 1)
            raise PredictError(f"--results yolo writes a file an image by its name, and "
                               f"{twice[:80]!r} is the name of two of the images: predict on "
                               "one folder at a time")
        if "coco" not in self.forms:
            return None
        index = CocoIndex.read(str(self.coco_annotations))
        index.check(paths, names)
        return index

    def write(self, report: Mapping, names: Mapping[int, str], out: Path,
              index: CocoIndex | None) -> dict[str, str]:
        """Each form's file (yolo: its directory) under `out`, by form."""
        written = {}
        for form in self.forms:
            path = out / RESULT_FILES[form]
            if form == "coco":
                assert index is not None  # prepare() read it
                _dump(path, coco_results(report, index))
            elif form == "yolo":
                path.mkdir(exist_ok=True)
                classes = yolo_classes(names)
                (path / YOLO_CLASSES).write_text("".join(f"{names[i]}\n" for i in classes))
                for entry in report["images"]:
                    (path / f"{Path(entry['image']).stem}.txt").write_text(
                        yolo_text(entry, classes))
            elif form == "supervision":
                _dump(path, supervision_rows(report))
            else:
                _dump(path, label_studio_tasks(report))
            written[form] = str(path)
        return written


DETECTIONS_ONLY = ResultForms()  # detections.json alone: what predict writes unasked


def _dump(path: Path, value: object) -> None:
    path.write_text(json.dumps(value, indent=2) + "\n")
