"""The Vertex AI target through the real client library against a fake JobService on
127.0.0.1: the exact CustomJob received, submit/wait/cancel, errors, invalid combinations."""

from __future__ import annotations

import dataclasses
import json
import shlex
from pathlib import Path

import pytest
from google.cloud import aiplatform_v1

from docsite.commands import every_block
from launch.context import settings
from launch.context.places import CloudSetup
from launch.errors import InputError
from launch.targets.vertex import client as vertex_client
from launch.targets.vertex import hardware
from launch.targets.vertex.jobs import vertex_job
from launch.targets.vertex.resources import Resources, Scheduling
from launch.targets.vertex.spec import to_json
from launch.values.jobs import Request
from launch.values.resources import Accelerator
from tests.cli import invoke
from tests.fakes.vertex import FakeJobService
from tests.on_vertex import with_vertex

SETUP = CloudSetup(
    project="pets-detector-dev", region="us-central1", bucket="pets-detector-dev-pets-data",
    image="us-central1-docker.pkg.dev/p/pets-images/trainer:abc",
    tpu_image="us-central1-docker.pkg.dev/p/pets-images/trainer-tpu:abc",
    service_account="pets-trainer@pets-detector-dev.iam.gserviceaccount.com",
    tensorboard="projects/p/locations/us-central1/tensorboards/42")
EXPERIMENT, STEPS = "pets_retinanet_resnetfpn", 5000


def train_custom_job(setup: CloudSetup, run_id: str, resources: Resources,
                     labels: dict[str, str] | None = None) -> aiplatform_v1.CustomJob:
    return vertex_job(setup, with_vertex(
        Request.training(EXPERIMENT, STEPS), resources), run_id, labels)


def eval_custom_job(setup: CloudSetup, run_id: str,
                    idle_timeout: float | None = None) -> aiplatform_v1.CustomJob:
    return vertex_job(setup, Request.evaluation(EXPERIMENT, STEPS, idle_timeout=idle_timeout),
                      run_id)


@pytest.fixture
def fake():
    with FakeJobService() as service:
        yield service


def submitted(fake, job) -> aiplatform_v1.CustomJob:
    created = vertex_client.submit(fake.client(), SETUP.project, SETUP.region, job)
    (request,) = fake.received[-1:]
    assert request.parent == "projects/pets-detector-dev/locations/us-central1"
    assert created.name.endswith("/customJobs/1")
    return request.custom_job


def test_gpu_job_as_received(fake):
    job = train_custom_job(SETUP, "run1",
                           Resources("n1-standard-8", Accelerator("NVIDIA_TESLA_T4", 1),
                                     scheduling=Scheduling(timeout_hours=2, strategy="SPOT")),
                           labels={"user": "Ada.Lovelace", "git": "1a2b3c"})
    received = submitted(fake, job)
    (pool,) = received.job_spec.worker_pool_specs
    assert pool.machine_spec.machine_type == "n1-standard-8"
    assert pool.machine_spec.accelerator_type == aiplatform_v1.AcceleratorType.NVIDIA_TESLA_T4
    assert pool.machine_spec.accelerator_count == 1 and pool.replica_count == 1
    assert pool.container_spec.image_uri == SETUP.image
    assert list(pool.container_spec.args) == [
        "--experiment=pets_retinanet_resnetfpn", "--mode=train",
        "--model_dir=gs://pets-detector-dev-pets-data/runs/run1/checkpoints",
        "--data_dir=gs://pets-detector-dev-pets-data/records", "--train_steps=5000"]
    spec = received.job_spec
    assert spec.service_account == SETUP.service_account
    assert spec.base_output_directory.output_uri_prefix == \
        "gs://pets-detector-dev-pets-data/runs/run1"
    assert spec.tensorboard == SETUP.tensorboard
    assert spec.scheduling.timeout.seconds == 7200
    assert spec.scheduling.restart_job_on_worker_restart is True
    assert spec.scheduling.strategy == aiplatform_v1.Scheduling.Strategy.SPOT
    assert dict(received.labels) == {"user": "ada-lovelace", "git": "1a2b3c",
                                     "experiment": "pets_retinanet_resnetfpn", "run": "run1",
                                     "role": "train"}


def test_multi_worker_job_with_reduction_server(fake):
    job = train_custom_job(SETUP, "run1", Resources("a2-highgpu-2g", workers=9,
                                                    reduction_servers=2))
    chief, workers, reducers = submitted(fake, job).job_spec.worker_pool_specs
    assert chief.replica_count == 1 and workers.replica_count == 9
    for pool in (chief, workers):
        assert pool.machine_spec.accelerator_type == \
            aiplatform_v1.AcceleratorType.NVIDIA_TESLA_A100
        assert pool.machine_spec.accelerator_count == 2
    assert chief.container_spec.args == workers.container_spec.args
    assert reducers.replica_count == 2 and reducers.machine_spec.machine_type == "n1-highcpu-16"
    assert reducers.container_spec.image_uri == \
        "us-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest"
    for pool in (chief, workers):  # NCCL says in the logs whether it loaded the plugin
        env = {e.name: e.value for e in pool.container_spec.env}
        assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_SUBSYS"] == "INIT,NET"


@pytest.mark.parametrize("region,geo", [("europe-west4", "europe"), ("asia-southeast1", "asia"),
                                        ("us-east4", "us")])
def test_the_reduction_server_image_is_the_regions_multi_region(region, geo):
    """As Vertex AI's distributed-training page lists it, like the prediction containers."""
    from launch.targets.vertex.registry import prediction_image
    from launch.targets.vertex.spec import trainer_images

    setup = dataclasses.replace(SETUP, region=region)
    job = train_custom_job(setup, "run1", Resources("a2-ultragpu-1g", workers=1,
                                                    reduction_servers=1))
    reducers = job.job_spec.worker_pool_specs[-1]
    assert reducers.container_spec.image_uri == \
        f"{geo}-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest"
    assert prediction_image(region).startswith(f"{geo}-docker.pkg.dev/")
    assert trainer_images(job) == [SETUP.image]  # Google's reducers are not ours to pin
    assert all("NCCL_DEBUG" not in {e.name for e in pool.container_spec.env}
               for pool in train_custom_job(setup, "run2", Resources(
                   "a2-ultragpu-1g", workers=1)).job_spec.worker_pool_specs)


@pytest.mark.parametrize("tpu,machine_type,topology,accelerator", [
    ("v5litepod-4", "ct5lp-hightpu-4t", "2x2", None),
    ("v3-8", "cloud-tpu", "", aiplatform_v1.AcceleratorType.TPU_V3),
])
def test_tpu_jobs_use_the_tpu_image(fake, tpu, machine_type, topology, accelerator):
    (pool,) = submitted(fake, train_custom_job(SETUP, "run1", Resources(tpu=tpu))
                        ).job_spec.worker_pool_specs
    assert pool.machine_spec.machine_type == machine_type
    assert pool.machine_spec.tpu_topology == topology
    if accelerator:
        assert pool.machine_spec.accelerator_type == accelerator
        assert pool.machine_spec.accelerator_count == 8
    assert pool.container_spec.image_uri == SETUP.tpu_image
    assert "--tpu=local" in pool.container_spec.args


def test_eval_job_is_one_continuous_evaluator(fake):
    received = submitted(fake, eval_custom_job(SETUP, "run1", idle_timeout=1800))
    (pool,) = received.job_spec.worker_pool_specs
    assert pool.replica_count == 1 and not pool.machine_spec.accelerator_count
    assert "--mode=continuous_eval" in pool.container_spec.args
    assert "--eval_idle_timeout=1800" in pool.container_spec.args
    assert "--model_dir=gs://pets-detector-dev-pets-data/runs/run1/checkpoints" in \
        pool.container_spec.args


def test_submit_wait_and_cancel(fake):
    client = fake.client()
    job = vertex_client.submit(client, SETUP.project, SETUP.region,
                               eval_custom_job(SETUP, "run1"))
    states = []
    done = vertex_client.wait(client, job.name, on_state=states.append, poll_seconds=0,
                              sleep=lambda s: None)
    assert states == ["JOB_STATE_PENDING", "JOB_STATE_RUNNING", "JOB_STATE_SUCCEEDED"]
    assert done.state == aiplatform_v1.JobState.JOB_STATE_SUCCEEDED
    second = vertex_client.submit(client, SETUP.project, SETUP.region,
                                  eval_custom_job(SETUP, "run2"))
    vertex_client.cancel(client, second.name)
    assert client.get_custom_job(name=second.name).state.name == "JOB_STATE_CANCELLED"


@pytest.mark.parametrize("word,message", [("deny", "permission denied"),
                                          ("quota", "quota exceeded"),
                                          ("invalid", "rejected the request")])
def test_api_errors_are_reported_clearly(fake, word, message):
    job = eval_custom_job(SETUP, "run1")
    job.display_name = f"{word}-job"
    with pytest.raises(vertex_client.VertexError, match=message):
        vertex_client.submit(fake.client(), SETUP.project, SETUP.region, job)
    with pytest.raises(vertex_client.VertexError, match="not found"):
        vertex_client.cancel(fake.client(), "projects/p/locations/l/customJobs/404")


@pytest.mark.parametrize("kwargs,workers,message", [
    ({"machine_type": "e2-standard-8", "accelerator": "NVIDIA_TESLA_T4:1"}, 0, "n1 machines"),
    ({"machine_type": "n1-standard-8", "accelerator": "NVIDIA_TESLA_T4:3"}, 0, "counts 1, 2, 4"),
    ({"machine_type": "n1-standard-8", "accelerator": "NVIDIA_H100_80GB:1"}, 0,
     "own machine types: a3-highgpu-1g"),
    ({"machine_type": "a2-highgpu-1g", "accelerator": "NVIDIA_TESLA_A100:4"}, 0,
     "comes with NVIDIA_TESLA_A100:1"),
    ({"machine_type": "ct5lp-hightpu-4t", "tpu_topology": "3x3"}, 0,
     "topologies 2x2, 2x4, 4x4, 4x8, 8x8, 8x16, 16x16, not 3x3"),
    ({"tpu": "v9-1"}, 0, "unknown --tpu"),
    ({"tpu": "v5litepod-4"}, 2, "drop --workers"),
    ({"accelerator": "NVIDIA_TESLA_T4:0"}, 0, "at least 1"),
    ({"accelerator": "NVIDIA_GTX_1080:1"}, 0, "unknown accelerator"),
])
def test_invalid_combinations_are_rejected_before_any_request(fake, kwargs, workers, message):
    with pytest.raises(InputError, match=message):  # HardwareError is an InputError
        train_custom_job(SETUP, "run1", Resources.from_flags(**kwargs, workers=workers))
    assert fake.received == []


def test_regions_without_the_accelerator_are_rejected():
    setup = CloudSetup(**{**SETUP.__dict__, "region": "me-central2"})
    with pytest.raises(hardware.HardwareError, match="not offered for training in me-central2"):
        train_custom_job(setup, "run1",
                         Resources("n1-standard-8", Accelerator("NVIDIA_TESLA_T4", 1)))
    with pytest.raises(InputError, match="--workers must be at least 0, got -1"):
        train_custom_job(SETUP, "run1", Resources(workers=-1))


@pytest.mark.parametrize("job", [
    train_custom_job(SETUP, "r", Resources("n1-standard-8", Accelerator("NVIDIA_TESLA_T4", 1))),
    train_custom_job(SETUP, "r", Resources("n1-standard-8", Accelerator("NVIDIA_TESLA_V100", 1),
                                           workers=9)),
    train_custom_job(SETUP, "r", Resources(tpu="v5litepod-4")),
    eval_custom_job(SETUP, "r"),
])
def test_dry_run_json_parses_back_into_the_api_type(job):
    text = to_json(job)
    assert aiplatform_v1.CustomJob.from_json(text) == job
    assert json.loads(text)["jobSpec"]["workerPoolSpecs"][0]["replicaCount"] == "1"


def test_settings_come_from_outputs_then_config_then_environment_then_flags(tmp_path):
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps({"pets-dev": {
        "project": "p-out", "region": "us-central1", "bucket": "b-out", "image_uri": "i:1",
        "tpu_image_uri": "t:1", "trainer_service_account": "sa@p", "tensorboard": "tb"}}))
    resolve = settings.resolve_setup
    assert resolve("dev", {}, {}, {}, outputs).bucket == "b-out"
    assert resolve("dev", {}, {}, {"bucket": "b-cfg"}, outputs).bucket == "b-cfg"
    assert resolve("dev", {}, {"PETS_BUCKET": "b-env"}, {"bucket": "b-cfg"}, outputs
                   ).bucket == "b-env"
    assert resolve("dev", {"bucket": "b-flag"}, {"PETS_BUCKET": "b-env"}, {}, outputs
                   ).bucket == "b-flag"
    with pytest.raises(settings.SettingsMissingError, match="npx cdktn deploy pets-prod"):
        resolve("prod", {}, {}, {}, outputs)


def documented_jobs() -> dict[str, list[str]]:
    """The guides' Vertex AI training and evaluation commands that the docs run as dry runs
    (tests/test_docs_commands.py), each one job's request: `where -> args`."""
    found = {}
    for block in every_block():
        for command in block.commands() if block.marked else ():
            args = shlex.split(command)[1:]
            if args[0] in ("train", "eval") and flag_value(args, "--target") == "vertex" \
                    and not {"--job", "--save-job", "--help"} & set(args):
                found[f"{block.where()} {' '.join(args[:8])}"] = args
    return found


def flag_value(args: list[str], flag: str) -> str | None:
    """The value `args` give `flag` (`--flag value` or `--flag=value`); None if absent."""
    for index, arg in enumerate(args):
        if arg == flag and index + 1 < len(args):
            return args[index + 1]
        if arg.startswith(f"{flag}="):
            return arg.split("=", 1)[1]
    return None


def dry_run(*args: str, cwd: Path) -> aiplatform_v1.CustomJob:
    env = {"PETS_PROJECT": SETUP.project, "PETS_REGION": SETUP.region,
           "PETS_BUCKET": SETUP.bucket, "PETS_IMAGE": SETUP.image,
           "PETS_TPU_IMAGE": SETUP.tpu_image, "PETS_SERVICE_ACCOUNT": SETUP.service_account,
           # no credentials here (and no probing for them): the images stay tags, with a note
           "GOOGLE_APPLICATION_CREDENTIALS": str(cwd / "no-credentials.json")}
    (cwd / "work" / "records").mkdir(parents=True, exist_ok=True)
    result = invoke(*args, *(() if "--dry-run" in args else ("--dry-run",)), env=env, cwd=cwd)
    assert result.returncode == 0, result.stderr
    assert "note: images shown by tag, not digest (" in result.stderr, result.stderr
    return aiplatform_v1.CustomJob.from_json(result.stdout)


DOCUMENTED = documented_jobs()


def test_the_guides_show_each_kind_of_vertex_job():
    shown = [args for args in DOCUMENTED.values()]
    assert any(flag_value(args, "--tpu") == "v5litepod-16" for args in shown)
    assert any(flag_value(args, "--workers") for args in shown)
    assert any("--flex-start" in args for args in shown)
    assert any(flag_value(args, "--capacity") for args in shown)
    assert any(args[0] == "eval" for args in shown)


@pytest.mark.parametrize("args", DOCUMENTED.values(), ids=DOCUMENTED.keys())
def test_a_documented_job_dry_runs_to_a_valid_custom_job(args, tmp_path):
    from infra.image_context import context_hash

    job = dry_run(*args, cwd=tmp_path)
    assert job.job_spec.service_account == SETUP.service_account
    if flag_value(args, "--run-id"):
        assert job.labels["run"] == flag_value(args, "--run-id")
    tpu = flag_value(args, "--tpu")
    repository = (SETUP.tpu_image if tpu else SETUP.image)[:-4]
    for pool in job.job_spec.worker_pool_specs:  # these sources' image, not the deployed one
        assert pool.container_spec.image_uri == f"{repository}:{context_hash()}"
    if tpu == "v5litepod-16":
        (pool,) = job.job_spec.worker_pool_specs
        assert (pool.machine_spec.machine_type, pool.machine_spec.tpu_topology,
                pool.replica_count) == ("ct5lp-hightpu-4t", "4x4", 1)
    capacity = flag_value(args, "--capacity")
    if capacity:  # the first rung's job
        first = capacity.split(",")[0].upper().replace("-", "_")
        assert job.job_spec.scheduling.strategy.name == first
    if "--flex-start" in args:
        assert job.job_spec.scheduling.strategy.name == "FLEX_START"
        wait = flag_value(args, "--max-wait-hours")
        assert job.job_spec.scheduling.max_wait_duration.total_seconds() == \
            float(wait or 24) * 3600
    workers = flag_value(args, "--workers")
    if workers:
        assert sum(pool.replica_count for pool in job.job_spec.worker_pool_specs
                   if pool.machine_spec.machine_type == flag_value(args, "--machine-type")) == \
            1 + int(workers)
    accelerator = flag_value(args, "--accelerator")
    if accelerator and not workers:
        (pool,) = job.job_spec.worker_pool_specs
        kind, count = accelerator.split(":")
        assert (pool.machine_spec.machine_type, pool.machine_spec.accelerator_type.name,
                pool.machine_spec.accelerator_count) == (flag_value(args, "--machine-type"),
                                                         kind, int(count))


def test_an_evaluation_on_the_test_split_is_one_job_evaluating_once(tmp_path):
    """`invoke eval --split test`: the trainer's --eval_split travels in the job's args, and
    it evaluates once (--mode eval) without --once; the job file keeps the split."""
    job = dry_run("eval", "--target=vertex", "--run-id=r1", "--split=test", cwd=tmp_path)
    (pool,) = job.job_spec.worker_pool_specs
    args = list(pool.container_spec.args)
    assert "--eval_split=test" in args and "--mode=eval" in args, args
    assert f"--model_dir=gs://{SETUP.bucket}/runs/r1/checkpoints" in args
    assert job.labels["role"] == "eval" and pool.replica_count == 1
    plain = dry_run("eval", "--target=vertex", "--run-id=r1", cwd=tmp_path)
    assert not any(arg.startswith("--eval_split") for arg in
                   plain.job_spec.worker_pool_specs[0].container_spec.args)  # val: unsaid


def test_a_pinned_image_is_used_as_it_is(tmp_path):
    pinned = "us-central1-docker.pkg.dev/p/pets-images/trainer:pinned"
    for args in (["train", "--target=vertex", "--machine-type=n1-standard-8",
                  "--accelerator=NVIDIA_TESLA_T4:1", "--run-id=gpu1"],
                 ["train", "--target=vertex", "--tpu=v5litepod-4", "--run-id=tpu1"]):
        (pool,) = dry_run(*args, f"--image={pinned}", cwd=tmp_path).job_spec.worker_pool_specs
        assert pool.container_spec.image_uri == pinned


def test_list_status_and_ids(fake):
    client = fake.client()
    first = vertex_client.submit(client, SETUP.project, SETUP.region,
                                 eval_custom_job(SETUP, "run1"))
    second = vertex_client.submit(client, SETUP.project, SETUP.region,
                                  train_custom_job(SETUP, "run2", Resources()))
    listed = vertex_client.list_jobs(client, SETUP.project, SETUP.region)
    assert [j.name for j in listed] == [second.name, first.name]  # newest first
    line = vertex_client.describe(listed[0])
    assert "QUEUED" in line and "train-pets_retinanet_resnetfpn" in line
    assert vertex_client.job_name(SETUP.project, SETUP.region, "2") == second.name
    assert vertex_client.job_name("x", "y", second.name) == second.name


def test_a_runs_jobs_and_their_tensorboard_and_console_links(fake):
    from launch.targets.vertex.spec import console_url, tensorboard_url

    client = fake.client()
    for job in (train_custom_job(SETUP, "run1", Resources()),
                eval_custom_job(SETUP, "run1"),
                train_custom_job(SETUP, "run2", Resources())):
        vertex_client.submit(client, SETUP.project, SETUP.region, job)
    found = vertex_client.list_jobs(client, SETUP.project, SETUP.region,
                                    labels={"run": "run1"})
    assert [j.display_name for j in found] == ["eval-pets_retinanet_resnetfpn",
                                               "train-pets_retinanet_resnetfpn"]
    assert tensorboard_url(found[1]) == (
        "https://us-central1.tensorboard.googleusercontent.com/experiment/"
        "projects+p+locations+us-central1+tensorboards+42+experiments+1")
    assert console_url(found[1].name) == ("https://console.cloud.google.com/vertex-ai/locations/"
                                          "us-central1/training/1?project=pets-detector-dev")
    without = aiplatform_v1.CustomJob(name=found[1].name)
    assert tensorboard_url(without) is None


def test_cloud_commands_without_credentials_say_how_to_log_in(tmp_path):
    result = invoke("jobs.logs", "--job=12", env={
        "HOME": str(tmp_path), "CLOUDSDK_CONFIG": str(tmp_path), "NO_GCE_CHECK": "True",
        "PETS_PROJECT": "p", "PETS_REGION": "us-central1",
        "GOOGLE_APPLICATION_CREDENTIALS": None})
    assert result.returncode == 2
    assert "gcloud auth application-default login" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_dry_run_without_credentials_answers_at_once_where_no_metadata_server_does(
        tmp_path, monkeypatch):
    """Issue 41 item 8: with no key file and no gcloud ADC file, google.auth asks the
    metadata server three times, 3 s each; where the address swallows packets (here: a socket
    that accepts and never answers) that cost a dry run 10 s or more. It answers in under 6 s
    (about 2 s here, the interpreter's start-up included, but a loaded CI machine has taken 3.1;
    the three unanswered asks alone are 9) and still says it found no credentials."""
    import socket
    import time

    from google.auth.compute_engine import _metadata

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        monkeypatch.setattr(_metadata, "_NO_GCE_CHECK", False)
        monkeypatch.setattr(_metadata, "detect_gce_residency_linux", lambda: False)  # not GCE
        (tmp_path / "work" / "records").mkdir(parents=True)
        started = time.monotonic()
        result = invoke("train", "--target=vertex", "--machine-type=n1-standard-8",
                        "--accelerator=NVIDIA_TESLA_T4:1", "--run-id=gpu1", "--dry-run",
                        cwd=tmp_path, env={
                            "HOME": str(tmp_path), "CLOUDSDK_CONFIG": str(tmp_path / "gcloud"),
                            "GOOGLE_APPLICATION_CREDENTIALS": None, "NO_GCE_CHECK": None,
                            "GCE_METADATA_IP": f"127.0.0.1:{silent.getsockname()[1]}",
                            "PETS_PROJECT": SETUP.project, "PETS_REGION": SETUP.region,
                            "PETS_BUCKET": SETUP.bucket, "PETS_IMAGE": SETUP.image,
                            "PETS_SERVICE_ACCOUNT": SETUP.service_account})
        took = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert "note: images shown by tag, not digest (no Google credentials)" in result.stderr
    assert took < 6, f"{took:.1f} s"


def test_web_access_reaches_train_eval_and_tune_jobs_and_status_shows_the_shells(tmp_path):
    from launch.features.jobs import job_command
    from launch.stores.gcs.records import upload_records
    from launch.targets.vertex.executor import Vertex
    from launch.values import jobfile
    from launch.values.sweep import Sweep
    from tests.fakes.cloud import fake_cloud, write_records

    flags = {"target": "vertex", "web_access": True, "accelerator": "NVIDIA_TESLA_T4:1",
             "run_id": "shell1"}
    with fake_cloud(tmp_path) as fakes:
        cloud = fakes.cloud()
        upload_records(cloud, str(write_records(tmp_path / "records")))
        said = Vertex(cloud).launch(jobfile.request(jobfile.resolve("train", flags), "train"))
        assert "shell:       invoke jobs.status --job 1 (a link for each replica" in said
        assert fakes.vertex.received[-1].custom_job.job_spec.enable_web_access
        assert "shell" not in job_command(cloud, "status", "1")  # not running yet
        assert job_command(cloud, "status", "1").splitlines()[1:] == [
            "shell workerpool0-0: https://100-dot-us-central1.aiplatform-training."
            "googleusercontent.com"]
        # eval reads it from its own section of a job file, as its machine
        evaluation = jobfile.resolve("eval", {}, {"eval": {"vertex": {"web-access": True}},
                                                  "target": "vertex", "run-id": "shell1",
                                                  "version": 2})
        Vertex(cloud).launch(jobfile.request(evaluation, "eval"))
        assert fakes.vertex.received[-1].custom_job.job_spec.enable_web_access
        Vertex(cloud).tune(jobfile.request(jobfile.resolve("tune", flags), "tune"),
                           Sweep.from_yaml("params: {batch_size: [8, 16]}\n"))
        (tuning,) = fakes.vertex.tuning.received
        assert tuning.hyperparameter_tuning_job.trial_job_spec.enable_web_access
        without = jobfile.resolve("train", {**flags, "web_access": False, "run_id": "plain"})
        Vertex(cloud).launch(jobfile.request(without, "train"))
        assert not fakes.vertex.received[-1].custom_job.job_spec.enable_web_access
    # here, a shell is the one you have: the local target refuses it, as --spot
    with pytest.raises(InputError, match=r"^--web-access: the local target cannot open a "
                                         r"shell into a running replica: add --target "
                                         r"vertex, or drop --web-access$"):
        jobfile.resolve("train", {"web_access": True})


def test_a_dry_runs_maps_print_in_key_order_and_its_fields_in_the_protos():
    """The protobuf runtime keeps a map in hash order, which differs between processes: a dry
    run prints maps sorted (labels, environment, a Struct's keys as given), fields as before."""
    from launch.targets.vertex.spec import rest_json

    names = [f"k{n:02d}" for n in range(40)]
    job = aiplatform_v1.CustomJob(
        display_name="d", labels={n: "v" for n in reversed(names)},
        job_spec={"worker_pool_specs": [{"container_spec": {"image_uri": "image"}}],
                  "scheduling": {"timeout": "3600s"}})
    printed = json.loads(to_json(job))
    assert list(printed["labels"]) == names
    assert list(printed) == ["displayName", "jobSpec", "labels"]  # the proto's field order
    assert printed["jobSpec"]["scheduling"] == {"timeout": "3600s"}
    assert aiplatform_v1.CustomJob.from_json(to_json(job)) == job
    request = aiplatform_v1.DeployModelRequest(endpoint="e", traffic_split={"b": 50, "a": 50})
    assert list(json.loads(rest_json(request))["trafficSplit"]) == ["a", "b"]



def test_a_job_asks_only_for_the_settings_it_uses_and_names_how_to_give_them(tmp_path):
    """Issue 38 item 1: the README's GPU dry run with --project/--region/--bucket/--image and
    no stack asks for no TPU image, and a missing setting is named with the ways it can be
    given (service_account has no flag)."""
    from infra.image_context import context_hash
    from launch.context.cloud import Cloud, job_images

    none = tmp_path / "outputs.json"  # no stack deployed
    flags = {"project": "p", "region": "us-central1", "bucket": "pets-b",
             "image": "us-docker.pkg.dev/p/r/trainer:1"}
    with pytest.raises(settings.SettingsMissingError) as missing:
        job_images(Cloud(overrides=flags, environ={}, outputs_path=none))
    assert str(missing.value).startswith(
        "no service_account for environment 'dev': give service_account by "
        f"PETS_SERVICE_ACCOUNT, invoke.yaml's vertex.service_account or {none}'s "
        "trainer_service_account. A platform engineer's `npx cdktn deploy pets-dev")
    assert "tpu_image" not in str(missing.value)
    account = {"PETS_SERVICE_ACCOUNT": "sa@p.iam.gserviceaccount.com"}
    where = job_images(Cloud(overrides=flags, environ=account, outputs_path=none), tpu=True)
    assert where.image == where.tpu_image == flags["image"]  # --image is the TPU one too
    unpinned = Cloud(overrides={**flags, "image": None}, outputs_path=none, environ={
        **account, "PETS_IMAGE": "us-docker.pkg.dev/p/r/trainer:deployed"})
    assert job_images(unpinned).image == f"us-docker.pkg.dev/p/r/trainer:{context_hash()}"
    with pytest.raises(settings.SettingsMissingError,
                       match=r"^no tpu_image for environment 'dev': give tpu_image by "
                             r"PETS_TPU_IMAGE, invoke\.yaml's vertex\.tpu_image or "):
        job_images(unpinned, tpu=True)


def test_the_settings_with_a_flag_are_the_tasks_cloud_flags():
    """The settings page is made from SETTINGS (tests/test_docs.py checks it is fresh)."""
    from docsite.pages import settings_page
    from launch.cli.taskflags import CLOUD

    assert {field for field, s in settings.SETTINGS.items() if s.flag} == set(CLOUD) - {"env"}
    for field in ("serving_image", "serving_service_account", "converter_service_account"):
        assert f"`PETS_{field.upper()}`" in settings_page()
