"""Labels in the loop: images and the model's detections to a Label Studio project
(`label.push`), and what people submitted there back as a new version of a dataset
(`label.pull`), which `pipeline.run` then trains on.

Each pushed task carries the sha256 of its image (`data.pets_sha256`): pushing an image the
project holds already adds nothing, and a pull keeps only tasks this tool pushed whose image
is still those bytes. The pull writes Label Studio's export layout (the tasks' JSON and
`images/`, each image under a name of this tool's making, never the server's path) and
converts it as `data.convert --format labelstudio` does: the same checks, repairs and
report.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import re
import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from xml.sax.saxutils import quoteattr

from launch.stores.labelstudio import LabelStudioError, Studio
from trainer.data.formats.labelstudio import IMAGES, submitted
from trainer.prediction.results import LS_FROM, LS_TO

SHA = "pets_sha256"  # a pushed task's image's sha256, in its data
NAME = "pets_name"  # the image's file name as pushed
TASKS_FILE = "label_studio.json"
SAFE = re.compile(r"[^A-Za-z0-9._-]")


def label_config(names: Iterable[str]) -> str:
    """A project's labelling config: an image and one rectangle label per class."""
    labels = "".join(f"<Label value={quoteattr(name)}/>" for name in names)
    return (f'<View><Image name="{LS_TO}" value="${LS_TO}"/><RectangleLabels '
            f'name="{LS_FROM}" toName="{LS_TO}">{labels}</RectangleLabels></View>')


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclasses.dataclass(frozen=True)
class Pushed:
    project: int
    added: int
    present: int  # the same bytes pushed before
    prelabelled: int

    def summary(self) -> str:
        return (f"project {self.project}: {self.added} image(s) added "
                f"({self.prelabelled} with the model's detections as pre-labels), "
                f"{self.present} there already")


def push(studio: Studio, title: str, images: Sequence[Path], names: Sequence[str],
         predictions: Mapping[str, dict] | None = None,
         say: Callable[[str], None] = print) -> Pushed:
    """Adds each image the project does not hold (by its bytes) as a task, with its
    prediction (a Label Studio prediction, keyed by the image's file name) as its
    pre-labels."""
    project = studio.project(title, label_config(names))
    present = {task["data"].get(SHA) for task in studio.tasks(project)
               if isinstance(task.get("data"), dict)}
    added = prelabelled = 0
    for count, path in enumerate(images, start=1):
        data = path.read_bytes()
        sha = digest(data)
        if sha in present:
            continue
        task = studio.upload(project, path.name, data)
        found = studio.call("GET", f"/api/tasks/{task}")
        studio.call("PATCH", f"/api/tasks/{task}", {"data": {**found["data"], SHA: sha,
                                                             NAME: path.name}})
        prediction = (predictions or {}).get(path.name)
        if prediction and prediction.get("result"):
            studio.call("POST", "/api/predictions/", {"task": task, **prediction})
            prelabelled += 1
        present.add(sha)
        added += 1
        if count % 50 == 0:
            say(f"pushed {count} of {len(images)} images")
    return Pushed(project, added, len(images) - added, prelabelled)


@dataclasses.dataclass(frozen=True)
class Pulled:
    tasks: int  # the tasks the export holds: those this tool pushed, labelled
    skipped: dict[str, int]  # why others were left out
    version: str = ""  # the dataset version it became

    def summary(self) -> str:
        left = ", ".join(f"{count} {why}" for why, count in sorted(self.skipped.items()))
        return f"{self.tasks} labelled task(s) pulled" + (f"; left out: {left}" if left else "") \
            + (f"; published as version {self.version}" if self.version else "")


def pull(studio: Studio, title: str, out: Path, with_predictions: bool = False) -> Pulled:
    """Writes the project's labelled tasks as a Label Studio export in `out` (its JSON and
    images/): only tasks this tool pushed, whose image the server still holds as pushed;
    a task no person submitted is left out unless `with_predictions` (its newest
    prediction then stands as its annotation)."""
    project = studio.find_project(title)
    if project is None:
        raise LabelStudioError(f"{studio.url} has no project titled {title!r}: push first "
                               "(invoke label.push)")
    (out / IMAGES).mkdir(parents=True, exist_ok=True)
    kept: list[dict] = []
    skipped: collections.Counter[str] = collections.Counter()
    for task in studio.tasks(project):
        data = task.get("data") if isinstance(task.get("data"), dict) else {}
        sha, image = data.get(SHA), data.get(LS_TO)
        if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{64}", sha) or \
                not isinstance(image, str):
            skipped["not pushed by label.push"] += 1
            continue
        if submitted(task) is None and with_predictions and task.get("predictions"):
            newest = max(task["predictions"], key=lambda p: str(p.get("updated_at") or ""))
            task = {**task, "annotations": [{"result": newest.get("result") or [],
                                             "was_cancelled": False}]}
        if submitted(task) is None:
            skipped["not labelled"] += 1
            continue
        content = studio.download(image)
        if digest(content) != sha:
            skipped["image changed on the server"] += 1
            continue
        name = f"{sha[:16]}-{SAFE.sub('_', str(data.get(NAME) or 'image'))[-100:]}"
        (out / IMAGES / name).write_bytes(content)
        kept.append({"id": task.get("id"), "data": {LS_TO: f"{IMAGES}/{name}", SHA: sha},
                     "annotations": task["annotations"]})
    (out / TASKS_FILE).write_text(json.dumps(kept, indent=1) + "\n")
    return Pulled(len(kept), dict(skipped))


def current_label_map(data_dir: Path) -> dict[str, int] | None:
    """The label map of the dataset's newest version (None before its first): a pull keeps
    its classes' ids, so models trained on earlier versions read the new one alike."""
    from launch.features.pipeline.steps import versions
    from trainer.common.files import DATA_LABEL_MAP_FILE
    from trainer.data.label_map import parse_label_map

    found = versions(str(data_dir)) if data_dir.is_dir() else []
    path = data_dir / found[-1] / DATA_LABEL_MAP_FILE if found else None
    return parse_label_map(path.read_text()) if path and path.is_file() else None


def publish(pulled: Path, data_dir: Path, label_map: Mapping[str, int] | None,
            split=None) -> tuple[str, dict]:
    """Converts a pull (`pull`'s export) into a new version of the dataset in `data_dir`,
    written beside it and renamed into place whole, so a pipeline following the directory
    never reads half a version. The version and the conversion's report."""
    from trainer.data.convert import convert_directory
    from trainer.data.datasets import new_version

    version = new_version()
    partial = data_dir / f".{version}.partial"
    try:
        report = convert_directory(pulled, partial, format="labelstudio", label_map=label_map,
                                   split=split, num_shards=1, progress=False)
        partial.rename(data_dir / version)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return version, report


DEFAULT_URL = "http://localhost:8080"
URL_VARIABLE = "LABEL_STUDIO_URL"


def connect(url: str | None, token_file: str | None) -> Studio:
    """The server `--url` (else $LABEL_STUDIO_URL, else Label Studio's default address),
    with the token from the environment or `--token-file`."""
    import os

    from launch.stores.labelstudio import read_token

    return Studio(url or os.environ.get(URL_VARIABLE) or DEFAULT_URL, read_token(token_file))


def classes(data_dir: Path, model: str | None) -> dict[str, int]:
    """The classes the project labels: the dataset's (its newest version), else the
    model's export's label map."""
    from launch.errors import InputError
    from trainer.common.files import LABEL_MAP_FILE
    from trainer.data.label_map import parse_label_map

    found = current_label_map(data_dir)
    exported = Path(model, LABEL_MAP_FILE) if model else None
    if found is None and exported and exported.is_file():
        found = parse_label_map(exported.read_text())
    if not found:
        raise InputError(f"--data-dir {data_dir} has no version with a label map yet and no "
                         "--model names one: the project needs its classes")
    return found


def push_images(studio: Studio, title: str, pattern: str, data_dir: Path,
                model: str | None, work: Path, say: Callable[[str], None] = print) -> Pushed:
    """`label.push`: the images of `pattern`, with `model`'s detections (at its export's
    operating point) as pre-labels."""
    import glob

    from launch.errors import InputError
    from launch.features.workflow import predict
    from trainer.common.files import RESULT_FILES
    from trainer.prediction.results import ResultForms

    images = sorted(Path(p) for p in glob.glob(pattern) if Path(p).is_file())
    if not images:
        raise InputError(f"--images {pattern} matches no file")
    names = classes(data_dir, model)
    predictions: dict[str, dict] = {}
    if model:
        say(f"detecting with {model} for pre-labels")
        out = work / "prelabels"
        predict(model, pattern, str(out), forms=ResultForms(("labelstudio",)))
        for task in json.loads((out / RESULT_FILES["labelstudio"]).read_text()):
            predictions[Path(task["data"][LS_TO]).name] = task["predictions"][0]
    return push(studio, title, images, sorted(names, key=names.__getitem__), predictions, say)


def pull_version(studio: Studio, title: str, data_dir: Path, work: Path,
                 with_predictions: bool = False) -> Pulled:
    """`label.pull`: the project's labelled tasks as a new version of the dataset in
    `data_dir` (its classes' ids kept), with a test split (70/20/10, each image's split a
    function of its bytes: the pipeline tests on it, and no image changes split later)."""
    from trainer.data.planning import Split

    staged = work / "pulled"
    if staged.exists():
        shutil.rmtree(staged)
    pulled = pull(studio, title, staged, with_predictions)
    if not pulled.tasks:
        return pulled
    data_dir.mkdir(parents=True, exist_ok=True)
    version, _ = publish(staged, data_dir, current_label_map(data_dir),
                         Split(fraction=0.7, val_fraction=0.2))
    return dataclasses.replace(pulled, version=version)
