"""`invoke data.convert --target vertex`: a conversion job next to the data, submitted to the
fake Vertex AI service, which runs the job's command here (tests/fakes/vertex.py JobCommands)
against the Cloud Storage emulator: the records it publishes are those a local conversion
writes, a killed job publishes nothing, and hostile object names never reach the disk."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from launch.errors import InputError, MissingError, StepFailed
from launch.stores.gcs import datasets
from launch.stores.gcs.upload import upload_directory
from launch.stores.pricing.estimate import OverBudget
from launch.targets.vertex import conversion
from launch.targets.vertex.executor import Vertex
from launch.targets.vertex.submit import VertexHandover
from launch.values.jobs import Conversion
from tests.cli import REPO, invoke
from tests.conftest import HANG
from tests.fakes.cloud import OUTPUTS, fake_cloud
from tests.fakes.vertex import JobCommands
from trainer.args import ConvertArgs
from trainer.common.files import DATA_LABEL_MAP_FILE
from trainer.data import datasets as store
from trainer.data.label_map import id_to_name, parse_label_map
from trainer.data.sample import write_sample

BUCKET = OUTPUTS.bucket
RAW = f"gs://{BUCKET}/raw/pets"
HOSTILE = ("raw/pets/../escape.jpg", "raw/pets/images//double.jpg",
           "raw/pets/images/bell\x07.jpg")
FOLLOW = VertexHandover(follow=True, poll_seconds=0)


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    return write_sample(tmp_path_factory.mktemp("raw") / "pets", num_images=30)


@pytest.fixture
def fakes(tmp_path, sample):
    with fake_cloud(tmp_path) as services:
        upload_directory(services.storage, BUCKET, sample, "raw/pets")
        yield services


def convert(cloud, dataset: str | None = "pets", data_dir: str = RAW,
            handover: VertexHandover = FOLLOW, **options) -> str:
    args = ConvertArgs(data_dir, "work/records", num_shards=2, **options)
    return Vertex(cloud, handover).convert(Conversion(args, dataset))


def record_files(files: dict[str, bytes]) -> dict[str, bytes]:
    return {name: data for name, data in files.items()
            if ".record-" in name or name.endswith(".pbtxt")}


def test_a_vertex_conversion_publishes_what_a_local_one_writes(fakes, sample, tmp_path,
                                                               capsys):
    bucket = fakes.storage.bucket(BUCKET)
    for name in HOSTILE:
        bucket.blob(name).upload_from_string(b"not yours")
    runner = JobCommands(os.environ["STORAGE_EMULATOR_HOST"], fakes.logs)
    fakes.vertex.custom_runner = runner
    output = convert(fakes.cloud())
    assert "SUCCEEDED" in output
    err = capsys.readouterr().err
    assert "machine n1-standard-4, 100 GB boot disk, timeout 1 h" in err
    assert "note: the job will skip gs://pets-data/'raw/pets/../escape.jpg': its name has a " \
           "'.' or '..' segment" in err
    assert "cost: " in err

    (request,) = fakes.vertex.received
    spec = request.custom_job.job_spec
    (pool,) = spec.worker_pool_specs
    assert spec.service_account == OUTPUTS.converter_service_account
    assert (pool.machine_spec.machine_type, pool.disk_spec.boot_disk_size_gb) == \
        ("n1-standard-4", 100)
    assert list(pool.container_spec.args[:6]) == [
        "data", "convert-in-bucket", f"--raw={RAW}", f"--bucket={BUCKET}", "--dataset=pets",
        f"--convert_flag=--data_dir={RAW}"]
    assert request.custom_job.labels["dataset"] == "pets"
    assert not spec.tensorboard
    (log,) = runner.outputs
    for name in HOSTILE:  # skipped by the job too, each named
        assert f"warning: skipped gs://{BUCKET}/{name!r}" in log
    assert "published dataset pets: gs://pets-data/datasets/pets/v-" in log

    local = tmp_path / "local"
    subprocess.run([sys.executable, "-m", "trainer", "data", "convert", f"--data_dir={sample}",
                    f"--output_dir={local}", "--num_shards=2"], cwd=REPO, check=True,
                   capture_output=True, timeout=HANG)
    manifest = store.resolve(fakes.storage, BUCKET, "pets")
    published = {b.name.removeprefix(f"{manifest.prefix}/"): b.download_as_bytes()
                 for b in fakes.storage.list_blobs(BUCKET, prefix=f"{manifest.prefix}/")}
    expected = record_files({p.name: p.read_bytes() for p in local.iterdir()})
    # train, val and test shards, two each, and the label map: byte for byte
    assert len(expected) == 7 and record_files(published) == expected
    assert datasets.row(manifest)["format"] == "pets"
    assert datasets.row(manifest)["examples"].endswith(", test 3")  # the sample's test list
    assert not (tmp_path / "escape.jpg").exists()


def test_sources_and_class_changes_come_from_the_bucket_too(fakes, sample, tmp_path):
    """`--source yolo:gs://…` and `--classes gs://…` below --data-dir: the job stages them
    with the rest and converts as a local run of the same flags does."""
    import json

    from trainer.data.sample import coco_as_yolo, pets_as_coco

    yolo = tmp_path / "raw" / "yolo"
    coco_as_yolo(pets_as_coco(sample), sample / "images", yolo)
    (tmp_path / "raw" / "classes.yaml").write_text("rename: {Abyssinian: cat, Russian_Blue: cat}\n")
    upload_directory(fakes.storage, BUCKET, tmp_path / "raw", "raw/mine")
    fakes.vertex.custom_runner = JobCommands(os.environ["STORAGE_EMULATOR_HOST"], fakes.logs)
    raw = f"gs://{BUCKET}/raw/mine"
    assert "SUCCEEDED" in convert(fakes.cloud(), "mine", raw, sources=(f"yolo:{raw}/yolo",),
                                  classes=f"{raw}/classes.yaml", split=0.8, seed=7)

    local = tmp_path / "local"
    subprocess.run([sys.executable, "-m", "trainer", "data", "convert", f"--source=yolo:{yolo}",
                    f"--classes={tmp_path / 'raw' / 'classes.yaml'}", "--split=0.8",
                    "--seed=7", f"--output_dir={local}", "--num_shards=2"], cwd=REPO,
                   check=True, capture_output=True, timeout=HANG)
    manifest = store.resolve(fakes.storage, BUCKET, "mine")
    published = {b.name.removeprefix(f"{manifest.prefix}/"): b.download_as_bytes()
                 for b in fakes.storage.list_blobs(BUCKET, prefix=f"{manifest.prefix}/")}
    expected = record_files({p.name: p.read_bytes() for p in local.iterdir()})
    assert record_files(published) == expected  # byte for byte
    names = id_to_name(parse_label_map(published[DATA_LABEL_MAP_FILE].decode()))
    assert sorted(names.values()) == ["beagle", "cat"]  # two merged into one
    report = json.loads(published["conversion_report.json"])
    assert report["class_changes"]


def test_a_conversion_job_short_of_quota_is_refused_before_anything(fakes):
    """Its machine's vCPUs against the project's training quota, as a training job's."""
    fakes.quotas.set_limit("custom_model_training_cpus", "us-central1", 2)
    with pytest.raises(InputError) as refused:
        convert(fakes.cloud())
    assert str(refused.value).startswith(
        "n1-standard-4 needs 4 custom_model_training_cpus in us-central1; the project's limit "
        "there is 2: ask for more at https://console.cloud.google.com/iam-admin/quotas")
    assert not fakes.builds.requests and not fakes.vertex.received
    fakes.quotas.set_limit("custom_model_training_cpus", "us-central1", 4)
    assert "\"machineType\": \"n1-standard-4\"" in convert(fakes.cloud(),
                                                           handover=VertexHandover(dry_run=True))


def test_a_killed_conversion_job_leaves_no_dataset(fakes):
    fakes.vertex.custom_runner = JobCommands(os.environ["STORAGE_EMULATOR_HOST"],
                                             fakes.logs, kill_at="staged ")
    with pytest.raises(StepFailed, match="FAILED"):
        convert(fakes.cloud())
    assert store.list_datasets(fakes.storage, BUCKET) == []
    with pytest.raises(MissingError, match="--dataset pets: no such dataset"):
        datasets.resolve(fakes.cloud(), "pets")


def test_a_failed_conversion_says_why(fakes):
    fakes.vertex.custom_runner = JobCommands(os.environ["STORAGE_EMULATOR_HOST"],
                                             fakes.logs)
    with pytest.raises(StepFailed, match="--format coco needs --annotations"):
        convert(fakes.cloud(), format="coco")
    assert store.list_datasets(fakes.storage, BUCKET) == []


def test_what_a_conversion_job_cannot_do_is_refused_before_anything(fakes, tmp_path):
    cloud = fakes.cloud()
    label_map = tmp_path / "labels.pbtxt"
    label_map.write_text("item { id: 1 name: 'cat' }\n")
    for options, error, message in [
        ({"dataset": None}, InputError, "--target vertex converts into a named dataset"),
        ({"dataset": "../x"}, InputError, "--dataset '../x' is not a dataset name"),
        ({"data_dir": str(tmp_path)}, InputError, "reads the raw data from Cloud Storage"),
        ({"data_dir": f"gs://{BUCKET}/runs/x"}, InputError,
         r"conversion jobs read gs://pets-data/raw/ only"),
        ({"label_map": str(label_map)}, InputError, r"--label-map .* is not in the bucket"),
        ({"sources": (f"yolo:{tmp_path}",)}, InputError, r"--source .* is not in the bucket"),
        ({"sources": (f"coco:gs://{BUCKET}/raw/pets/a.json:gs://{BUCKET}/raw/x/images",)},
         InputError, r"--source gs://pets-data/raw/x/images: a conversion job reads only "
         r"below --data-dir"),
        ({"annotations": f"gs://{BUCKET}/raw/other/a.json"}, InputError,
         r"--annotations gs://pets-data/raw/other/a\.json: a conversion job reads only "
         r"below --data-dir gs://pets-data/raw/pets"),
        ({"data_dir": f"gs://{BUCKET}/raw/none"}, MissingError, "no objects below it"),
        ({"handover": VertexHandover(max_cost=0.01)}, OverBudget, "over --max-cost 0.01"),
    ]:
        with pytest.raises(error, match=message):
            convert(cloud, **options)
    assert fakes.builds.requests == [] and fakes.vertex.received == []


def test_the_converter_flags_are_the_trainers_checks_before_any_survey_or_build(fakes,
                                                                                  capsys):
    """Issue 36 item 17: `--split 1.5` was surveyed, priced and dry-run, and refused only in
    the container after the build. The launcher parses the job's converter flags as the
    container will and runs the trainer's own checks (ConvertArgs.check) first."""
    for options, message in [
        ({"split": 1.5}, "--split is the train fraction, between 0 and 1 (0.8: 80% train), "
                         "got 1.5"),
        ({"split": 0.0}, "--split is the train fraction"),
        ({"max_objects": 0}, "--max-objects must be at least 1, got 0"),
        ({"max_pixels": 10**12}, "--max-pixels must be at most 178,956,970"),
        ({"num_shards": 0}, "--num-shards must be at least 1, got 0"),
        ({"format": "voc", "dense_ids": True}, "--dense-ids are for --format coco"),
    ]:
        for handover in (FOLLOW, VertexHandover(dry_run=True)):
            args = ConvertArgs(RAW, "work/records", **{"num_shards": 2, **options})
            with pytest.raises(InputError) as refused:
                Vertex(fakes.cloud(), handover).convert(Conversion(args, "pets"))
            assert message in str(refused.value) and "\n" not in str(refused.value)
            assert "raw data:" not in capsys.readouterr().err  # not surveyed, nor priced
    assert fakes.builds.requests == [] and fakes.vertex.received == []


def test_invoke_data_convert_names_a_bad_target_flag_in_one_line():
    result = invoke("data.convert", "--target=tpu", "--dataset=pets")
    assert result.returncode == 2
    assert result.stderr.strip() == "error: --target 'tpu' is not available; use one of " \
                                    "local, vertex"


@pytest.mark.parametrize("raw_gb, objects, machine, disk, hours", [
    (0.01, 100, "n1-standard-4", 100, 1), (5, 30_000, "n1-standard-8", 100, 1),
    (50, 300_000, "n1-standard-16", 121, 3), (1000, 6_000_000, "n1-standard-32", 2402, 6)])
def test_the_machine_is_sized_from_the_raw_bytes_by_the_capacity_model(raw_gb, objects,
                                                                        machine, disk, hours):
    """The disk and timeout are the capacity model's (raw + records + its margin; three
    times its planned hours), so the job and the capacity table (docs/reference/capacity.md)
    agree."""
    from launch.targets.vertex import capacity

    sizing = conversion.size_for(int(raw_gb * 1e9), objects)
    assert (sizing.machine_type, sizing.disk_gb, sizing.timeout_hours) == (machine, disk, hours)
    assert sizing.max_raw_bytes >= raw_gb * 1e9
    model = capacity.Capacity.load()
    planned = capacity.plan(objects, int(raw_gb * 1e9), model.machine(machine), model.speed,
                            model.storage, model.limits)
    assert planned.hours * 3 <= sizing.timeout_hours <= max(1, planned.hours * 3 + 1)


def test_a_local_conversion_publishes_a_dataset_too_and_inspect_fetches_it(fakes, sample,
                                                                          tmp_path):
    from launch.targets.local.executor import Local
    from launch.values.jobs import TrainerDirs

    cloud = fakes.cloud()
    records = tmp_path / "records"
    args = ConvertArgs(str(sample), str(records), num_shards=2)
    said = Local(TrainerDirs(None, str(records)), cloud).convert(Conversion(args, "local-pets"))
    assert said.startswith("dataset local-pets: gs://pets-data/datasets/local-pets/v-")
    staged = datasets.stage(cloud, "local-pets", tmp_path / "cache")  # data.inspect's copy
    assert record_files({p.name: p.read_bytes() for p in staged.iterdir()}) == \
        record_files({p.name: p.read_bytes() for p in records.iterdir()})


def test_a_dry_run_prints_the_job_and_submits_nothing(fakes, capsys):
    printed = convert(fakes.cloud(), handover=VertexHandover(dry_run=True))
    assert '"convert-in-bucket"' in printed and "n1-standard-4" in printed
    assert "cost: " in capsys.readouterr().err
    assert fakes.builds.requests == [] and fakes.vertex.received == []


def test_the_job_refuses_more_than_its_disk_and_skips_oversized_objects(fakes, tmp_path):
    from trainer.common.errors import SettingsError
    from trainer.data.objects import Limits, stage_prefix

    with pytest.raises(SettingsError, match=r"--data-dir gs://pets-data/raw/pets: more than "
                                            r"10 objects, more than this job was sized for"):
        stage_prefix(fakes.storage, RAW, tmp_path / "a", Limits(10**9, 10, 10**9), "--data-dir")
    with pytest.raises(SettingsError, match=r"bytes, more than the 1,000 this job's disk was "
                                            "sized for"):
        stage_prefix(fakes.storage, RAW, tmp_path / "b", Limits(1000, 10**6, 10**9),
                     "--data-dir")
    staged = stage_prefix(fakes.storage, RAW, tmp_path / "c", Limits(10**9, 10**6, 2000),
                          "--data-dir")
    assert staged.skipped and all("bytes, over the 2,000 a raw object may have" in line
                                  for line in staged.skipped)
    assert all(p.stat().st_size <= 2000 for p in (tmp_path / "c").rglob("*") if p.is_file())
