"""A rerun replays only what a launch records (`--rerun`, a stored job.yaml): the config
files' copies the run keeps, keys its launch could have written, no override of what the
trainer's flags own, and a hostile file is one line, exit 2. Through the real clients against
the local fakes."""

from __future__ import annotations

import dataclasses
import re

import pytest
import yaml

from launch.context.cloud import Cloud
from launch.context.images import ImageBuildError
from launch.errors import InputError
from launch.stores.runs import configs, jobfiles
from launch.targets.vertex.executor import Vertex
from launch.targets.vertex.submit import VertexHandover
from launch.values import jobfile
from tests.fakes.cloud import REPOSITORY, fake_cloud, write_records
from tests.test_jobfile import invoke, refused

EXPERIMENT = "pets_retinanet_resnetfpn"
T4 = {"machine_type": "n1-standard-8", "accelerator": "NVIDIA_TESLA_T4:1"}
SECRET = "client_secret: do-not-send-me\n"


@pytest.fixture
def fakes(tmp_path):
    with fake_cloud(tmp_path) as services:
        yield services


def launch(cloud: Cloud, run_id: str, flags: dict, file: dict | None = None, source: str = "",
           handover: VertexHandover | None = None) -> str:
    """What `invoke train` does with a job file and flags (tasks._run_job), in-process."""
    job = jobfile.resolve("train", {"target": "vertex", "experiment": EXPERIMENT,
                                    "steps": "100", "run_id": run_id, **T4, **flags},
                          file, source)
    image = jobfile.into(job, "cloud").get("image")  # Vertex AI's option, as launching reads it
    with_image = dataclasses.replace(cloud, overrides={**cloud.overrides, "image": image})
    return Vertex(with_image, handover or VertexHandover()).launch(jobfile.request(job, "train"))


def rerun(cloud: Cloud, run: str, flags: dict | None = None) -> str:
    source, file = jobfiles.rerun(cloud, run, jobfile.given(flags or {}))
    return launch(cloud, "again", flags or {}, file, source)


def store(fakes, run: str, text: str) -> None:
    fakes.storage.bucket("pets-data").blob(f"runs/{run}/job.yaml").upload_from_string(text)


def stored(fakes, run: str) -> dict:
    return yaml.safe_load(fakes.storage.bucket("pets-data").blob(f"runs/{run}/job.yaml")
                          .download_as_text())


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
    # a version 1 file's key, named where version 2 keeps it
    "timeout-hours: 8000": r"vertex: timeout-hours 8000 is more than 168 \(7 days, Vertex "
                           r"AI's default\); give --timeout-hours on the command line",
    # a number written as text is the same number (it was sent as 3,650 days)
    'timeout-hours: "87600"': r"vertex: timeout-hours 87600 is more than 168",
    "version: 3": r"version 3 is newer than this launcher reads \(2\)",
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
    assert file["vertex"]["timeout-hours"] == 400  # a version 1 file, read as version 2
    store(fakes, "long2", yaml.safe_dump({"version": 2, "target": "vertex",
                                          "experiment": EXPERIMENT,
                                          "vertex": {"timeout-hours": 400}}))
    with pytest.raises(InputError, match=r": vertex: timeout-hours 400 is more than 168"):
        jobfiles.rerun(fakes.cloud(), "long2")


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
    """The allow-list is what Written.text writes: every training option, at the top or in
    its target's section."""
    keys = jobfile.written_keys("train")
    assert {"version", "config-file", "target", "init-from", "vertex", "local"} <= keys
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
