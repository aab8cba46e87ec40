"""Labels in the loop: images and the model's detections to a Label Studio project
(`label.push`), and what people submitted there back as a new version of a dataset
(`label.pull`), which `pipeline.run` then trains on.

Each pushed task carries the sha256 of its image (`data.pets_sha256`): pushing an image the
project holds already adds nothing, and a pull keeps only tasks this tool pushed whose image
is still those bytes. The pull writes Label Studio's export layout (the tasks' JSON and
`images/`, each image under a name of this tool's making, never the server's path) and
converts it as `data.convert --format labelstudio` does: the same checks, repairs and
report.

Their work directory (`work/label`) is the command's own while it runs: one labelling command
at a time holds it (`working`), and each folder a command refills is emptied by `fresh`, which
refuses a symbolic link in its place rather than follow it.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import hashlib
import json
import re
import shutil
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from xml.sax.saxutils import quoteattr

from launch.stores import cvat
from launch.stores.labelstudio import LabelStudioError, Studio
from trainer.data.formats.labelstudio import IMAGES, submitted
from trainer.prediction.results import LS_FROM, LS_TO

SHA = "pets_sha256"  # a pushed task's image's sha256, in its data
NAME = "pets_name"  # the image's file name as pushed
TASKS_FILE = "label_studio.json"
CHOICE_FILE = "choice.json"  # label.push --strategy: what it chose and why
REASON = "pets_reason"  # why the strategy chose the image, in its task's data
SAFE = re.compile(r"[^A-Za-z0-9._-]")
WORK_LOCK = ".labelling.lock"


@contextlib.contextmanager
def working(work: Path) -> Iterator[Path]:
    """`work`, held by this command for the block: a push or pull empties and refills its
    folders, so a second one at once (another terminal, a script) is refused in one line
    naming the process that holds it, before either loses the other's files."""
    from launch.errors import InputError
    from trainer.common import locks
    from trainer.common.errors import DirectoryBusy

    _not_a_link(work)
    try:
        lock = locks.hold(work, WORK_LOCK, "labelling's work directory")
    except DirectoryBusy as error:
        raise InputError(str(error)) from None
    try:
        yield work
    finally:
        lock.close()


def _not_a_link(path: Path) -> None:
    from launch.errors import InputError

    if path.is_symlink():
        raise InputError(f"{path} is a symbolic link: labelling writes only into folders of "
                         "its own, never through a link; remove it and run again")


def fresh(work: Path, *parts: str) -> Path:
    """work/PARTS..., empty, for this command's files: every folder on the way that exists is
    a real one (a link there is refused, not followed: emptying it would delete whatever it
    points at)."""
    from launch.errors import InputError

    folder = work
    for part in parts:
        if part in ("", ".", "..") or "/" in part or "\0" in part:
            raise InputError(f"{part[:80]!r} is not a folder name of labelling's own")
        folder = folder / part
        _not_a_link(folder)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    return folder


def label_config(names: Iterable[str]) -> str:
    """A project's labelling config: an image and one rectangle label per class."""
    labels = "".join(f"<Label value={quoteattr(name)}/>" for name in names)
    return (f'<View><Image name="{LS_TO}" value="${LS_TO}"/><RectangleLabels '
            f'name="{LS_FROM}" toName="{LS_TO}">{labels}</RectangleLabels></View>')


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclasses.dataclass(frozen=True)
class Pushed:
    project: int  # Label Studio's project, or CVAT's task the new images went to
    added: int
    present: int  # the same bytes pushed before
    prelabelled: int
    place: str = "project"

    def summary(self) -> str:
        return (f"{self.place} {self.project}: {self.added} image(s) added "
                f"({self.prelabelled} with the model's detections as pre-labels), "
                f"{self.present} there already")


def push(studio: Studio, title: str, images: Sequence[Path], names: Sequence[str],
         predictions: Mapping[str, dict] | None = None,
         say: Callable[[str], None] = print, reasons: Mapping[str, str] | None = None
         ) -> Pushed:
    """Adds each image the project does not hold (by its bytes) as a task, with its
    prediction (a Label Studio prediction, keyed by the image's file name) as its
    pre-labels and the reason it was chosen (keyed alike) in its data."""
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
        studio.call("PATCH", f"/api/tasks/{task}", {"data": {
            **found["data"], SHA: sha, NAME: path.name,
            **({REASON: reasons[path.name]} if path.name in (reasons or {}) else {})}})
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
    report: Mapping = dataclasses.field(default_factory=dict)  # its conversion report

    def summary(self) -> str:
        left = ", ".join(f"{count} {why}" for why, count in sorted(self.skipped.items()))
        lines = [f"{self.tasks} labelled task(s) pulled" +
                 (f"; left out: {left}" if left else "")]
        if self.version:
            splits = ", ".join(f"{split} {entry['examples']}"
                               for split, entry in self.report.get("splits", {}).items())
            merged = self.report.get("merged")
            lines.append(f"published as version {self.version}: {splits}" + (
                f" ({merged['kept']} example(s) of {merged['from']} kept, {merged['replaced']} "
                "labelled again)" if merged else ""))
            for action, said in (("skipped", "images left out"), ("dropped", "boxes dropped"),
                                 ("repaired", "repaired")):
                if found := self.report.get(action):
                    lines.append(f"{said}: " + ", ".join(
                        f"{count} {why}" for why, count in sorted(found.items())))
        return "\n".join(lines)


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


def newest_version(data_dir: Path) -> Path | None:
    from launch.features.pipeline.steps import versions

    found = versions(str(data_dir)) if data_dir.is_dir() else []
    return data_dir / found[-1] if found else None


def current_label_map(data_dir: Path) -> dict[str, int] | None:
    """The label map of the dataset's newest version (None before its first): a pull keeps
    its classes' ids, so models trained on earlier versions read the new one alike."""
    from trainer.common.files import DATA_LABEL_MAP_FILE
    from trainer.data.label_map import parse_label_map

    newest = newest_version(data_dir)
    path = newest / DATA_LABEL_MAP_FILE if newest else None
    return parse_label_map(path.read_text()) if path and path.is_file() else None


def publish(pulled: Path, data_dir: Path, label_map: Mapping[str, int] | None,
            split=None, form: str = "labelstudio") -> tuple[str, dict]:
    """Converts a pull (`pull`'s export) into a new version of the dataset in `data_dir`:
    the newest version's examples and the pulled ones (trainer/data/merge.py: an image
    labelled again is the pull's, in the split it had), written beside it and renamed into
    place whole, so a pipeline following the directory never reads half a version. The
    version and the conversion's report (with `merged`: what it kept of the one before)."""
    from trainer.data.convert import convert_directory
    from trainer.data.datasets import new_version
    from trainer.data.merge import merge, rewrite_report

    version = new_version()
    previous = newest_version(data_dir)
    partial = data_dir / f".{version}.partial"
    try:
        convert_directory(pulled, partial, format=form, label_map=label_map,
                          split=split, num_shards=1, progress=False, say=lambda _: None)
        merged = merge(previous, partial) if previous else None
        report = rewrite_report(partial, data_dir / version, merged)
        partial.rename(data_dir / version)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return version, report


DEFAULT_URL = "http://localhost:8080"
URL_VARIABLE = "LABEL_STUDIO_URL"
CVAT_URL_VARIABLE = "CVAT_URL"
TOOLS = ("labelstudio", "cvat")


def connect(url: str | None, token_file: str | None, tool: str = "labelstudio"
            ) -> Studio | cvat.Settings:
    """Label Studio at `--url` (else $LABEL_STUDIO_URL, else its default address), with the
    token from the environment or `--token-file`; or CVAT at `--url` (else $CVAT_URL),
    whose credentials launch/stores/cvat.py reads when it connects."""
    import os

    from launch.errors import InputError
    from launch.stores.labelstudio import read_token

    if tool not in TOOLS:
        raise InputError(f"--tool {tool}: one of {', '.join(TOOLS)}")
    if tool == "cvat":
        where = url or os.environ.get(CVAT_URL_VARIABLE)
        if not where:
            raise InputError(f"--tool cvat needs --url (or {CVAT_URL_VARIABLE}): the CVAT "
                             "server's address")
        cvat.credentials(token_file)  # refused now, not after the model has run
        return cvat.Settings(cvat.check_url(where), token_file)
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


@dataclasses.dataclass(frozen=True)
class Choice:
    """`label.push`'s choice of images: a strategy and its budget (no strategy: all)."""

    strategy: str | None = None
    budget: int | None = None
    against: str | None = None  # disagreement's second model
    seed: int = 0

    def check(self, model: str | None) -> None:
        from launch.errors import InputError
        from launch.features.label_choice import NEEDS_MODEL, STRATEGIES

        if self.strategy is not None and self.strategy not in STRATEGIES:
            raise InputError(f"--strategy {self.strategy}: one of {', '.join(STRATEGIES)}")
        if self.strategy and self.budget is None:
            raise InputError(f"--strategy {self.strategy} needs --budget N: how many images "
                             "to push")
        if self.budget is not None and self.budget < 1:
            raise InputError(f"--budget {self.budget}: at least 1 image")
        if self.strategy in NEEDS_MODEL and not model:
            raise InputError(f"--strategy {self.strategy} needs --model: the export whose "
                             "detections it weighs")
        if (self.strategy == "disagreement") != bool(self.against):
            raise InputError("--strategy disagreement needs --against MODEL (the int8 .tflite "
                             "beside the export, or another checkpoint's export), and "
                             "--against is for it alone")


def detected(model: str, pattern: str, out: Path) -> dict:
    """predict's report of `model` on `pattern`: every detection the export returns
    (threshold 0), so that a strategy sees the scores under the operating point too."""
    from launch.features.workflow import predict
    from trainer.common.files import DETECTIONS_FILE

    predict(model, pattern, str(out), score_threshold=0.0)
    return json.loads((out / DETECTIONS_FILE).read_text())


def local_model(cloud, model: str | None) -> str | None:
    """`model` here: an export in the bucket (the serving run's, gs://BUCKET/runs/RUN/model)
    mirrored first, as predict mirrors one; a local one as it is."""
    from launch.stores.gcs import mirror

    if model is None or not mirror.is_gcs(model):
        return model
    return str(mirror.stage_directory(cloud.storage(), model))


def operating_point(model: str) -> float:
    from trainer.evaluation import operating

    return operating.threshold(None, operating.read_info(model))[0]


def at_threshold(report: Mapping, threshold: float) -> dict:
    """The report with only the detections at the operating point: the pre-labels."""
    return {**report, "images": [
        {**entry, "detections": [d for d in entry["detections"] if d["score"] >= threshold]}
        for entry in report["images"]]}


def labelled_embeddings(data_dir: Path, limit: int = 2000):
    """The pixel embeddings of the training images of the dataset's newest version (read
    from its records without TensorFlow): what diversity measures distance from."""
    import io

    import numpy as np
    from PIL import Image

    from launch.features.label_choice import EMBEDDING_SIDE, pixel_embedding
    from trainer.common.files import TRAIN
    from trainer.data.merge import examples

    newest = newest_version(data_dir)
    rows = []
    for _, example in examples(newest, TRAIN) if newest else ():
        if len(rows) >= limit:
            break
        with Image.open(io.BytesIO(example["image/encoded"][0])) as image:
            rows.append(pixel_embedding(image))
    return np.array(rows, dtype=np.float32).reshape(-1, 3 * EMBEDDING_SIDE ** 2)


def chosen_images(images: Sequence[Path], choice: Choice, data_dir: Path,
                  report: Mapping | None, against: Mapping | None, threshold: float,
                  ) -> list:
    """The strategy's choice among `images` (label_choice.Chosen, best first)."""
    import numpy as np

    from launch.features.label_choice import choose, pixel_embedding
    from trainer.prediction.predict import read_picture

    def by_name(found: Mapping | None) -> dict[str, list]:
        return {Path(e["image"]).name: e["detections"] for e in (found or {}).get("images", ())}

    names = [path.name for path in images]
    embeddings = labelled = None
    if choice.strategy == "diversity":
        embeddings = np.array([pixel_embedding(read_picture(str(path)).image)
                               for path in images], dtype=np.float32)
        labelled = labelled_embeddings(data_dir)
    return choose(choice.strategy, names, choice.budget, threshold=threshold,
                  found=by_name(report), against=by_name(against), embeddings=embeddings,
                  labelled=labelled, seed=choice.seed)


def version_images(folder: Path, out: Path) -> dict:
    """A converted version's images (every split's records), written into `out` under names
    of this tool's making (their bytes' digest, then their file name made safe), and their
    boxes as predict reports detections (score 1): a dataset's own labels, to review."""
    import io

    from PIL import Image

    from trainer.common.files import EVERY_SPLIT
    from trainer.data.merge import examples

    out.mkdir(parents=True, exist_ok=True)
    entries = []
    for split in EVERY_SPLIT:
        for _, example in examples(folder, split):
            data = example["image/encoded"][0]
            original = (example.get("image/filename") or [b"image"])[0].decode("utf-8", "replace")
            path = out / f"{digest(data)[:16]}-{SAFE.sub('_', Path(original).name)[-100:]}"
            path.write_bytes(data)
            with Image.open(io.BytesIO(data)) as image:
                width, height = image.size
            sides = [example.get(f"image/object/bbox/{k}", []) for k in
                     ("ymin", "xmin", "ymax", "xmax")]
            entries.append({"image": str(path), "width": width, "height": height,
                            "detections": [
                                {"box": list(box), "class": text.decode("utf-8", "replace"),
                                 "score": 1.0}
                                for *box, text in zip(*sides, example.get(
                                    "image/object/class/text", []), strict=False)]})
    return {"model": f"the labels of {folder.name}", "images": entries}


def push_dataset(studio: Studio, title: str, cloud, reference: str, model: str | None,
                 work: Path, choice: Choice = Choice(), say: Callable[[str], None] = print
                 ) -> Pushed:
    """`label.push --dataset NAME[@VERSION]`: the named dataset's images from the bucket
    (the files its manifest lists), pre-labelled with `model`'s detections or, without one,
    with the dataset's own boxes, for people to review; `label.pull --dataset NAME` then
    merges their corrections back."""
    from launch.stores.gcs import datasets as named

    manifest = named.resolve(cloud, reference)
    base = fresh(work, "bucket", manifest.dataset)
    shutil.copytree(named.stage(cloud, manifest.reference), base / manifest.version)
    images = fresh(work, "dataset-images")
    labels = version_images(base / manifest.version, images)
    say(f"{len(labels['images'])} image(s) of {manifest.reference}")
    return push_images(studio, title, f"{images}/*", base, model, work, choice, say,
                       labelled=None if model else labels)


def push_asked(studio: Studio, title: str, cloud, served: str, model: str | None,
               data_dir: Path, work: Path, choice: Choice = Choice(),
               say: Callable[[str], None] = print, since: str | None = None) -> Pushed:
    """`label.push --asked MODEL [--since DAY]`: the images endpoints serving MODEL were
    asked about and kept (`model.upload --keep-asked`), pre-labelled with `model`'s
    detections; a push adds only those the project does not hold yet."""
    from launch.errors import MissingError
    from launch.stores.gcs import asked
    from trainer.common.files import ASKED_PREFIX

    bucket = cloud.fields(("project", "bucket"))["bucket"]
    folder = fresh(work, "asked", served)
    staged = asked.stage(cloud.storage(), bucket, served, folder, asked.check_since(since))
    where = f"gs://{bucket}/{ASKED_PREFIX}/{served}/"
    for line in staged.lines(where):
        say(line)
    if not staged.images:
        raise MissingError(f"--asked {served}: {where} holds no kept image; upload a version "
                           "with `invoke model.upload --keep-asked RATE` and let it serve")
    return push_images(studio, title, f"{folder}/*", data_dir, model, work, choice, say)


def push_images(studio: Studio, title: str, pattern: str, data_dir: Path,
                model: str | None, work: Path, choice: Choice = Choice(),
                say: Callable[[str], None] = print, labelled: Mapping | None = None
                ) -> Pushed:
    """`label.push`: the images of `pattern` (or the `choice` among them), with `model`'s
    detections (at its export's operating point) as pre-labels, else `labelled`'s boxes (a
    report as predict writes it); the choice and each image's reason written to
    work/choice.json."""
    import glob

    from launch.errors import InputError
    from trainer.prediction.results import label_studio_tasks

    choice.check(model)
    images = sorted(Path(p) for p in glob.glob(pattern) if Path(p).is_file())
    if not images:
        raise InputError(f"--images {pattern} matches no file")
    if len({path.name for path in images}) < len(images):
        raise InputError(f"--images {pattern} matches two files of one name: a project's "
                         "tasks are named by their file")
    names = classes(data_dir, model)
    report = against = None
    threshold = 0.5
    if model:
        say(f"detecting with {model} for pre-labels")
        report = detected(model, pattern, fresh(work, "detected"))
        threshold = operating_point(model)
    if choice.against:
        say(f"detecting with {choice.against} to compare")
        against = detected(choice.against, pattern, fresh(work, "against"))
    reasons: dict[str, str] = {}
    if choice.strategy:
        picked = chosen_images(images, choice, data_dir, report, against, threshold)
        work.mkdir(parents=True, exist_ok=True)
        _not_a_link(work / CHOICE_FILE)
        (work / CHOICE_FILE).write_text(json.dumps(
            {"strategy": choice.strategy, "budget": choice.budget, "operating_point": threshold,
             "chosen": [dataclasses.asdict(c) for c in picked]}, indent=1) + "\n")
        reasons = {c.image: c.reason for c in picked}
        images = [path for path in images if path.name in reasons]
        say(f"{choice.strategy} chose {len(images)} image(s); why each: {work / CHOICE_FILE}")
    shown = at_threshold(report, threshold) if report else labelled
    ordered = sorted(names, key=names.__getitem__)
    if isinstance(studio, cvat.Settings):
        return push_to_cvat(studio, title, images, ordered, shown)
    predictions = {Path(task["data"][LS_TO]).name: task["predictions"][0] for task in
                   label_studio_tasks(shown)} if shown else {}
    return push(studio, title, images, ordered, predictions, say, reasons)


def push_to_cvat(settings: cvat.Settings, title: str, images: Sequence[Path],
                 names: Sequence[str], shown: Mapping | None) -> Pushed:
    """The images to a CVAT task named `title` (launch/stores/cvat.py), the report's
    detections as its pre-labels (rectangles in pixels). A choice's reasons stay in
    choice.json: a CVAT frame has no data of its own to hold them."""
    boxes = {Path(entry["image"]).name: [
        (found["class"], found["box"][1] * entry["width"], found["box"][0] * entry["height"],
         found["box"][3] * entry["width"], found["box"][2] * entry["height"])
        for found in entry["detections"]] for entry in (shown or {}).get("images", ())}
    pushed = cvat.push(settings, title, images, names, boxes)
    kept = {path.name for path in images}
    return Pushed(pushed.task_id or 0, pushed.added, len(images) - pushed.added,
                  sum(1 for name, found in boxes.items() if found and name in kept)
                  if pushed.added else 0, place="CVAT task")


def pull_version(studio: Studio, title: str, data_dir: Path, work: Path,
                 with_predictions: bool = False) -> Pulled:
    """`label.pull`: the project's labelled tasks as a new version of the dataset in
    `data_dir` (its classes' ids kept), with a test split (70/20/10, each image's split a
    function of its bytes: the pipeline tests on it, and no image changes split later)."""
    from trainer.data.planning import Split

    staged = fresh(work, "pulled")
    if isinstance(studio, cvat.Settings):  # completed jobs' frames; --with-predictions: all
        found = cvat.pull(studio, title, staged, with_unfinished=with_predictions)
        pulled, form = Pulled(found.images, dict(found.skipped)), "cvat"
    else:
        pulled, form = pull(studio, title, staged, with_predictions), "labelstudio"
    if not pulled.tasks:
        return pulled
    data_dir.mkdir(parents=True, exist_ok=True)
    version, report = publish(staged, data_dir, current_label_map(data_dir),
                              Split(fraction=0.7, val_fraction=0.2), form)
    return dataclasses.replace(pulled, version=version, report=report)


def pull_to_bucket(studio: Studio, title: str, cloud, name: str, work: Path,
                   with_predictions: bool = False) -> Pulled:
    """`label.pull --dataset NAME`: the same new version, merged with the named dataset's
    newest version in the bucket (staged here from the files its manifest lists) and
    uploaded as `data.upload --dataset` uploads. Refused, nothing uploaded, when another
    version of NAME was uploaded while this one was made (its examples would be lost)."""
    from launch.errors import InputError
    from launch.stores.gcs import datasets as named
    from trainer.data.datasets import read_manifest

    named.check(name)
    bucket = cloud.fields(("project", "bucket"))["bucket"]
    newest = read_manifest(cloud.storage(), bucket, name)
    base = fresh(work, "bucket", name)  # a local dataset: the bucket's newest version, then ours
    if newest:
        shutil.copytree(named.stage(cloud, f"{name}@{newest.version}"), base / newest.version)
    pulled = pull_version(studio, title, base, work, with_predictions)
    if not pulled.version:
        return pulled
    now = read_manifest(cloud.storage(), bucket, name)
    if (now and now.version) != (newest and newest.version):
        raise InputError(f"dataset {name} got a new version ({now.version if now else 'none'}) "
                         "while this pull was made from "
                         f"{newest.version if newest else 'nothing'}: pull again")
    said = named.upload(cloud, str(base / pulled.version), name)
    return dataclasses.replace(pulled, version=said.removeprefix(f"dataset {name}: "))
