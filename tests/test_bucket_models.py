"""Models in the bucket against the real fake-gcs-server: only the chosen checkpoint is
fetched, unchanged files are not fetched twice, damaged ones are, and errors name the fix."""

from __future__ import annotations

import pytest

from launch.errors import InputError, MissingError
from launch.gcs.mirror import (
    GcsPath,
    UnsafePathError,
    checkpoint_name,
    mirrored_to_urls,
    stage_checkpoint,
    stage_directory,
)
from tests.fakes.gcs import FakeGcs

RUN = "gs://pets-data/runs/r1/checkpoints"
STATE = 'model_checkpoint_path: "ckpt-1000"\nall_model_checkpoint_paths: "ckpt-500"\n' \
        'all_model_checkpoint_paths: "ckpt-1000"\n'


@pytest.fixture(scope="module")
def gcs():
    with FakeGcs() as server:
        client = server.client()
        bucket = client.create_bucket("pets-data")
        objects = {"checkpoint": STATE, "run.json": '{"experiment": "x"}', "params.yaml": "a: 1",
                   "label_map.pbtxt": "item { id: 1 name: 'Bengal' }",
                   "train/events.out.tfevents.1": "summaries", "eval/ckpt-500.json": "{}"}
        for step in (500, 1000):
            objects[f"ckpt-{step}.index"] = f"index {step}"
            objects[f"ckpt-{step}.data-00000-of-00001"] = f"weights {step}" * 1000
        for name, text in objects.items():
            bucket.blob(f"runs/r1/checkpoints/{name}").upload_from_string(text)
        for name in ("saved_model.pb", "variables/variables.index", "label_map.pbtxt"):
            bucket.blob(f"runs/r1/model/{name}").upload_from_string(f"model {name}")
        yield client


def files(root):
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def test_stage_checkpoint_fetches_the_run_files_and_the_newest_checkpoint_only(gcs, tmp_path):
    local, checkpoint = stage_checkpoint(gcs, RUN, cache_dir=tmp_path)
    assert local == tmp_path / "pets-data/runs/r1/checkpoints"
    assert checkpoint == local / "ckpt-1000"
    assert files(local) == ["ckpt-1000.data-00000-of-00001", "ckpt-1000.index",
                            "label_map.pbtxt", "params.yaml", "run.json"]
    assert (local / "ckpt-1000.data-00000-of-00001").read_text() == "weights 1000" * 1000

    inode = (local / "ckpt-1000.index").stat().st_ino
    stage_checkpoint(gcs, RUN, cache_dir=tmp_path)  # unchanged: nothing fetched again
    assert (local / "ckpt-1000.index").stat().st_ino == inode
    (local / "params.yaml").write_text("damaged")  # a changed file is fetched again
    stage_checkpoint(gcs, RUN, cache_dir=tmp_path)
    assert (local / "params.yaml").read_text() == "a: 1"


def test_a_chosen_checkpoint_and_the_errors_that_name_the_fix(gcs, tmp_path):
    _, checkpoint = stage_checkpoint(gcs, RUN, "500", cache_dir=tmp_path)
    assert checkpoint.name == "ckpt-500" and checkpoint.with_suffix(".index").exists()
    with pytest.raises(MissingError, match=r"no checkpoint ckpt-7; it has \['ckpt-1000', "
                                                r"'ckpt-500'\]"):
        stage_checkpoint(gcs, RUN, "ckpt-7", cache_dir=tmp_path)
    with pytest.raises(MissingError, match="nothing at gs://pets-data/runs/nope/"):
        stage_checkpoint(gcs, "gs://pets-data/runs/nope", cache_dir=tmp_path)
    with pytest.raises(MissingError, match="bucket gs://missing does not exist"):
        stage_directory(gcs, "gs://missing/runs/r1/model", cache_dir=tmp_path)
    gcs.bucket("pets-data").blob("runs/fresh/run.json").upload_from_string("{}")
    with pytest.raises(MissingError, match="no checkpoint in gs://pets-data/runs/fresh"):
        stage_checkpoint(gcs, "gs://pets-data/runs/fresh", cache_dir=tmp_path)
    assert not list(tmp_path.rglob("*.partial"))


def test_stage_directory_mirrors_a_saved_model(gcs, tmp_path):
    local = stage_directory(gcs, "gs://pets-data/runs/r1/model/", cache_dir=tmp_path)
    assert files(local) == ["label_map.pbtxt", "saved_model.pb", "variables/variables.index"]
    assert (local / "saved_model.pb").read_text() == "model saved_model.pb"


def test_names_and_urls():
    assert checkpoint_name("500") == checkpoint_name("gs://b/run/ckpt-500") == "ckpt-500"
    where = GcsPath.parse("gs://b/runs/r1/")
    assert (where.bucket, where.prefix, str(where)) == ("b", "runs/r1", "gs://b/runs/r1")
    for bad in ("/local/dir", "gs://", "s3://b/x"):
        with pytest.raises(InputError, match="not a gs://BUCKET/PATH URL"):
            GcsPath.parse(bad)


def test_reports_name_mirrored_files_by_their_urls(tmp_path):
    cache = tmp_path / "cache"
    report = {"model": f"{cache}/b/runs/r1/model", "min_score": 0.3,
              "images": [{"image": f"{cache}/b/imgs/cat.jpg", "class": "Bengal"},
                         {"image": "/home/ada/dog.jpg"}]}
    assert mirrored_to_urls(report, cache) == {
        "model": "gs://b/runs/r1/model", "min_score": 0.3,
        "images": [{"image": "gs://b/imgs/cat.jpg", "class": "Bengal"},
                   {"image": "/home/ada/dog.jpg"}]}


@pytest.mark.parametrize("hostile", [
    "runs/r1/model/../../../../escaped.txt",
    "runs/r1/model//tmp/escaped.txt",
    "runs/r1/model/variables/./../../../escaped.txt",
])
def test_object_names_that_would_leave_the_mirror_are_refused(gcs, tmp_path, hostile):
    """Anyone who may write to the bucket chooses object names; none lands outside the mirror,
    and a refusal fetches nothing at all."""
    cache = tmp_path / "repo" / "work" / "cache"
    blob = gcs.bucket("pets-data").blob(hostile)
    blob.upload_from_string("pwned")
    try:
        assert hostile in {b.name for b in gcs.list_blobs("pets-data", prefix="runs/r1/")}
        with pytest.raises(UnsafePathError, match=r"refusing gs://pets-data/runs/r1/model/.*"
                                                  r"outside the local mirror"):
            stage_directory(gcs, "gs://pets-data/runs/r1/model", cache_dir=cache)
    finally:
        blob.delete()
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]  # nothing written anywhere
    assert not (tmp_path / "tmp").exists()


def test_a_symlink_in_the_mirror_cannot_redirect_a_download(gcs, tmp_path):
    cache, outside = tmp_path / "cache", tmp_path / "outside"
    outside.mkdir()
    (cache / "pets-data" / "runs" / "r1" / "model").mkdir(parents=True)
    (cache / "pets-data" / "runs" / "r1" / "model" / "variables").symlink_to(outside)
    with pytest.raises(UnsafePathError, match="symlink"):
        stage_directory(gcs, "gs://pets-data/runs/r1/model", cache_dir=cache)
    assert list(outside.iterdir()) == []


def test_hostile_urls_and_checkpoint_names_are_refused(gcs, tmp_path):
    for url in ("gs://pets-data/runs/../../../x", "gs://pets-data/runs//x", "gs://../x",
                "gs://pets-data/runs/./x"):
        with pytest.raises(InputError, match="gs://"):
            stage_directory(gcs, url, cache_dir=tmp_path)
    with pytest.raises(UnsafePathError, match="not a file name"):
        stage_checkpoint(gcs, RUN, "..", cache_dir=tmp_path)
    assert not list(tmp_path.rglob("*"))
