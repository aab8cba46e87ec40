"""Issue 36, items 1, 12, 15 and 21: a rerun replays only what a launch records; jobs run
images of the environment's repositories only; a FIFO or a device named as a file is
refused at once; the location check derives the repository's location from the image's
host and says what it assumes. Through the real clients against the local fakes."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import signal
from pathlib import Path

import pytest
import yaml

from infra import outputs as stack_outputs
from launch.context.cloud import Cloud
from launch.context.images import ImageBuildError
from launch.errors import InputError
from launch.stores.runs import configs, jobfiles
from launch.targets.base import Handover
from launch.targets.local.executor import Local
from launch.targets.vertex.executor import Vertex
from launch.targets.vertex.locality import TooFar
from launch.targets.vertex.submit import Submission
from launch.values import jobfile
from launch.values.jobs import Places, Request
from launch.values.resources import Accelerator, Resources
from launch.values.sweep import load
from tests.fakes.cloud import OUTPUTS, REPOSITORY, fake_cloud, write_records
from tests.test_jobfile import invoke, refused
from trainer import jsonnum
from trainer.data.changes import ClassChanges
from trainer.data.label_map import read_label_map
from trainer.errors import JsonError, LabelMapError, SettingsError
from trainer.io import NotRegularFile, read_regular
from trainer.predict import read_picture

EXPERIMENT = "pets_retinanet_resnetfpn"
T4 = {"machine_type": "n1-standard-8", "accelerator": "NVIDIA_TESLA_T4:1"}
SECRET = "client_secret: do-not-send-me\n"


@pytest.fixture
def fakes(tmp_path):
    with fake_cloud(tmp_path) as services:
        yield services


@contextlib.contextmanager
def within(seconds: float):
    """Fails, instead of hanging the suite, a call that waits (a FIFO waits for a writer)."""
    def expired(*_):
        raise TimeoutError(f"still waiting after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def launch(cloud: Cloud, run_id: str, flags: dict, file: dict | None = None, source: str = "",
           submission: Submission | None = None) -> str:
    """What `invoke train` does with a job file and flags (tasks._run_job), in-process."""
    job = jobfile.resolve("train", {"target": "vertex", "experiment": EXPERIMENT,
                                    "steps": "100", "run_id": run_id, **T4, **flags},
                          file, source)
    with_image = dataclasses.replace(cloud, overrides={**cloud.overrides, "image": job.image})
    return Vertex(with_image, submission or Submission()).launch(jobfile.request(job, "train"))


def rerun(cloud: Cloud, run: str, flags: dict | None = None) -> str:
    source, file = jobfiles.rerun(cloud, run, jobfile.given(flags or {}))
    return launch(cloud, "again", flags or {}, file, source)


def store(fakes, run: str, text: str) -> None:
    fakes.storage.bucket("pets-data").blob(f"runs/{run}/job.yaml").upload_from_string(text)


def stored(fakes, run: str) -> dict:
    return yaml.safe_load(fakes.storage.bucket("pets-data").blob(f"runs/{run}/job.yaml")
                          .download_as_text())


# --- item 1: a rerun replays what a launch records, nothing else ---------------------------

def test_a_launch_keeps_its_config_files_and_a_rerun_replays_the_copies(fakes, tmp_path):
    cloud = fakes.cloud()
    from launch.stores.gcs.records import upload_records
    upload_records(cloud, str(write_records(tmp_path / "records")))
    config = tmp_path / "head.yaml"
    config.write_text("task:\n  model:\n    head:\n      num_convs: 2\n")
    launch(cloud, "cfg1", {"config_file": [str(config)]})
    copy = "gs://pets-data/runs/cfg1/config-1.yaml"
    assert stored(fakes, "cfg1")["config-file"] == [copy]  # the run's copy, not the path
    bucket = fakes.storage.bucket("pets-data")
    assert bucket.blob("runs/cfg1/config-1.yaml").download_as_text() == config.read_text()
    (pool,) = fakes.vertex.received[0].custom_job.job_spec.worker_pool_specs
    assert f"--params_override={config.read_text()}" in pool.container_spec.args  # as before

    config.write_text(SECRET)  # the local file changes: a rerun never reads it
    rerun(cloud, "cfg1")
    (pool,) = fakes.vertex.received[1].custom_job.job_spec.worker_pool_specs
    assert f"--config_file={copy}" in pool.container_spec.args
    assert not any("do-not-send-me" in arg for arg in pool.container_spec.args)
    assert stored(fakes, "again")["config-file"] == ["gs://pets-data/runs/again/config-1.yaml"]


HOSTILE = {
    "config-file: [{secret}]": r"config-file '{secret}' is not the run's copy "
                               r"\(gs://pets-data/runs/evil/config-N\.yaml\)",
    "config-file: [gs://pets-data/runs/other/config-1.yaml]": r"config-file .* is not the run's "
                                                              r"copy",
    "config-file: [gs://pets-data/runs/evil/../other/config-1.yaml]": r"config-file .* is not",
    "data-dir: /etc": r"data-dir '/etc' is a path on this machine, which a launch on Vertex "
                      r"AI never records",
    "init-from: /home/someone/ckpt-5": r"init-from '/home/someone/ckpt-5' is a path on this",
    "target: local": r"target 'local', but a run stored in the bucket was launched with "
                     r"target vertex",
    "eval:\n  machine-type: a3-highgpu-8g": r"'eval' is not a key a training launch writes",
    "once: true": r"'once' is not a key a training launch writes",
    "timeout-hours: 8000": r"timeout-hours 8000 is more than 168 \(7 days, Vertex AI's "
                           r"default\); give --timeout-hours on the command line",
    # a number written as text is the same number (it was sent as 3,650 days)
    'timeout-hours: "87600"': r"timeout-hours 87600 is more than 168",
    # a number is no dataset reference: it was evaluated as the newest version of "2026"
    "dataset: 2026": r"dataset '2026' is not a dataset reference \(NAME@VERSION, text\)",
}


@pytest.mark.parametrize("line", HOSTILE, ids=list(HOSTILE))
def test_a_stored_job_its_launch_could_not_have_written_is_refused(fakes, tmp_path, line):
    secret = tmp_path / "application_default_credentials.json"
    secret.write_text(SECRET)
    base = {"target": "vertex", "experiment": EXPERIMENT, "run-id": "evil", **{
        jobfile.flag(k)[2:]: v for k, v in T4.items()}}
    text = yaml.safe_dump({k: v for k, v in base.items()
                           if k != line.split(":")[0]}) + line.format(secret=secret) + "\n"
    store(fakes, "evil", text)
    # a value is shown cut at 100 characters (a pytest path can be longer)
    message = HOSTILE[line].format(secret=re.escape(str(secret)[:100]))
    with pytest.raises(InputError, match=rf"^--rerun evil \(gs://pets-data/runs/evil/job\.yaml"
                                         rf"\): {message}"):
        rerun(fakes.cloud(), "evil")
    assert fakes.vertex.received == [] and fakes.builds.requests == []
    assert not list(fakes.storage.bucket("pets-data").list_blobs(prefix="runs/again/"))


@pytest.mark.parametrize("override", [
    "task.train_data.input_path: gs://evil/train*", "task.validation_data.input_path: gs://e/v",
    "task.init_checkpoint: gs://evil/ckpt-1", "task__init_checkpoint_modules: all"])
def test_an_override_of_what_the_trainers_flags_own_is_refused(fakes, override):
    """A stored (or typed) override may not swap the data the job names, a dataset's listed
    shards, or the checkpoint --init-from names: the trainer sets those from its flags."""
    store(fakes, "swap", yaml.safe_dump({"target": "vertex", "experiment": EXPERIMENT}) +
          f"override:\n  {override}\n")
    name = override.split(":")[0]
    path = name.replace("__", ".")
    with pytest.raises(InputError, match=rf"--override '{name}': the trainer takes {path} "
                                         r"from --(data-dir or --dataset|init-from|init-type); "
                                         r"give that instead"):
        rerun(fakes.cloud(), "swap")
    with pytest.raises(InputError, match=rf"the trainer takes {path} from"):
        jobfile.resolve("train", {"override": [f"{name}=x"]})
    assert fakes.vertex.received == []


def test_a_long_timeout_is_replayed_when_the_command_line_gives_it(fakes):
    store(fakes, "long", yaml.safe_dump({"target": "vertex", "experiment": EXPERIMENT,
                                         "timeout-hours": 400}))
    _, file = jobfiles.rerun(fakes.cloud(), "long", jobfile.given(
        {"timeout_hours": "400"}))
    assert file["timeout-hours"] == 400


def test_a_stored_image_of_another_project_is_refused_before_anything_is_sent(fakes):
    store(fakes, "img", yaml.safe_dump({
        "target": "vertex", "experiment": EXPERIMENT,
        "image": "us-central1-docker.pkg.dev/attacker/public/trainer:latest"}))
    with pytest.raises(ImageBuildError, match=r"^--image us-central1-docker\.pkg\.dev/attacker/"
                                              r"public/trainer:latest is not in the "
                                              r"environment's repositories \(" + REPOSITORY):
        rerun(fakes.cloud(), "img")
    assert fakes.vertex.received == [] and fakes.registry.lookups == []


def test_a_local_rerun_reads_only_copies_inside_its_model_directory(fakes, tmp_path):
    run = tmp_path / "model"
    run.mkdir()
    secret = tmp_path / "secret.yaml"
    secret.write_text(SECRET)
    (run / "config-1.yaml").symlink_to(secret)  # a copy's name, pointing out of the run
    for config in (str(secret), str(run / "config-1.yaml"), "gs://pets-data/x.yaml"):
        (run / "job.yaml").write_text(yaml.safe_dump({
            "target": "local", "experiment": EXPERIMENT, "config-file": [config]}))
        with pytest.raises(InputError, match=r"is not the run's copy"):
            jobfiles.rerun(fakes.cloud(), str(run))
    (run / "config-1.yaml").unlink()
    (run / "config-1.yaml").write_text("task: {}\n")
    (run / "job.yaml").write_text(yaml.safe_dump({
        "target": "local", "experiment": EXPERIMENT, "data-dir": "work/records",
        "config-file": [str(run / "config-1.yaml")]}))
    _, file = jobfiles.rerun(fakes.cloud(), str(run))  # what a local launch writes
    assert file["config-file"] == [str(run / "config-1.yaml")]
    (run / "job.yaml").write_text(yaml.safe_dump({"target": "vertex",
                                                  "experiment": EXPERIMENT}))
    with pytest.raises(InputError, match=r"target 'vertex', but a run stored in a model "
                                         r"directory was launched with target local"):
        jobfiles.rerun(fakes.cloud(), str(run))


def test_a_local_launch_keeps_its_config_files_in_the_model_directory(fakes, tmp_path):
    config = tmp_path / "head.yaml"
    config.write_text("task: {model: {head: {num_convs: 2}}}\n")
    model = tmp_path / "model"
    kept = configs.keep_local(fakes.cloud(), str(model), [str(config)],
                              configs.read_local([str(config)]))
    assert kept == (str(model / "config-1.yaml"),)
    assert (model / "config-1.yaml").read_text() == config.read_text()
    assert configs.is_copy(kept[0], str(model), local=True)


def test_every_key_a_training_launch_writes_may_be_replayed():
    """The allow-list is what Written.text writes: every training option, at the top."""
    keys = jobfile.written_keys("train")
    assert {"config-file", "image", "target", "timeout-hours", "init-from"} <= keys
    assert not keys & {"eval", "tune", "once", "idle-timeout", "sweep"}
    job = jobfile.resolve("train", {"target": "vertex", "spot": True, "label": ["a=b"],
                                    "timeout_hours": "5", **T4})
    written = yaml.safe_load(jobfile.Written("train", job).text(run_id="r", region="x"))
    assert set(written) <= keys


def test_a_hostile_rerun_is_one_line_and_exit_2_end_to_end(tmp_path):
    """Through invoke, once: a local run's job file naming a file outside its directory."""
    run = tmp_path / "model"
    run.mkdir()
    secret = tmp_path / "adc.json"
    secret.write_text(SECRET)
    (run / "job.yaml").write_text(yaml.safe_dump({
        "target": "local", "experiment": EXPERIMENT, "config-file": [str(secret)]}))
    line = refused(invoke("train", f"--rerun={run}", "--target=vertex", "--dry-run"))
    assert f"config-file '{secret}' is not the run's copy" in line
    assert not list(tmp_path.glob("model-rerun-*"))


# --- item 12: only the environment's repositories ------------------------------------------

def test_an_image_of_another_repository_is_refused_from_a_flag_and_a_job_file(fakes, tmp_path):
    other = "us-central1-docker.pkg.dev/someone-else/images/trainer:v1"
    dry = Submission(dry_run=True)
    for flags, file in (({"image": other}, None), ({}, {"image": other})):
        with pytest.raises(ImageBuildError, match=r"is not in the environment's repositories "
                                                  r".*a platform engineer may allow"):
            launch(fakes.cloud(), "img1", flags, file, "--job f", dry)
    assert fakes.vertex.received == [] and fakes.registry.lookups == []
    own = f"{REPOSITORY}/trainer:mine"  # the environment's own repository: as before
    assert launch(fakes.cloud(), "img1", {"image": own}, submission=dry)


def test_a_platform_engineer_allows_another_repository_in_the_stack(fakes, tmp_path):
    shared = "us-central1-docker.pkg.dev/shared-images/base"
    stack_outputs.write({"dev": dataclasses.replace(
        OUTPUTS, allowed_image_repositories=shared)}, fakes.cloud().outputs_path)
    cloud = fakes.cloud()
    assert shared in cloud.image_repositories()
    assert REPOSITORY in cloud.image_repositories()
    digest = fakes.registry.push(f"{shared}/trainer:v1")
    from launch.stores.gcs.records import upload_records
    upload_records(cloud, str(write_records(tmp_path / "records")))
    launch(cloud, "shared1", {"image": f"{shared}/trainer:v1"})
    (pool,) = fakes.vertex.received[0].custom_job.job_spec.worker_pool_specs
    assert pool.container_spec.image_uri == f"{shared}/trainer@{digest}"
    # a variable is the researcher's, not the platform's: it allows nothing
    assert "us-central1-docker.pkg.dev/x/y" not in dataclasses.replace(
        cloud, environ={"PETS_ALLOWED_IMAGE_REPOSITORIES": "us-central1-docker.pkg.dev/x/y"}
    ).image_repositories()


# --- item 15: a FIFO or a device is refused at once -----------------------------------------

def test_a_fifo_or_a_device_named_as_a_file_is_refused_at_once(tmp_path):
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    with within(10):
        for path in (fifo, "/dev/zero", tmp_path):
            with pytest.raises(NotRegularFile):
                read_regular(path, 100)
        with pytest.raises(jobfile.JobFileError, match=rf"^--job {fifo}: cannot read it "
                                                       r"\(a FIFO, not a regular file\)$"):
            jobfile.read(str(fifo))
        with pytest.raises(InputError, match=rf"^--config-file {fifo}: cannot read it as YAML "
                                             r"\(a FIFO, not a regular file\)$"):
            configs.read_local([str(fifo)])
        with pytest.raises(SettingsError, match=rf"^--classes {fifo}: a FIFO, not a regular "
                                                r"file$"):
            ClassChanges.read(fifo)
        with pytest.raises(InputError, match=rf"^--sweep {fifo}: cannot read it \(a FIFO, "
                                             r"not a regular file\)$"):
            load(str(fifo))
        with pytest.raises(JsonError, match="a FIFO, not a regular file"):
            jsonnum.read_file(fifo, 100)  # --annotations, LabelMe files
        with pytest.raises(InputError, match=r"^--config-file /dev/zero: cannot read it as "
                                             r"YAML \(a device, not a regular file\)$"):
            configs.read_local(["/dev/zero"])
        with pytest.raises(LabelMapError, match=rf"^label map {fifo}: a FIFO, not a regular"):
            read_label_map(fifo)  # --label-map of convert, train and predict
        with pytest.raises(NotRegularFile):
            read_picture(str(fifo))  # predict --images: that image fails, the others go on
        model = tmp_path / "model"
        model.mkdir()
        os.mkfifo(model / "run.json")  # the run a model directory holds
        job = jobfile.resolve("train", {"model_dir": str(model)})
        with pytest.raises(InputError, match=rf"^--model-dir {model}: a FIFO, not a regular "
                                             r"file; choose another --model-dir$"):
            jobfiles.recorded_run(job, str(model), Cloud)


def test_a_fifo_config_file_is_refused_before_a_local_run_starts(tmp_path):
    fifo = tmp_path / "head.yaml"
    os.mkfifo(fifo)
    request = Request.training(EXPERIMENT, 10, Resources(), None)
    request = dataclasses.replace(request, args=dataclasses.replace(
        request.args, config_files=(str(fifo),)))
    records = write_records(tmp_path / "records")
    with within(10), pytest.raises(InputError, match=r"^--config-file .*a FIFO"):
        Local(Places(str(tmp_path / "model"), str(records)), Cloud(),
              submission=Handover(dry_run=True)).launch(request)
    assert not (tmp_path / "model").exists()


# --- item 21: the repository's location is the image host's --------------------------------

ENVIRON = {"PETS_PROJECT": OUTPUTS.project, "PETS_BUCKET": OUTPUTS.bucket,
           "PETS_SERVICE_ACCOUNT": OUTPUTS.trainer_service_account,
           "PETS_IMAGE": f"{REPOSITORY}/trainer:abc",
           "PETS_TPU_IMAGE": f"{REPOSITORY}/trainer-tpu:abc"}


def from_variables(fakes, tmp_path, region: str, **environ) -> Cloud:
    """Settings from variables and flags alone: no outputs file (the fakes' clients)."""
    return dataclasses.replace(fakes.cloud(region=region), environ={**ENVIRON, **environ},
                               outputs_path=tmp_path / "no-outputs.json")


def dry_run(cloud: Cloud) -> str:
    request = Request.training(EXPERIMENT, 100, Resources(
        "n1-standard-8", Accelerator("NVIDIA_TESLA_T4", 1)), "loc1")
    return Vertex(cloud, Submission(dry_run=True)).launch(request)


def test_a_region_far_from_the_image_is_refused_without_an_outputs_file(fakes, tmp_path,
                                                                        capsys):
    with pytest.raises(TooFar, match=r"^--region europe-west4 is in europe, but the image "
                                     r"repository is in us-central1 \(north-america\): choose "
                                     r"a region in north-america, where the repository is read "
                                     r"without crossing a continent$"):
        dry_run(from_variables(fakes, tmp_path, "europe-west4"))
    far = from_variables(fakes, tmp_path, "europe-west4", PETS_REGION="us-central1",
                         PETS_IMAGE="europe-docker.pkg.dev/pets-detector-dev/i/trainer:a")
    with pytest.raises(TooFar, match=r"^--region europe-west4 is in europe, but the data bucket "
                                     r"is in us-central1 \(north-america\), taken to be the "
                                     r"environment's region as its location is not known: "
                                     r"choose a region in north-america, where the bucket is "
                                     r"read without crossing a continent, or set "
                                     r"PETS_BUCKET_LOCATION$"):
        dry_run(far)
    capsys.readouterr()
    dry_run(from_variables(fakes, tmp_path, "us-east4", PETS_REGION="us-central1"))
    assert ("note: the bucket location is not known, so it is taken to be the environment's "
            "region (us-central1); set PETS_BUCKET_LOCATION (or deploy the stack again) if it "
            "is elsewhere") in capsys.readouterr().err
    dry_run(from_variables(fakes, tmp_path, "europe-west4", PETS_BUCKET_LOCATION="EU",
                           PETS_IMAGE="europe-docker.pkg.dev/pets-detector-dev/i/trainer:a"))
    assert "not known" not in capsys.readouterr().err


def test_a_pinned_image_is_located_by_its_own_host(fakes):
    cloud = fakes.cloud(image="us-docker.pkg.dev/pets-detector-dev/pets-images/trainer:x")
    assert cloud.locations().repository == "us"
    assert fakes.cloud().locations() == type(cloud.locations())("US-CENTRAL1", "us-central1")
    assert Path(fakes.cloud().outputs_path).exists()
