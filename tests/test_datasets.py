"""Named datasets in the bucket (gs://BUCKET/datasets/NAME/), through the real Cloud Storage
client against fake-gcs-server and the Vertex AI fakes: uploads, listing, launches that pin
a dataset's version, and what a reader sees when an upload dies."""

from __future__ import annotations

import datetime
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from launch.errors import InputError, MissingError
from launch.stores.datachecks import DataRefused
from launch.stores.gcs import datasets
from launch.targets.base import Handover
from launch.targets.local.executor import Local
from launch.targets.vertex.executor import Vertex
from launch.values import jobfile
from launch.values.jobs import Request, TrainerDirs
from tests import cli
from tests.cli import REPO, invoke
from tests.conftest import HANG
from tests.fakes.cloud import fake_cloud, write_records
from tests.fakes.gcs import FakeGcs
from trainer.common.errors import SettingsError
from trainer.common.files import CONVERSION_REPORT_FILE
from trainer.data import datasets as store

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

    from launch.stores.runs import jobfiles

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
    result = invoke("train", "--dataset=../runs")
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
                  "from trainer.data.datasets import publish; "
                  "publish(client_for(sys.argv[1]), 'pets-data', 'big', sys.argv[2])")
        env = {**os.environ, "STORAGE_EMULATOR_HOST": server.url}
        child = subprocess.Popen([sys.executable, "-c", script, server.url, str(records)],
                                 cwd=REPO, env=env)
        deadline = time.monotonic() + 600  # a hang, not a slow machine
        while not list(client.list_blobs(BUCKET, prefix="datasets/big/")):
            assert child.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        child.kill()  # some objects of the version are there; the manifest is not
        child.wait(timeout=HANG)
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
        env = {"STORAGE_EMULATOR_HOST": server.url, "PETS_PROJECT": "test",
               "PETS_BUCKET": BUCKET}

        def invoke(*args: str) -> cli.Ran:
            return cli.invoke(*args, env=env)

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


def sent_args(fakes) -> dict[str, str]:
    """The flags of the last job Vertex AI received, as --name: value."""
    (pool, *_) = fakes.vertex.received[-1].custom_job.job_spec.worker_pool_specs
    return dict(arg.split("=", 1) for arg in pool.container_spec.args if "=" in arg)


def listed_inputs(manifest: store.Manifest, bucket: str = BUCKET) -> dict[str, str]:
    return {f"--{flag}": ",".join(f"{manifest.url(bucket)}/{name}"
                                  for name in manifest.shards(split))
            for flag, split in (("train_input", "train"), ("eval_input", "val"))}


def evaluate(cloud, run_id: str) -> str:
    return Vertex(cloud).launch(Request.evaluation("pets_retinanet_resnetfpn", None, run_id))


def test_an_evaluation_reads_the_version_its_run_trained_on(fakes, tmp_path):
    """Item 2: the run's job file records NAME@VERSION; `eval --run-id` (the eval job beside
    an early-stopping run too), a local evaluator and a rerun read that version, not the
    newest and not gs://BUCKET/records; a stored dataset without its version is refused."""
    cloud = fakes.cloud()
    datasets.upload(cloud, str(converted(tmp_path / "pets", 1)), "pets")
    trained_on = store.read_manifest(fakes.storage, BUCKET, "pets")
    job = jobfile.resolve("train", {**T4, "dataset": "pets", "run_id": "r1",
                                    "early_stop_patience": "3",
                                    "early_stop_evaluator": "eval-job"})
    Vertex(cloud).launch(datasets.pinned(cloud, jobfile.request(job, "train"), "pets"))
    datasets.upload(cloud, str(converted(tmp_path / "pets2", 2)), "pets")  # a newer version
    assert store.read_manifest(fakes.storage, BUCKET, "pets").version != trained_on.version

    evaluate(cloud, "r1")  # the evaluator beside training: `invoke eval --run-id r1`
    sent = sent_args(fakes)
    assert sent["--mode"] == "continuous_eval"
    assert sent["--data_dir"] == trained_on.url(BUCKET)
    assert {k: sent[k] for k in ("--train_input", "--eval_input")} == listed_inputs(trained_on)

    local_run = tmp_path / "model"  # a local run's model directory holding that job file
    local_run.mkdir()
    (local_run / "job.yaml").write_text(
        fakes.storage.bucket(BUCKET).blob("runs/r1/job.yaml").download_as_text())
    local = Local(TrainerDirs(str(local_run), str(tmp_path / "records")), cloud,
                  handover=Handover(dry_run=True))
    command = local.launch(Request.evaluation("pets_retinanet_resnetfpn", None))
    assert f"--data_dir={trained_on.url(BUCKET)}" in command
    assert f"--eval_input={listed_inputs(trained_on)['--eval_input']}" in command

    from launch.stores.runs import jobfiles

    source, file = jobfiles.rerun(cloud, "r1")  # the job as recorded: the same version
    again = jobfile.resolve("train", {"run_id": "r2"}, file, source)
    assert again.dataset == trained_on.reference
    Vertex(cloud).launch(datasets.pinned(cloud, jobfile.request(again, "train"), again.dataset))
    assert sent_args(fakes)["--data_dir"] == trained_on.url(BUCKET)

    # a job file stored without the version (before runs recorded it): refused, one line
    sent_before = len(fakes.vertex.received)
    fakes.storage.bucket(BUCKET).blob("runs/old/job.yaml").upload_from_string(
        "target: vertex\nexperiment: pets_retinanet_resnetfpn\ndataset: pets\n")
    (local_run / "job.yaml").write_text("dataset: pets\n")
    refusal = (r"^{} names dataset 'pets' without the version the run read; to {}, say "
               r"which data: --dataset pets@VERSION \(`invoke data\.list`\) or --data-dir$")
    with pytest.raises(InputError, match=refusal.format("gs://pets-data/runs/old/job\\.yaml",
                                                        "evaluate it")):
        evaluate(cloud, "old")
    with pytest.raises(InputError, match=refusal.format(re.escape(str(local_run / "job.yaml")),
                                                        "evaluate it")):
        local.launch(Request.evaluation("pets_retinanet_resnetfpn", None))
    with pytest.raises(InputError, match=refusal.format(
            r"--rerun old \(gs://pets-data/runs/old/job\.yaml\)", "rerun it")):
        jobfiles.rerun(cloud, "old")
    assert jobfiles.rerun(cloud, "old", given={"dataset"})[1]["dataset"] == "pets"  # --dataset wins
    assert len(fakes.vertex.received) == sent_before


def test_a_file_put_into_a_version_is_never_read(fakes, tmp_path):
    """Item 6: the trainer is given each listed shard by name (Model Garden globs a path only
    when it holds * or ?), so a train.record-* put into the version later is not read; a
    launch after it refuses the version; a manifest naming a glob is refused."""
    cloud = fakes.cloud()
    local_copy = converted(tmp_path / "pets", 1)
    datasets.upload(cloud, str(local_copy), "pets")
    manifest = store.read_manifest(fakes.storage, BUCKET, "pets")
    launch(cloud, "pets", "p1")
    sent = sent_args(fakes)
    assert {k: sent[k] for k in ("--train_input", "--eval_input")} == listed_inputs(manifest)
    assert not any(c in sent["--train_input"] + sent["--eval_input"] for c in "*?[")

    planted = "train.record-00000-of-00002"  # matches train.record-*, listed nowhere
    fakes.storage.bucket(BUCKET).blob(f"{manifest.prefix}/{planted}").upload_from_string(
        b"not your data")
    with pytest.raises(InputError, match=rf"^--dataset pets: {manifest.url(BUCKET)}/ does not "
                                         rf"match its manifest \('{planted}' is not in the "
                                         r"manifest\); upload the dataset again$"):
        launch(cloud, "pets", "p2")

    # the trainer's own reading of the inputs it is given, on a copy of the version here
    from trainer.common import io
    from trainer.training.settings import settings_from_args

    (local_copy / planted).write_bytes(b"not your data")
    request = Request.training(None, None).reading(
        str(local_copy), data_files=tuple(e.name for e in manifest.objects))
    settings = settings_from_args(request.args_at(TrainerDirs(str(tmp_path / "model"), "unused")))
    assert [Path(p).name for p in io.match(settings.train_input)] == \
        ["train.record-00000-of-00001"]
    assert planted in [Path(p).name for p in io.match(f"{local_copy}/train.record-*")]  # a glob

    for hostile in ("train.record-*", "train.record-00000-of-00001,gs:x", "../x"):
        text = manifest.to_json().replace('"name": "val.record-00000-of-00001"',
                                          json.dumps({"name": hostile})[1:-1])
        with pytest.raises(SettingsError, match=r"is not a dataset manifest \(object entry"):
            store.Manifest.parse(json.loads(text), "pets", "m")


def test_two_uploads_at_once_leave_a_whole_dataset(fakes, tmp_path):
    """Item 10: upload A publishes, upload B reads A's manifest and starts writing, and A's
    collection runs only then (it is slow on a big dataset): B's objects are spared, so
    B's manifest names objects that exist."""
    client = fakes.storage
    store.publish(client, BUCKET, "pets", converted(tmp_path / "v0", 1))
    first, _ = store.publish(client, BUCKET, "pets", converted(tmp_path / "a", 2))
    collected: list[list[str]] = []
    once = threading.Lock()

    def late_collection_of_a(_: int) -> None:
        if once.acquire(blocking=False):  # once, while B's other objects are being written
            collected.append(store.collect_garbage(client, BUCKET, "pets", {first.version}))

    second, _ = store.publish(client, BUCKET, "pets", converted(tmp_path / "b", 3),
                              on_bytes=late_collection_of_a)
    assert collected and not [n for n in collected[0] if second.version in n]
    assert store.verify(client, BUCKET, second) == []
    assert store.resolve(client, BUCKET, "pets") == second

    # B has published: the next collection deletes what nothing keeps (v0), never B or A
    store.publish(client, BUCKET, "pets", converted(tmp_path / "c", 4))
    versions = {b.name.split("/")[2] for b in client.list_blobs(BUCKET, prefix="datasets/pets/")
                if b.name.count("/") > 2}
    assert second.version in versions and first.version not in versions


def test_a_broken_manifest_is_listed_as_broken(fakes, tmp_path):
    """Item 18: `data.list` lists a dataset whose manifest cannot be read, marked broken
    with the reason (its text shown inert), beside the others."""
    cloud = fakes.cloud()
    for name, seed in (("coco", 1), ("pets", 2), ("yolo", 3)):
        datasets.upload(cloud, str(converted(tmp_path / name, seed)), name)
    bucket = fakes.storage.bucket(BUCKET)
    bucket.blob(store.manifest_name("coco")).upload_from_string(b"{not json")
    bucket.blob(store.manifest_name("yolo")).upload_from_string(
        json.dumps({"dataset": "yolo", "version": "\x1b]0;owned\x07"}))
    lines = datasets.listing(cloud).splitlines()
    assert [line.split()[:2] for line in lines[1:4]] == [
        ["coco", "BROKEN"], ["pets", "-"], ["yolo", "BROKEN"]]
    assert lines[4].startswith("coco is broken: gs://pets-data/datasets/coco/manifest.json")
    assert lines[5] == ("yolo is broken: gs://pets-data/datasets/yolo/manifest.json is not a "
                        "dataset manifest (no version); upload the dataset again")
    assert len(lines) == 6 and "\x1b" not in "".join(lines)
