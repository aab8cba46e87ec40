"""Named datasets in the bucket (gs://BUCKET/datasets/NAME/), through the real Cloud Storage
client against fake-gcs-server and the Vertex AI fakes: uploads, listing, launches that pin
a dataset's version, and what a reader sees when an upload dies."""

from __future__ import annotations

import datetime
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launch import jobfile
from launch.datachecks import DataRefused
from launch.errors import InputError, MissingError
from launch.executors import Vertex
from launch.gcs import datasets
from tests.conftest import REPO
from tests.fakes.cloud import fake_cloud, write_records
from tests.fakes.gcs import FakeGcs
from trainer import datasets as store
from trainer.files import CONVERSION_REPORT_FILE

BUCKET = "pets-data"
T4 = {"target": "vertex", "steps": "100", "experiment": "pets_retinanet_resnetfpn",
      "machine_type": "n1-standard-8", "accelerator": "NVIDIA_TESLA_T4:1"}


@pytest.fixture
def fakes(tmp_path):
    with fake_cloud(tmp_path) as services:
        yield services


def converted(root: Path, seed: int, converted_with: str = "Abyssinian") -> Path:
    """A converted directory (random shard bytes: what matters is names and content) with a
    conversion report: 5 training and 2 validation examples of one class."""
    write_records(root)
    (root / "train.record-00000-of-00001").write_bytes(random.Random(seed).randbytes(2000))
    one = {"Abyssinian": {"images": 20, "objects": 20}}
    (root / CONVERSION_REPORT_FILE).write_text(json.dumps({
        "splits": {"train": {"examples": 5}, "val": {"examples": 2}},
        "classes": {"train": one, "val": one}, "label_map_ids": {converted_with: 1}}))
    return root


def data_dir_arg(fakes) -> str:
    (pool,) = fakes.vertex.received[-1].custom_job.job_spec.worker_pool_specs
    (arg,) = [a for a in pool.container_spec.args if a.startswith("--data_dir=")]
    return arg.removeprefix("--data_dir=")


def objects_below(fakes, url: str) -> dict[str, bytes]:
    prefix = url.removeprefix(f"gs://{BUCKET}/") + "/"
    return {b.name.removeprefix(prefix): b.download_as_bytes()
            for b in fakes.storage.list_blobs(BUCKET, prefix=prefix)}


def launch(cloud, dataset: str, run_id: str) -> None:
    job = jobfile.resolve("train", {**T4, "dataset": dataset, "run_id": run_id})
    Vertex(cloud).launch(datasets.pinned(cloud, jobfile.request(job, "train"), dataset))


def test_two_datasets_coexist_and_a_launched_job_keeps_its_version(fakes, tmp_path):
    cloud = fakes.cloud()
    pets = converted(tmp_path / "pets", 1)
    assert datasets.upload(cloud, str(pets), "pets").startswith(
        "dataset pets: gs://pets-data/datasets/pets/v-")
    datasets.upload(cloud, str(converted(tmp_path / "coco", 2)), "coco-2017")
    table = datasets.listing(cloud).splitlines()
    assert table[0].split() == ["name", "format", "examples", "classes", "size", "when"]
    assert [line.split()[0] for line in table[1:]] == ["coco-2017", "pets"]
    assert "train 5, val 2" in table[2] and " 1 " in table[2]

    launch(cloud, "pets", "p1")
    pinned = data_dir_arg(fakes)
    assert pinned.startswith("gs://pets-data/datasets/pets/v-")
    expected = {p.name: p.read_bytes() for p in pets.iterdir()}
    assert {k: v for k, v in objects_below(fakes, pinned).items() if k in expected} == expected

    datasets.upload(cloud, str(converted(tmp_path / "coco2", 3)), "coco-2017")  # re-converted
    launch(cloud, "pets", "p2")
    assert data_dir_arg(fakes) == pinned  # the other dataset's upload changed nothing here
    datasets.upload(cloud, str(converted(tmp_path / "pets2", 4)), "pets")
    launch(cloud, "pets", "p3")
    assert data_dir_arg(fakes) != pinned  # a new launch reads the new version
    assert objects_below(fakes, pinned)  # the replaced version stays for the running job
    datasets.upload(cloud, str(converted(tmp_path / "pets3", 5)), "pets")
    assert objects_below(fakes, pinned)  # replaced twice, and still pinned by p1 and p2

    from launch.runs import jobfiles

    text, where = jobfiles.stored_job(cloud, "p1")
    stored = jobfile.parse(text, where)
    version = pinned.rsplit("/", 1)[1]
    assert stored["dataset"] == f"pets@{version}" and "data-dir" not in stored

    # once the pins' deadlines (each job's timeout and queue bound) have passed
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=400)
    deleted = store.collect_garbage(fakes.storage, BUCKET, "pets", set(), now=later)
    assert not objects_below(fakes, pinned)  # replaced twice, pinned by no run: deleted
    assert any("/pins/p1-train-" in name for name in deleted)
    assert store.resolve(fakes.storage, BUCKET, "pets")  # the newest is whole


def test_the_data_checks_read_the_datasets_own_report(fakes, tmp_path):
    cloud = fakes.cloud()
    datasets.upload(cloud, str(converted(tmp_path / "bad", 1, converted_with="Bengal")), "bad")
    with pytest.raises(DataRefused, match=r"gs://pets-data/datasets/bad/v-[^/]+/ would train "
                                          r"badly: the label map and the records disagree"):
        launch(cloud, "bad", "b1")
    assert fakes.vertex.received == []
    manifest = store.read_manifest(fakes.storage, BUCKET, "bad")
    assert manifest.summary["refusals"] and "data_report.json" in {
        entry.name for entry in manifest.objects}


def test_a_missing_or_misnamed_dataset_is_one_line_before_anything(fakes, tmp_path):
    cloud = fakes.cloud()
    datasets.upload(cloud, str(converted(tmp_path / "pets", 1)), "pets")
    with pytest.raises(MissingError, match=r"^--dataset nope: no such dataset in "
                                           r"gs://pets-data/datasets/; there are: pets \("):
        launch(cloud, "nope", "n1")
    for bad in ("../runs", "a/b", "Pets", "x..y", "-x", "a" * 64):
        with pytest.raises(InputError, match=r"^--dataset '.*' is not a dataset name"):
            jobfile.resolve("train", {**T4, "dataset": bad})
        with pytest.raises(InputError, match="is not a dataset name"):
            datasets.upload(cloud, str(tmp_path / "pets"), bad)
    with pytest.raises(InputError, match="--dataset and --data-dir both name the data"):
        jobfile.resolve("train", {**T4, "dataset": "pets", "data_dir": "gs://pets-data/x"})
    assert fakes.builds.requests == [] and fakes.vertex.received == []


def test_invoke_refuses_a_bad_dataset_name_in_one_line():
    result = subprocess.run([sys.executable, "-m", "invoke", "train", "--dataset=../runs"],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: --dataset '../runs' is not a dataset name: 1-63 lowercase letters, digits, "
        "'.', '_' or '-', starting with a letter or digit, no '..' (e.g. pets-2026)"]


def test_a_tampered_dataset_is_refused(fakes, tmp_path):
    cloud = fakes.cloud()
    datasets.upload(cloud, str(converted(tmp_path / "pets", 1)), "pets")
    manifest = store.read_manifest(fakes.storage, BUCKET, "pets")
    shard = fakes.storage.bucket(BUCKET).blob(f"{manifest.prefix}/val.record-00000-of-00001")
    shard.upload_from_string(b"rewritten")
    with pytest.raises(InputError, match=r"does not match its manifest \(val\.record-00000-"
                                         r"of-00001 differs from the manifest\)"):
        datasets.resolve(cloud, "pets")
    text = manifest.to_json().replace(manifest.version, "../../runs/x")
    fakes.storage.bucket(BUCKET).blob(store.manifest_name("pets")).upload_from_string(text)
    with pytest.raises(InputError, match=r"is not a dataset manifest \(no version\)"):
        datasets.resolve(cloud, "pets")


SIZE = 192 << 20  # as test_upload's: far more than 1.5 s of uploading


def test_an_upload_killed_before_its_manifest_leaves_no_dataset(tmp_path):
    records = converted(tmp_path / "big", 1)
    (records / "train.record-00000-of-00001").write_bytes(random.Random(1).randbytes(SIZE))
    with FakeGcs() as server:
        client = server.client()
        client.create_bucket(BUCKET)
        script = ("import sys; from tests.fakes.gcs import client_for; "
                  "from trainer.datasets import publish; "
                  "publish(client_for(sys.argv[1]), 'pets-data', 'big', sys.argv[2])")
        env = {**os.environ, "STORAGE_EMULATOR_HOST": server.url}
        child = subprocess.Popen([sys.executable, "-c", script, server.url, str(records)],
                                 cwd=REPO, env=env)
        deadline = time.monotonic() + 60
        while not list(client.list_blobs(BUCKET, prefix="datasets/big/")):
            assert child.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        child.kill()  # some objects of the version are there; the manifest is not
        child.wait(timeout=30)
        left = [b.name for b in client.list_blobs(BUCKET, prefix="datasets/big/")]
        assert left and store.manifest_name("big") not in left
        assert store.list_datasets(client, BUCKET) == []
        with pytest.raises(store.MissingDataset, match=r"no such dataset.*there are none"):
            store.resolve(client, BUCKET, "big")

        os.environ["STORAGE_EMULATOR_HOST"] = server.url
        try:
            manifest, deleted = store.publish(client, BUCKET, "big", records)
        finally:
            os.environ.pop("STORAGE_EMULATOR_HOST")
        assert set(left) <= set(deleted)  # the abandoned version goes with the next upload
        assert store.resolve(client, BUCKET, "big") == manifest


def test_invoke_data_upload_list_and_a_missing_dataset(tmp_path):
    with FakeGcs() as server:
        server.client().create_bucket(BUCKET)
        env = {**os.environ, "STORAGE_EMULATOR_HOST": server.url, "PETS_PROJECT": "test",
               "PETS_BUCKET": BUCKET}

        def invoke(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=REPO, env=env,
                                  capture_output=True, text=True, timeout=120)

        assert invoke("data.list").stdout.startswith("no datasets in gs://pets-data/datasets/")
        uploaded = invoke("data.upload", f"--records-dir={converted(tmp_path / 'p', 1)}",
                          "--dataset=pets")
        assert uploaded.returncode == 0, uploaded.stderr
        assert uploaded.stdout.strip().splitlines()[-1].startswith(
            "dataset pets: gs://pets-data/datasets/pets/v-")
        listed = invoke("data.list").stdout.splitlines()
        assert listed[1].split()[:5] == ["pets", "-", "train", "5,", "val"]
        missing = invoke("train", "--dataset=nope")
        assert missing.returncode == 2 and missing.stderr.strip().splitlines() == [
            "error: --dataset nope: no such dataset in gs://pets-data/datasets/; there are: "
            "pets (`invoke data.list`; `invoke data.upload --dataset NAME` or `invoke "
            "data.convert --dataset NAME` makes one)"]
