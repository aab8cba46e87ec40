"""Labels in the loop against a real Label Studio server (tests/labelstudio.py): images and
the shared model's detections pushed as pre-labels, corrected through the server's API as a
labeller would, pulled and published as a new dataset version whose boxes are the
corrections; and what a hostile server answers, refused or left out and named."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from launch.errors import InputError
from launch.features import labelling
from launch.stores.labelstudio import LabelStudioError, Studio, read_token
from tests.fakes.json_http import json_server
from tests.labelstudio import label_studio, screenshot_task
from tests.test_coco import examples, values
from trainer.data.label_map import parse_label_map
from trainer.data.sample import coco_as_label_studio, pets_as_coco, write_sample
from trainer.prediction.results import LS_FROM, LS_TO, label_studio_tasks

PUSHED = 8


def truth_result(box: list[float], label: str, width: int, height: int) -> dict:
    x, y, w, h = box
    return {"type": "rectanglelabels", "from_name": LS_FROM, "to_name": LS_TO,
            "original_width": width, "original_height": height, "image_rotation": 0,
            "value": {"x": 100 * x / width, "y": 100 * y / height, "width": 100 * w / width,
                      "height": 100 * h / height, "rotation": 0, "rectanglelabels": [label]}}


@pytest.mark.slow(60)
def test_push_correct_pull_publishes_the_corrections_as_a_new_version(exported, tmp_path):
    from trainer.cli.main import main

    sample = write_sample(tmp_path / "pets", num_images=30, seed=5)
    coco = pets_as_coco(sample)
    names = {c["id"]: c["name"] for c in coco["categories"]}
    chosen = coco["images"][:PUSHED]
    images = [sample / "images" / image["file_name"] for image in chosen]
    (tmp_path / "new").mkdir()
    for path in images:
        shutil.copy(path, tmp_path / "new")
    images = sorted((tmp_path / "new").glob("*.jpg"))
    # every detection, then those at the operating point as Label Studio predictions
    assert main(["predict", f"--model={exported}", f"--images={tmp_path / 'new'}/*.jpg",
                 f"--output_dir={tmp_path / 'predicted'}", "--score_threshold=0"]) == 0
    report = json.loads((tmp_path / "predicted" / "detections.json").read_text())
    threshold = labelling.operating_point(str(exported))
    predicted = {Path(task["data"][LS_TO]).name: task["predictions"][0] for task in
                 label_studio_tasks(labelling.at_threshold(report, threshold))}
    assert all(r["score"] >= threshold for p in predicted.values() for r in p["result"])
    assert sum(map(len, (e["detections"] for e in report["images"]))) > \
        sum(len(p["result"]) for p in predicted.values())  # the strategies see below it
    label_map = parse_label_map((Path(exported) / "label_map.pbtxt").read_text())
    with label_studio(tmp_path / "server") as server:
        studio = Studio(server.url, server.token)
        said: list[str] = []
        pushed = labelling.push(studio, "pets", images, list(label_map), predicted, said.append)
        assert (pushed.added, pushed.present) == (PUSHED, 0) and pushed.prelabelled >= 1
        again = labelling.push(studio, "pets", images, list(label_map), predicted)
        assert (again.project, again.added, again.present) == (pushed.project, 0, PUSHED)
        tasks = list(studio.tasks(pushed.project))
        assert len(tasks) == PUSHED and all(t["data"][labelling.SHA] for t in tasks)
        assert sum(len(t["predictions"]) for t in tasks) == pushed.prelabelled
        # what a labeller sees: the first pre-labelled task, its boxes listed to correct
        shown = next(t for t in tasks if t["predictions"])
        shot = screenshot_task(server, pushed.project, shown["id"],
                               len(shown["predictions"][0]["result"]),
                               tmp_path / "label-studio-prelabels.png")
        assert Image.open(shot).size == (1280, 800)
        # a named dataset's images from the bucket, its own boxes as pre-labels, to review
        from launch.stores.gcs import datasets as named
        from tests.fakes.cloud import fake_cloud
        from trainer.data.convert import convert_directory

        (tmp_path / "cloud").mkdir()
        convert_directory(write_sample(tmp_path / "review", num_images=5, seed=8),
                          tmp_path / "reviewed", num_shards=1, progress=False)
        with fake_cloud(tmp_path / "cloud") as fakes:
            named.upload(fakes.cloud(), str(tmp_path / "reviewed"), "pets")
            review = labelling.push_dataset(studio, "pets-review", fakes.cloud(), "pets", None,
                                            tmp_path / "work", say=said.append)
            # the images an endpoint was asked about, kept by the serving image, twice
            import hashlib

            bucket = fakes.cloud().fields(("bucket",))["bucket"]
            for path in images[:3]:
                fakes.cloud().storage().bucket(bucket).blob(
                    f"asked/pets-retinanet-mobilenet/2026-12-03/"
                    f"{hashlib.sha256(path.read_bytes()).hexdigest()}.jpg").upload_from_filename(
                    str(path))
            asked = [labelling.push_asked(
                studio, "pets-asked", fakes.cloud(), "pets-retinanet-mobilenet",
                str(exported), tmp_path, tmp_path / "work", say=said.append)
                for _ in range(2)]
        assert [(p.added, p.present) for p in asked] == [(3, 0), (0, 3)]
        kept = list(studio.tasks(asked[0].project))
        assert sorted(t["data"][labelling.SHA] for t in kept) == \
            sorted(hashlib.sha256(path.read_bytes()).hexdigest() for path in images[:3])
        assert sum(len(t["predictions"]) for t in kept) == asked[0].prelabelled
        assert f"3 image(s) endpoints were asked about, kept in gs://{bucket}/asked/" \
               "pets-retinanet-mobilenet/" in said
        stored = examples(tmp_path / "reviewed")
        assert review.added == review.prelabelled == len(stored) and review.present == 0
        for task in studio.tasks(review.project):
            _, example = stored[task["data"][labelling.NAME].split("-", 1)[1]]
            (prelabel,) = task["predictions"]
            assert [r["value"]["rectanglelabels"] for r in prelabel["result"]] == \
                [[t.decode()] for t in values(example, "image/object/class/text")]
            corners = [[r["value"][k] / 100 for k in ("x", "y")] for r in prelabel["result"]]
            assert np.asarray(corners) == pytest.approx(np.asarray(
                [values(example, f"image/object/bbox/{k}") for k in ("xmin", "ymin")]).T)

        # the 3 the model is least sure of, each with its reason in the task a labeller opens
        picked = labelling.chosen_images(images, labelling.Choice("uncertainty", 3), tmp_path,
                                         report, None, threshold)
        assert len(picked) == 3 and picked[0].value >= picked[2].value
        shortlist = labelling.push(studio, "pets-chosen", [p for p in images if p.name in {
            c.image for c in picked}], list(label_map), predicted, said.append,
            {c.image: c.reason for c in picked})
        assert shortlist.added == 3 and shortlist.project != pushed.project
        assert sorted(t["data"][labelling.REASON] for t in studio.tasks(shortlist.project)) == \
            sorted(c.reason for c in picked)

        by_name = {image["file_name"]: image for image in chosen}
        truth: dict[str, list] = {}
        for entry in coco["annotations"]:
            truth.setdefault(entry["image_id"], []).append(entry)
        corrected = {}
        for index, task in enumerate(tasks):
            image = by_name[task["data"][labelling.NAME]]
            result = [truth_result(e["bbox"], names[e["category_id"]], image["width"],
                                   image["height"]) for e in truth[image["id"]]]
            if index == 0:
                continue  # nobody looked at it: its pre-labels alone
            parent = task["predictions"][0]["id"] if task["predictions"] else None
            studio.call("POST", f"/api/tasks/{task['id']}/annotations/", {
                "result": result, "was_cancelled": index == 1, "lead_time": 2.5,
                **({"parent_prediction": parent} if parent else {})})
            if index > 1:
                corrected[image["file_name"]] = truth[image["id"]]

        pulled = labelling.pull(studio, "pets", tmp_path / "pulled")
    assert (pulled.tasks, pulled.skipped) == (PUSHED - 2, {"not labelled": 2})
    data_dir = tmp_path / "dataset"
    data_dir.mkdir()
    version, report = labelling.publish(tmp_path / "pulled", data_dir, label_map)
    assert report["written"] == PUSHED - 2 and not report["skipped"]
    assert [p.name for p in data_dir.iterdir()] == [version]  # whole, nothing partial left
    assert report["splits"]["train"]["pattern"] == f"{data_dir / version}/train.record-*"
    # the same labels pulled again: a version of those images alone, each in its split
    again, merged = labelling.publish(tmp_path / "pulled", data_dir, label_map)
    assert merged["merged"] == {"from": version, "kept": 0, "replaced": PUSHED - 2,
                                "moved_to_their_split": 0}
    assert {name: split for name, (split, _) in examples(data_dir / again).items()} == \
        {name: split for name, (split, _) in examples(data_dir / version).items()}
    written = examples(data_dir / version)
    for file_name, objects in corrected.items():
        ((stored, (_, example)),) = [(name, found) for name, found in written.items()
                                     if name.endswith(f"-{file_name}")]
        width = values(example, "image/width")[0]
        height = values(example, "image/height")[0]
        got = [[values(example, f"image/object/bbox/{k}")[i] for k in
                ("xmin", "ymin", "xmax", "ymax")] for i in range(len(objects))]
        want = [[x / width, y / height, (x + w) / width, (y + h) / height]
                for x, y, w, h in (o["bbox"] for o in objects)]
        assert np.asarray(got) == pytest.approx(np.asarray(want), abs=1e-6), stored  # IoU 1

        assert [t.decode() for t in values(example, "image/object/class/text")] == \
            [names[o["category_id"]] for o in objects]
        assert values(example, "image/object/class/label") == \
            [label_map[names[o["category_id"]]] for o in objects]


def test_a_hostile_servers_tasks_are_left_out_and_its_oversized_answer_refused(
        tmp_path, monkeypatch):
    """A server that says it is Label Studio (tests/fakes/json_http.py, answering `answers`
    by path): tasks it never got from a push, an image of other bytes, an image path that
    leaves it, an answer over the cap."""
    sha = "0" * 64
    annotation = [{"result": [{"type": "rectanglelabels", "value": {
        "x": 1, "y": 1, "width": 5, "height": 5, "rectanglelabels": ["cat"]}}]}]
    answers = {
        "/api/projects/": {"results": [{"id": 1, "title": "pets"}]},
        "/api/tasks/": {"total": 3, "tasks": [
            {"id": 1, "data": {"image": "/data/upload/1/a.jpg"}, "annotations": annotation},
            {"id": 2, "data": {"image": "/data/upload/1/b.jpg", labelling.SHA: sha},
             "annotations": annotation},
            {"id": 3, "data": {"image": "http://169.254.169.254/x", labelling.SHA: sha},
             "annotations": annotation}]},
        "/data/upload/1/b.jpg": b"not the pushed bytes",
    }
    with json_server(lambda request: answers[request.path.split("?")[0]]) as url:
        studio = Studio(url, "t" * 40)
        with pytest.raises(LabelStudioError, match="is no file of"):
            labelling.pull(studio, "pets", tmp_path / "pulled")
        answers["/api/tasks/"]["tasks"].pop()
        pulled = labelling.pull(studio, "pets", tmp_path / "pulled")
        assert (pulled.tasks, pulled.skipped) == (0, {"not pushed by label.push": 1,
                                                      "image changed on the server": 1})
        assert not list((tmp_path / "pulled" / "images").iterdir())
        monkeypatch.setattr("launch.stores.labelstudio.MAX_ANSWER_BYTES", 1000)
        answers["/api/tasks/"] = b"[" + b" " * 2000 + b"]"
        with pytest.raises(LabelStudioError, match="answered more than 1,000 bytes: refused"):
            list(studio.tasks(1))
        with pytest.raises(LabelStudioError, match="no project titled 'other'"):
            labelling.pull(studio, "other", tmp_path / "other")


def test_the_token_comes_from_the_environment_or_a_file_and_is_never_shown(tmp_path):
    assert read_token(None, {"LABEL_STUDIO_API_KEY": " abc \n"}) == "abc"
    (tmp_path / "token").write_text("def\nignored\n")
    assert read_token(str(tmp_path / "token"), {}) == "def"
    with pytest.raises(InputError, match="set LABEL_STUDIO_API_KEY, or --token-file"):
        read_token(None, {})
    with pytest.raises(InputError, match="is not a file"):
        read_token(str(tmp_path / "none"), {})
    for url in ("ftp://x", "http://user:pw@host", "http://host/?q=1", "localhost:8080"):
        with pytest.raises(InputError, match="must be Label Studio's address"):
            Studio(url, "t")
    secret = "s3cr3t" * 7
    unreachable = Studio("http://127.0.0.1:9", secret)
    with pytest.raises(LabelStudioError) as raised:
        list(unreachable.tasks(1))
    assert secret not in str(raised.value) and "cannot reach Label Studio" in str(raised.value)


def test_the_label_tasks_refuse_in_one_line_before_reaching_a_server(tmp_path):
    from tests.cli import invoke

    for args, env, said in [
        (("label.push", "--images", f"{tmp_path}/*.jpg"), {"LABEL_STUDIO_API_KEY": None},
         "no Label Studio token: set LABEL_STUDIO_API_KEY, or --token-file FILE"),
        (("label.push",), {}, "give --images (a glob of the images to label), --dataset (a "
                              "named dataset's images) or --asked"),
        (("label.push", "--asked", "pets", "--images", "x"), {}, "one of them"),
        (("label.push", "--asked", "../runs"), {"LABEL_STUDIO_API_KEY": "t"},
         "--asked '../runs': give the served Model's name"),
        (("label.push", "--asked", "pets", "--since", "yesterday"),
         {"LABEL_STUDIO_API_KEY": "t"}, "--since 'yesterday': give a day as YYYY-MM-DD"),
        (("label.push", "--images", "x", "--since", "2026-12-01"),
         {"LABEL_STUDIO_API_KEY": "t"}, "--since '2026-12-01' picks among --asked's images"),
        (("label.push", "--images", f"{tmp_path}/*.jpg", "--data-dir", str(tmp_path)),
         {"LABEL_STUDIO_API_KEY": "t"}, f"--images {tmp_path}/*.jpg matches no file"),
        (("label.push", "--images", f"{tmp_path}/*.jpg", "--strategy", "uncertainty",
          "--budget", "5"), {"LABEL_STUDIO_API_KEY": "t"},
         "--strategy uncertainty needs --model"),
        (("label.push", "--images", f"{tmp_path}/*.jpg", "--budget", "many"),
         {"LABEL_STUDIO_API_KEY": "t"}, "--budget"),
        (("label.pull", "--dataset", "../pets"), {"LABEL_STUDIO_API_KEY": "t"}, "--dataset"),
        (("label.pull", "--tool", "cvat"), {"CVAT_URL": None},
         "--tool cvat needs --url (or CVAT_URL)"),
        (("label.pull", "--tool", "cvat", "--url", "http://127.0.0.1:9"),
         {"CVAT_ACCESS_TOKEN": None, "CVAT_USER": None}, "no CVAT credentials: set"),
        (("label.push", "--images", "x", "--tool", "roboflow"), {}, "--tool roboflow: one of"),
        (("label.pull", "--url", "http://127.0.0.1:9", "--data-dir", str(tmp_path)),
         {"LABEL_STUDIO_API_KEY": "s3cr3t-token"}, "cannot reach Label Studio at "
                                                   "http://127.0.0.1:9"),
    ]:
        ran = invoke(*args, env=env, cwd=tmp_path)  # its work/ there, not the checkout's
        assert ran.returncode == 2 and said in ran.stderr, (args, ran.stderr)
        assert len(ran.stderr.strip().splitlines()) == 1 and "s3cr3t" not in ran.stderr


def test_asked_images_are_staged_by_their_digest_and_hostile_objects_are_named(tmp_path):
    """What `label.push --asked MODEL` takes from gs://BUCKET/asked/MODEL/: objects of the
    serving image's naming, whose bytes are what their name says, once each; a name of
    another shape (another model's, a path), a wrong digest and an object larger than any
    request are skipped and named, and nothing is written outside the staging folder."""
    import hashlib
    import io

    from launch.stores.gcs import asked
    from tests.fakes.gcs import FakeGcs

    def jpeg(seed: int) -> bytes:
        out = io.BytesIO()
        Image.new("RGB", (16 + seed, 12), (seed, 0, 0)).save(out, "JPEG")
        return out.getvalue()

    kept = [jpeg(i) for i in range(3)]
    folder = "asked/pets-retinanet-mobilenet"
    with FakeGcs() as server:
        bucket = server.client().create_bucket("pets-data")
        names = {f"{folder}/2026-12-0{day}/{hashlib.sha256(data).hexdigest()}.jpg": data
                 for day, data in enumerate(kept, start=1)}
        names[f"{folder}/2026-12-04/{hashlib.sha256(kept[0]).hexdigest()}.jpg"] = kept[0]
        hostile = {f"{folder}/2026-12-03/{'0' * 64}.jpg": kept[1],  # not its digest
                   f"{folder}/2026-12-03/../../runs/x.jpg": kept[1],
                   f"{folder}/2026-12-03/photo.jpg": kept[1],
                   f"{folder}/2026-12-03/{'a' * 64}.jpg": b"\xff" * (asked.MAX_IMAGE_BYTES + 1),
                   f"{folder}-other/2026-12-03/{'b' * 64}.jpg": kept[1]}
        for name, data in {**names, **hostile}.items():
            bucket.blob(name).upload_from_string(data)
        (tmp_path / "out").mkdir()
        (tmp_path / "out" / "stale.jpg").write_bytes(b"from an earlier push")
        staged = asked.stage(server.client(), "pets-data", "pets-retinanet-mobilenet",
                             labelling.fresh(tmp_path, "out"))
        assert sorted(p.read_bytes() for p in asked.stage(
            server.client(), "pets-data", "pets-retinanet-mobilenet",
            labelling.fresh(tmp_path, "since"), asked.check_since("2026-12-03")).images
        ) == sorted([kept[0], kept[2]])
        shutil.rmtree(tmp_path / "since")
    assert sorted(p.read_bytes() for p in staged.images) == sorted(kept)
    assert {p.name for p in (tmp_path / "out").iterdir()} == {
        f"{hashlib.sha256(data).hexdigest()}.jpg" for data in kept}
    assert staged.skipped == {
        f"gs://pets-data/{folder}/2026-12-03/{'0' * 64}.jpg":
            "its bytes are not what its name says",
        f"gs://pets-data/{folder}/2026-12-03/../../runs/x.jpg":
            "not a name the serving image gives a kept image",
        f"gs://pets-data/{folder}/2026-12-03/photo.jpg":
            "not a name the serving image gives a kept image",
        f"gs://pets-data/{folder}/2026-12-03/{'a' * 64}.jpg":
            f"{asked.MAX_IMAGE_BYTES + 1} bytes, more than any request carries (2,097,152)"}
    assert sorted(tmp_path.iterdir()) == [tmp_path / "out"]
    assert staged.lines("gs://pets-data/asked/pets-retinanet-mobilenet/")[0] == (
        "3 image(s) endpoints were asked about, kept in "
        "gs://pets-data/asked/pets-retinanet-mobilenet/")


def test_one_labelling_command_at_a_time_holds_the_work_directory_and_links_are_not_followed(
        tmp_path):
    """A push or pull empties and refills its work folders: a second command while one runs is
    refused in one line naming the holder's process, and a folder on the way that is a
    symbolic link is refused, not followed (emptying it would delete what it points at)."""
    import os

    work, outside = tmp_path / "work" / "label", tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "keep.jpg").write_bytes(b"someone else's")
    with labelling.working(work):
        (labelling.fresh(work, "pulled") / "a.jpg").write_bytes(b"this push's")
        with pytest.raises(InputError) as busy, labelling.working(work):
            pass
        assert str(busy.value) == (f"labelling's work directory {work} is in use by process "
                                   f"{os.getpid()}; wait for it to finish, or choose another "
                                   "directory")
        assert (work / "pulled" / "a.jpg").read_bytes() == b"this push's"
        (work / "bucket").symlink_to(outside)
        (work / "dataset-images").symlink_to(outside)
        for parts in (("bucket", "pets"), ("dataset-images",)):
            with pytest.raises(InputError, match="is a symbolic link: labelling writes only "
                                                 "into folders of its own"):
                labelling.fresh(work, *parts)
    with labelling.working(work):  # released at the block's end, however it ended
        assert labelling.fresh(work, "pulled").is_dir()
        assert not any((work / "pulled").iterdir())
    assert sorted(p.name for p in outside.iterdir()) == ["keep.jpg"]
    for name in ("..", ".", "", "a/../..", "x\0"):  # a folder of its own, by its name too
        with pytest.raises(InputError, match="is not a folder name of labelling's own"):
            labelling.fresh(work, "asked", name)
    (tmp_path / "linked").symlink_to(work)
    with pytest.raises(InputError, match="linked is a symbolic link"), \
            labelling.working(tmp_path / "linked"):
        pass
    from tests.cli import invoke, refused

    with labelling.working(work):  # the tasks hold it too: refused before a server is asked
        for args in (("label.push", "--images", f"{outside}/*.jpg"),
                     ("label.pull", "--data-dir", str(tmp_path / "data"))):
            assert refused(invoke(*args, "--url", "http://127.0.0.1:9", cwd=tmp_path,
                                  env={"LABEL_STUDIO_API_KEY": "t"})) == (
                f"error: labelling's work directory work/label is in use by process "
                f"{os.getpid()}; wait for it to finish, or choose another directory")


def test_a_pull_joins_the_newest_version_and_an_image_labelled_again_keeps_its_split(tmp_path):
    """A dataset converted from Pets, then a pull holding 3 of its images with other labels
    and 2 new ones: the new version is the old one with those 3 replaced (each in the split
    it had) and the 2 added, its report counting the whole."""
    from trainer.data.convert import convert_directory

    sample = write_sample(tmp_path / "pets", num_images=12, seed=5)
    data_dir = tmp_path / "dataset"
    first = "v-20261201T000000Z-00000001"
    convert_directory(sample, data_dir / first, num_shards=2, progress=False)
    before = examples(data_dir / first)
    coco = pets_as_coco(sample)
    again = coco["images"][:3]
    other = {c["id"]: next(d["id"] for d in coco["categories"] if d["id"] != c["id"])
             for c in coco["categories"]}
    relabelled = {**coco, "images": again, "annotations": [
        {**a, "category_id": other[a["category_id"]]} for a in coco["annotations"]
        if a["image_id"] in {i["id"] for i in again}]}
    pulled = tmp_path / "pulled"
    coco_as_label_studio(relabelled, sample / "images", pulled)
    fresh = write_sample(tmp_path / "fresh", num_images=2, seed=6)
    fresh_coco = pets_as_coco(fresh)
    coco_as_label_studio(fresh_coco, fresh / "images", tmp_path / "fresh-export")
    tasks = json.loads((pulled / "label_studio.json").read_text())
    for task in json.loads((tmp_path / "fresh-export" / "label_studio.json").read_text()):
        name = Path(task["data"]["image"].split("/")[-1])
        shutil.copy(tmp_path / "fresh-export" / "images" / name, pulled / "images" / f"new_{name}")
        tasks.append({**task, "id": 100 + task["id"],
                      "data": {"image": f"/data/local-files/?d=pets/new_{name}"}})
    (pulled / "label_studio.json").write_text(json.dumps(tasks))

    version, report = labelling.publish(pulled, data_dir, labelling.current_label_map(data_dir))
    new_images = len(fresh_coco["images"])
    assert report["merged"] == {"from": first, "kept": len(before) - 3, "replaced": 3,
                                "moved_to_their_split": report["merged"]["moved_to_their_split"]}
    after = examples(data_dir / version)
    assert len(after) == report["written"] == len(before) + new_images
    assert sum(s["examples"] for s in report["splits"].values()) == len(after)
    by_sha = {values(e, "image/key/sha256")[0]: (name, split) for name, (split, e) in
              before.items()}
    seen = 0
    names = {c["id"]: c["name"] for c in coco["categories"]}
    changed = {i["file_name"]: names[other[a["category_id"]]] for i in again
               for a in coco["annotations"] if a["image_id"] == i["id"]}
    for split, example in after.values():
        texts = [t.decode() for t in values(example, "image/object/class/text")]
        found = by_sha.get(values(example, "image/key/sha256")[0])
        if found is None:  # a new image
            continue
        old_name, old_split = found
        assert split == old_split  # kept, or labelled again: where it was
        if old_name in changed:
            assert texts == [changed[old_name]]
            seen += 1
        else:
            assert texts == [t.decode() for t in values(before[old_name][1],
                                                         "image/object/class/text")]
    assert seen == 3 and report["merged"]["moved_to_their_split"] >= 1
    assert (data_dir / version / "label_map.pbtxt").read_text() == \
        (data_dir / first / "label_map.pbtxt").read_text()
    assert sorted(report["classes"]) == sorted(report["splits"])


def test_a_pull_into_the_bucket_joins_the_named_datasets_newest_version(tmp_path):
    """`label.pull --dataset pets`: the bucket's newest version of pets (through the real
    storage client against fake-gcs-server) and 3 of its images labelled again become its
    next version; a second writer's upload meanwhile refuses the pull, uploading nothing."""
    from launch.stores.gcs import datasets as named
    from tests.fakes.cloud import fake_cloud
    from tests.labelstudio import exported_as_pushed
    from trainer.data.convert import convert_directory
    from trainer.data.datasets import read_manifest

    sample = write_sample(tmp_path / "pets", num_images=10, seed=5)
    convert_directory(sample, tmp_path / "first", num_shards=1, progress=False)
    coco = pets_as_coco(sample)
    three = {image["id"] for image in coco["images"][:3]}
    coco_as_label_studio({**coco, "images": coco["images"][:3], "annotations": [
        a for a in coco["annotations"] if a["image_id"] in three]}, sample / "images",
        tmp_path / "export")
    meanwhile: list = []
    with fake_cloud(tmp_path) as fakes, \
            exported_as_pushed(tmp_path / "export", meanwhile) as url:
        cloud = fakes.cloud()
        bucket = cloud.fields(("bucket",))["bucket"]
        named.upload(cloud, str(tmp_path / "first"), "pets")
        first = read_manifest(fakes.storage, bucket, "pets")
        pulled = labelling.pull_to_bucket(Studio(url, "t" * 40), "pets", cloud, "pets",
                                          tmp_path / "work")
        newest = read_manifest(fakes.storage, bucket, "pets")
        assert newest.version != first.version and pulled.tasks == 3
        assert pulled.version.startswith(f"gs://{bucket}/datasets/pets/{newest.version}/")
        assert pulled.report["merged"] == {
            "from": first.version, "kept": sum(first.summary["examples"].values()) - 3,
            "replaced": 3, "moved_to_their_split": pulled.report["merged"][
                "moved_to_their_split"]}
        assert newest.summary["examples"] == first.summary["examples"]  # 3 relabelled, in place

        # another writer uploads a version while the pull lists the tasks
        convert_directory(write_sample(tmp_path / "other", num_images=5, seed=7),
                          tmp_path / "theirs", num_shards=1, progress=False)
        meanwhile.append(lambda: named.upload(cloud, str(tmp_path / "theirs"), "pets"))
        with pytest.raises(InputError, match="got a new version .* while this pull was made "
                                             f"from {newest.version}: pull again"):
            labelling.pull_to_bucket(Studio(url, "t" * 40), "pets", cloud, "pets",
                                     tmp_path / "work")
        assert not meanwhile
        theirs = json.loads((tmp_path / "theirs" / "conversion_report.json").read_text())
        assert read_manifest(fakes.storage, bucket, "pets").summary["examples"] == {
            split: entry["examples"] for split, entry in theirs["splits"].items()
        } != first.summary["examples"]  # the other writer's, not overwritten by this pull


def test_the_loop_runs_through_cvat_too(tmp_path, monkeypatch):
    """`--tool cvat`: images pushed with their boxes as pre-labels to a CVAT server
    (tests/fakes/cvat.py, answering as cvat-sdk expects), the jobs completed as a labeller
    does, pulled and published as a version whose boxes are those boxes."""
    from launch.stores import cvat
    from tests.fakes.cvat import Cvat, cvat_server

    monkeypatch.setenv(cvat.TOKEN_VARIABLE, "cvat-token")
    sample = write_sample(tmp_path / "pets", num_images=6, seed=5)
    coco = pets_as_coco(sample)
    names = {c["id"]: c["name"] for c in coco["categories"]}
    label_map = {name: index for index, name in enumerate(sorted(names.values()), start=1)}
    (tmp_path / "data" / "v-20261201T000000Z-00000001").mkdir(parents=True)
    (tmp_path / "data" / "v-20261201T000000Z-00000001" / "label_map.pbtxt").write_text(
        "".join(f"item {{ id: {i} name: '{n}' }}\n" for n, i in label_map.items()))
    truth = {"images": [{
        "image": str(sample / "images" / image["file_name"]), "width": image["width"],
        "height": image["height"], "detections": [
            {"box": [y / image["height"], x / image["width"], (y + h) / image["height"],
                     (x + w) / image["width"]], "class": names[a["category_id"]], "score": 1.0}
            for a in coco["annotations"] if a["image_id"] == image["id"]
            for x, y, w, h in [a["bbox"]]]} for image in coco["images"]]}
    with cvat_server(Cvat("cvat-token")) as url:
        settings = labelling.connect(url, None, "cvat")
        pushed = labelling.push_images(settings, "pets", f"{sample}/images/*.jpg",
                                       tmp_path / "data", None, tmp_path / "work",
                                       labelled=truth)
        everything = len(list((sample / "images").glob("*.jpg")))  # and a test image
        assert (pushed.added, pushed.prelabelled) == (everything, len(coco["images"]))
        assert pushed.summary().startswith(f"CVAT task {pushed.project}: ")
        again = labelling.push_images(settings, "pets", f"{sample}/images/*.jpg",
                                      tmp_path / "data", None, tmp_path / "work")
        assert (again.added, again.present) == (0, everything)
        client = cvat.connect(settings)
        for job in client.tasks.retrieve(pushed.project).get_jobs():
            job.update({"state": "completed"})  # the labeller is done
        pulled = labelling.pull_version(settings, "pets", tmp_path / "data", tmp_path / "work")
    assert pulled.tasks == len(coco["images"]) and pulled.skipped == {"no shapes": 1}
    written = examples(tmp_path / "data" / pulled.version)
    assert len(written) == len(coco["images"])
    for name, (_, example) in written.items():
        (image,) = [e for e in truth["images"] if name.endswith(Path(e["image"]).name)]
        got = [[values(example, f"image/object/bbox/{k}")[i] for k in
                ("ymin", "xmin", "ymax", "xmax")] for i in range(len(image["detections"]))]
        assert np.asarray(got) == pytest.approx(
            np.asarray([d["box"] for d in image["detections"]]), abs=1e-5)
        assert values(example, "image/object/class/label") == \
            [label_map[d["class"]] for d in image["detections"]]


def test_a_model_in_the_bucket_is_mirrored_here_before_it_detects(services, tmp_path):
    """`label.push --model gs://BUCKET/runs/RUN/model`: the serving run's export, copied
    here first (as predict copies one), its files unchanged; a local one is used as it is."""
    from launch.stores.gcs import mirror

    cloud = services.cloud()
    bucket = cloud.storage().bucket(cloud.fields(("bucket",))["bucket"])
    files = {"saved_model.pb": b"graph", "variables/variables.index": b"index",
             "export.json": b'{"score_threshold": 0.4}'}
    for name, data in files.items():
        bucket.blob(f"runs/r1/model/{name}").upload_from_string(data)
    here = Path(labelling.local_model(cloud, f"gs://{bucket.name}/runs/r1/model"))
    assert here.resolve().is_relative_to(mirror.CACHE_DIR.resolve())
    assert {str(p.relative_to(here)): p.read_bytes() for p in here.rglob("*")
            if p.is_file()} == files
    assert labelling.local_model(cloud, str(tmp_path)) == str(tmp_path)
    assert labelling.local_model(cloud, None) is None
