"""Models in the bucket against the real fake-gcs-server: only the chosen checkpoint is
fetched, unchanged files are not fetched twice, damaged ones are, and errors name the fix."""

from __future__ import annotations

import json

import pytest

from launch.errors import InputError, MissingError
from launch.stores.gcs.mirror import (
    GcsPath,
    UnsafePathError,
    checkpoint_choice,
    mirrored_to_urls,
    stage_checkpoint,
    stage_directory,
)
from tests.fakes.gcs import FakeGcs
from trainer.model.best.choice import Choice

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
    """A run that keeps no best checkpoint: its newest, and a `checkpoint` file naming it
    alone, so the trainer's tools find the newest in the mirror as in the bucket."""
    local = stage_checkpoint(gcs, RUN, cache_dir=tmp_path)
    assert local == tmp_path / "pets-data/runs/r1/checkpoints"
    assert files(local) == ["checkpoint", "ckpt-1000.data-00000-of-00001", "ckpt-1000.index",
                            "label_map.pbtxt", "params.yaml", "run.json"]
    assert (local / "checkpoint").read_text() == \
        'model_checkpoint_path: "ckpt-1000"\nall_model_checkpoint_paths: "ckpt-1000"\n'
    assert (local / "ckpt-1000.data-00000-of-00001").read_text() == "weights 1000" * 1000

    inode = (local / "ckpt-1000.index").stat().st_ino
    stage_checkpoint(gcs, RUN, cache_dir=tmp_path)  # unchanged: nothing fetched again
    assert (local / "ckpt-1000.index").stat().st_ino == inode
    (local / "params.yaml").write_text("damaged")  # a changed file is fetched again
    stage_checkpoint(gcs, RUN, cache_dir=tmp_path)
    assert (local / "params.yaml").read_text() == "a: 1"


def test_a_chosen_checkpoint_and_the_errors_that_name_the_fix(gcs, tmp_path):
    local = stage_checkpoint(gcs, RUN, Choice.parse("500"), cache_dir=tmp_path)
    assert (local / "ckpt-500.index").exists() and not (local / "ckpt-1000.index").exists()
    assert (local / "checkpoint").read_text().startswith('model_checkpoint_path: "ckpt-500"')
    with pytest.raises(MissingError, match=r"no checkpoint ckpt-7; it has \['ckpt-1000', "
                                                r"'ckpt-500'\]"):
        stage_checkpoint(gcs, RUN, Choice.parse("ckpt-7"), cache_dir=tmp_path)
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


def test_the_best_is_staged_as_the_run_keeps_it_and_a_stale_one_is_forgotten(gcs, tmp_path):
    """best/ (its record and the files of the checkpoint it names, nothing else) for the
    default choice and for its step once rotated away; `latest` never reads a stale record."""
    bucket = gcs.bucket("pets-data")
    record = {"step": 300, "metric": "AP", "value": 0.5, "goal": "maximize",
              "checkpoint": "ckpt-300", "evaluated_at": "2026-11-24T10:00:00+00:00"}
    staged = {"best/best.json": json.dumps(record), "best/ckpt-300.index": "index 300",
              "best/ckpt-300.data-00000-of-00001": "weights 300",
              "best/ckpt-200.index": "a stray of a crashed update"}
    for name, text in staged.items():
        bucket.blob(f"runs/r2/checkpoints/{name}").upload_from_string(text)
    for name in ("checkpoint", "run.json", "ckpt-1000.index", "ckpt-1000.data-00000-of-00001"):
        bucket.copy_blob(bucket.blob(f"runs/r1/checkpoints/{name}"), bucket,
                         f"runs/r2/checkpoints/{name}")
    run = "gs://pets-data/runs/r2/checkpoints"
    local = stage_checkpoint(gcs, run, cache_dir=tmp_path)
    assert files(local) == ["best/best.json", "best/ckpt-300.data-00000-of-00001",
                            "best/ckpt-300.index", "run.json"]
    assert stage_checkpoint(gcs, run, Choice.parse("300"), cache_dir=tmp_path) == local
    stage_checkpoint(gcs, run, Choice.parse("latest"), cache_dir=tmp_path)
    assert not (local / "best/best.json").exists()  # the trainer would resolve it otherwise
    assert (local / "ckpt-1000.index").exists()

    bucket.blob("runs/r2/checkpoints/best/best.json").upload_from_string('{"step": "x"}')
    with pytest.raises(InputError, match=r"best/best.json is not a best checkpoint's record"):
        stage_checkpoint(gcs, run, cache_dir=tmp_path)


def test_names_and_urls():
    assert str(Choice.parse("500")) == str(Choice.parse("ckpt-500")) == "ckpt-500"
    assert str(Choice.parse(None)) == "best" and str(Choice.parse(" latest ")) == "latest"
    for bad in ("gs://b/run/ckpt-500", "..", "last", "-1", "ckpt-x"):
        with pytest.raises(InputError, match=r"--checkpoint .*: give best \(the default\), "
                                             r"latest, a step \(1200\) or a checkpoint name"):
            checkpoint_choice(bad, paths=False)
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
    gcs.bucket("pets-data").blob("runs/odd/checkpoints/checkpoint").upload_from_string(
        'model_checkpoint_path: "../../../x"\n')
    with pytest.raises(UnsafePathError, match="is not a checkpoint's"):
        stage_checkpoint(gcs, "gs://pets-data/runs/odd/checkpoints", cache_dir=tmp_path)
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]
