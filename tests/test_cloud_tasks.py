"""The cloud tasks end to end, through the real client libraries against local fakes of
Vertex AI, Cloud Logging, Artifact Registry, Cloud Build and GCS (tests/fakes/cloud.py)."""

from __future__ import annotations

import pytest
from google.cloud import aiplatform_v1

from infra.image_context import context_hash
from launch.context.builds import build_images
from launch.context.images import tag_resource
from launch.errors import InputError, MissingError, StepFailed
from launch.features.jobs import job_command
from launch.stores.gcs.records import upload_records
from launch.targets.vertex.executor import Vertex
from launch.targets.vertex.resources import Resources
from launch.targets.vertex.submit import VertexHandover
from launch.values.jobs import Request
from launch.values.resources import Accelerator
from tests.fakes.cloud import OUTPUTS, REPOSITORY, fake_cloud, write_records
from tests.fakes.logs import job_entry
from tests.on_vertex import with_vertex


@pytest.fixture
def fakes(tmp_path):
    with fake_cloud(tmp_path) as services:
        yield services


def records(tmp_path):
    return write_records(tmp_path / "records")


T4 = Resources("n1-standard-8", Accelerator("NVIDIA_TESLA_T4", 1))


def train(cloud, run_id="gpu1", resources=T4, handover=None):
    request = with_vertex(
        Request.training("pets_retinanet_resnetfpn", 100, run_id=run_id), resources)
    return Vertex(cloud, handover or VertexHandover()).launch(request)


def evaluate(cloud, run_id, idle_timeout=None):
    request = Request.evaluation("pets_retinanet_resnetfpn", 100, run_id,
                                 idle_timeout=idle_timeout)
    return Vertex(cloud).launch(request)


def tensorboard_links(cloud, run_id):
    return Vertex(cloud).tensorboard(run_id, None, 6006)


def test_train_without_data_fails_before_building_or_submitting(fakes):
    with pytest.raises(MissingError, match=r"gs://pets-data/records/ has no "
                                                r"train\.record-\*, val\.record-\*"):
        train(fakes.cloud())
    assert fakes.builds.requests == [] and fakes.vertex.received == []


def test_upload_then_train_builds_once_and_submits_the_sources_image(fakes, tmp_path, capsys):
    cloud = fakes.cloud()
    assert upload_records(cloud, str(records(tmp_path))).startswith(
        "uploaded 3, unchanged 0: gs://pets-data/records/")

    output = train(cloud)
    assert "building" in capsys.readouterr().out
    (build,) = fakes.builds.requests
    assert build.build.service_account.endswith(OUTPUTS.builder_service_account)
    (request,) = fakes.vertex.received
    (pool,) = request.custom_job.job_spec.worker_pool_specs
    built = f"{REPOSITORY}/trainer:{context_hash()}"  # the job runs what was built, by digest
    assert pool.container_spec.image_uri == \
        f"{REPOSITORY}/trainer@{fakes.registry.tags[tag_resource(built)]}"
    assert request.custom_job.job_spec.base_output_directory.output_uri_prefix == \
        "gs://pets-data/runs/gpu1"
    (job_name,) = fakes.vertex.jobs
    job_id = job_name.rsplit("/", 1)[-1]
    assert f"console:     https://console.cloud.google.com/vertex-ai/locations/us-central1/" \
           f"training/{job_id}?project=pets-detector-dev" in output
    assert f"tensorboards+7+experiments+{job_id}" in output

    fakes.registry.lookups.clear()
    train(cloud, run_id="gpu2")  # unchanged sources: no second build
    assert len(fakes.builds.requests) == 1 and len(fakes.vertex.received) == 2
    assert capsys.readouterr().out.count("up to date") == 1
    # one lookup a tag: the digests found while checking for a build pin the job
    assert sorted(fakes.registry.lookups) == sorted(
        tag_resource(f"{REPOSITORY}/{image}:{context_hash()}")
        for image in ("trainer", "trainer-tpu", "serving", "serving-gpu"))
    assert fakes.vertex.received[1].custom_job.job_spec.worker_pool_specs[0].container_spec \
        .image_uri == pool.container_spec.image_uri


def test_a_pinned_image_is_never_built_and_runs_by_digest(fakes, tmp_path):
    from launch.context.images import ImageBuildError

    cloud = fakes.cloud(image=f"{REPOSITORY}/trainer:pinned")
    upload_records(cloud, str(records(tmp_path)))
    with pytest.raises(ImageBuildError, match="trainer:pinned is not in Artifact Registry"):
        train(cloud)
    digest = fakes.registry.push(f"{REPOSITORY}/trainer:pinned")
    train(cloud)
    fakes.registry.push(f"{REPOSITORY}/trainer:pinned")  # a tag moved later moves no job
    assert fakes.builds.requests == []
    (request,) = fakes.vertex.received
    assert request.custom_job.job_spec.worker_pool_specs[0].container_spec.image_uri == \
        f"{REPOSITORY}/trainer@{digest}"
    with pytest.raises(ImageBuildError, match="is not an Artifact Registry image"):
        train(fakes.cloud(image="docker.io/someone/trainer:latest"), run_id="gpu2")
    assert len(fakes.vertex.received) == 1


def test_dry_run_shows_digests_once_the_images_exist(fakes, capsys):
    from google.cloud import aiplatform_v1

    dry = VertexHandover(dry_run=True)
    tpu = {"resources": Resources(tpu="v5litepod-4")}
    job = aiplatform_v1.CustomJob.from_json(train(fakes.cloud(), handover=dry, **tpu))
    tagged = f"{REPOSITORY}/trainer-tpu:{context_hash()}"
    assert job.job_spec.worker_pool_specs[0].container_spec.image_uri == tagged
    err = capsys.readouterr().err
    assert "images shown by tag, not digest (" in err
    assert "resources: v5litepod-4; 1 replica; STANDARD scheduling, timeout 24 h\n" in err

    digest = fakes.registry.push(tagged)
    job = aiplatform_v1.CustomJob.from_json(train(fakes.cloud(), handover=dry, **tpu))
    assert job.job_spec.worker_pool_specs[0].container_spec.image_uri == \
        f"{REPOSITORY}/trainer-tpu@{digest}"
    err = capsys.readouterr().err
    assert "resources: v5litepod-4" in err and "images shown by tag" not in err
    assert fakes.builds.requests == [] and fakes.vertex.received == []


def test_eval_tensorboard_links_and_job_commands(fakes, tmp_path, capsys):
    cloud = fakes.cloud()
    upload_records(cloud, str(records(tmp_path)))
    train(cloud)
    evaluate(cloud, "gpu1", idle_timeout=600)
    links = tensorboard_links(cloud, "gpu1").splitlines()
    assert [line.split(":")[0] for line in links] == ["eval-pets_retinanet_resnetfpn",
                                                      "train-pets_retinanet_resnetfpn"]
    with pytest.raises(MissingError, match="no Vertex AI job has run 'nope'"):
        tensorboard_links(cloud, "nope")

    listed = job_command(cloud, "list").splitlines()
    assert [line.split()[0] for line in listed] == ["2", "1"]
    assert all(line.endswith("0.00 USD so far") for line in listed)  # not started yet
    fakes.logs.entries += [job_entry("1", s, f"step {s}") for s in range(5)]
    logs = job_command(cloud, "logs", "1", lines=2).splitlines()
    assert [line.rsplit(" ", 2)[-2:] for line in logs] == [["step", "3"], ["step", "4"]]
    assert "no log entries yet" in job_command(cloud, "logs", "2")
    assert "CANCELLED" in job_command(cloud, "cancel", "2") + \
        job_command(cloud, "status", "2")
    done = job_command(cloud, "logs", "1", follow=True, poll_seconds=0)
    assert "SUCCEEDED" in done and "step 4" in capsys.readouterr().out
    from launch.stores.pricing.table import PriceTable
    from launch.targets.vertex.costs import job_hourly

    hourly = job_hourly(PriceTable.load(), "us-central1", fakes.vertex.jobs[
        "projects/pets-detector-dev/locations/us-central1/customJobs/1"]).total
    # the fake's jobs run for one hour: the cost of a finished job is its hourly price
    # (the pinned prices are not from the Billing Catalog API: the cost says so)
    assert job_command(cloud, "status", "1").endswith(f"  {hourly:.2f} USD (unconfirmed "
                                                      "prices)")
    with pytest.raises(InputError, match=r"jobs\.status needs --job"):
        job_command(cloud, "status")


def test_an_impossible_machine_is_rejected_before_any_request(fakes, tmp_path):
    from launch.targets.vertex.hardware import HardwareError

    cloud = fakes.cloud()
    with pytest.raises(HardwareError, match="n1 machines"):
        train(cloud, resources=Resources("e2-standard-8", Accelerator("NVIDIA_TESLA_T4", 1)))
    with pytest.raises(InputError, match="drop --workers"):
        train(cloud, resources=Resources("ct5lp-hightpu-4t", workers=2))
    assert fakes.builds.requests == [] and fakes.vertex.received == []
    assert list(fakes.storage.list_blobs("pets-build")) == []


def test_train_follow_prints_the_logs_and_fails_when_the_job_does(fakes, tmp_path, capsys):
    cloud = fakes.cloud()
    upload_records(cloud, str(records(tmp_path)))
    fakes.logs.entries += [job_entry("1", s, f"step {s}") for s in range(3)]
    follow = VertexHandover(follow=True, poll_seconds=0)
    assert "SUCCEEDED" in train(cloud, handover=follow)
    out = capsys.readouterr().out
    assert out.index("submitted") < out.index("step 0") < out.index("step 2")

    fakes.vertex.fail_next = "the chief ran out of memory"
    with pytest.raises(StepFailed, match=r"FAILED.*the chief ran out of memory"):
        train(cloud, run_id="gpu2", handover=follow)


def test_the_relaunch_benchmark_builds_for_the_first_launch_only():
    from benchmarks import relaunch

    figures = relaunch.main(relaunches=3)
    assert figures["builds"] == 1 and figures["jobs"] == 4


def test_a_bad_run_id_is_refused_before_any_request(fakes, tmp_path):
    from launch.context.places import RunIdError

    cloud = fakes.cloud()
    upload_records(cloud, str(records(tmp_path)))
    for action in (lambda: train(cloud, run_id="../other-team"),
                   lambda: evaluate(cloud, "Run 1"),
                   lambda: tensorboard_links(cloud, 'x" OR labels.run:*')):
        with pytest.raises(RunIdError, match="is not a run id"):
            action()
    assert fakes.builds.requests == [] and fakes.vertex.received == []


def test_train_refuses_stale_shards_before_building_or_submitting(fakes, tmp_path):
    cloud = fakes.cloud()
    upload_records(cloud, str(records(tmp_path)))
    fakes.storage.bucket("pets-data").blob(
        "records/val.record-00004-of-00005").upload_from_string(b"an earlier conversion")
    with pytest.raises(MissingError, match=r"mixes val\.record-\* sets of 1 and 5 shards"
                                                r".*data\.upload --prune"):
        train(cloud)
    assert fakes.builds.requests == [] and fakes.vertex.received == []


def test_local_docker_says_what_it_needs_where_researchers_may_not_push(fakes, tmp_path):
    import dataclasses

    from infra import outputs
    from launch.context.images import ImageBuildError

    no_push = dataclasses.replace(OUTPUTS, researchers_push_images="false")
    outputs.write({"dev": no_push}, tmp_path / "outputs.json")
    with pytest.raises(ImageBuildError, match=r"researchers_push_images is off.*Drop "
                                              r"--local-docker to build in Cloud Build"):
        build_images(fakes.cloud(), local_docker=True)
    assert fakes.builds.requests == []


def test_where_researchers_do_not_build_a_missing_image_is_refused_before_any_upload(
        fakes, tmp_path):
    """`researchers_build_images: false`: no build is submitted and no source uploaded; an
    image that exists (main's, built by a deploy) is used as it is."""
    import dataclasses

    from infra import outputs
    from launch.context import images
    from launch.context.builds import IMAGE_FIELDS
    from launch.context.images import ImageBuildError

    no_build = dataclasses.replace(OUTPUTS, researchers_build_images="false")
    outputs.write({"dev": no_build}, tmp_path / "outputs.json")
    with pytest.raises(ImageBuildError, match=r"does not exist, and researchers do not build "
                                              r"images.*researchers_build_images is off"):
        build_images(fakes.cloud())
    assert fakes.builds.requests == []
    assert not list(fakes.storage.bucket(OUTPUTS.build_bucket).list_blobs())
    for field in IMAGE_FIELDS:  # a deploy of these sources made the images
        fakes.registry.push(images.with_tag(fakes.cloud().fields((field,))[field],
                                            context_hash()))
    assert "nothing to build" in build_images(fakes.cloud()).message
    assert fakes.builds.requests == []


def test_every_target_runs_the_same_trainer_job(fakes, tmp_path):
    """One request, one TrainerJob: the Vertex executor submits the very command line the
    local one runs, with directories in the bucket instead of local ones."""
    from google.cloud import aiplatform_v1

    from launch.errors import InputError
    from launch.targets import executor_for
    from launch.targets.base import LaunchFlags
    from launch.targets.local.executor import Local
    from launch.targets.vertex import jobs as vertex_jobs
    from launch.values.jobs import TrainerDirs

    cloud = fakes.cloud()
    request = with_vertex(
        Request.training("pets_retinanet_resnetfpn", 100, run_id="gpu1"), Resources(workers=2))
    submitted = aiplatform_v1.CustomJob.from_json(
        Vertex(cloud, VertexHandover(dry_run=True)).launch(request))
    expected = request.trainer_job(vertex_jobs.trainer_dirs(cloud.setup(), "gpu1"))
    chief, workers = submitted.job_spec.worker_pool_specs
    assert tuple(chief.container_spec.args) == expected.args == \
        tuple(workers.container_spec.args)
    assert [chief.replica_count, workers.replica_count] == \
        [pool.replica_count for pool in expected.pools]
    assert expected.args[2:4] == ("--model_dir=gs://pets-data/runs/gpu1/checkpoints",
                                  "--data_dir=gs://pets-data/records")
    local = request.trainer_job(TrainerDirs("work/model", "work/records"))
    assert [a for a in local.args if not a.startswith(("--model_dir", "--data_dir"))] == \
        [a for a in expected.args if not a.startswith(("--model_dir", "--data_dir"))]

    flags = LaunchFlags(TrainerDirs("work/model", "work/records"), cloud)
    assert isinstance(executor_for("local", flags), Local)
    with pytest.raises(InputError, match="--target 'gke' is not available; use one of "
                                         "local, vertex"):
        executor_for("gke", flags)
    with pytest.raises(InputError, match="--run-id names the training run to evaluate"):
        Vertex(cloud).launch(Request.evaluation(None, None))
    assert fakes.vertex.received == []


def test_eval_runs_on_the_hardware_asked_for(fakes, tmp_path):
    """`invoke eval --target vertex` takes train's hardware flags: here an L4 GPU."""
    from google.cloud import aiplatform_v1

    from launch.targets.vertex.resources import Scheduling

    cloud = fakes.cloud()
    upload_records(cloud, str(records(tmp_path)))
    gpu = Resources.from_flags(machine_type="g2-standard-8", accelerator="NVIDIA_L4:1",
                               scheduling=Scheduling.from_flags(timeout_hours="2"))
    Vertex(cloud).launch(with_vertex(Request.evaluation("pets_retinanet_resnetfpn", 100, "gpu1",
                                            continuous=False), gpu))
    (received,) = fakes.vertex.received
    (pool,) = received.custom_job.job_spec.worker_pool_specs
    built = f"{REPOSITORY}/trainer:{context_hash()}"
    assert pool == aiplatform_v1.WorkerPoolSpec(
        machine_spec=aiplatform_v1.MachineSpec(
            machine_type="g2-standard-8", accelerator_count=1,
            accelerator_type=aiplatform_v1.AcceleratorType.NVIDIA_L4),
        replica_count=1,
        disk_spec=aiplatform_v1.DiskSpec(boot_disk_type="pd-ssd", boot_disk_size_gb=100),
        container_spec=aiplatform_v1.ContainerSpec(
            image_uri=f"{REPOSITORY}/trainer@{fakes.registry.tags[tag_resource(built)]}",
            args=["--experiment=pets_retinanet_resnetfpn", "--mode=eval",
                  "--model_dir=gs://pets-data/runs/gpu1/checkpoints",
                  "--data_dir=gs://pets-data/records", "--train_steps=100"]))
    assert received.custom_job.job_spec.scheduling.timeout.seconds == 2 * 3600
    assert received.custom_job.job_spec.base_output_directory.output_uri_prefix == \
        "gs://pets-data/runs/gpu1/eval"
    with pytest.raises(InputError, match="evaluation runs on one replica"):
        with_vertex(Request.evaluation(None, None, "gpu1"), Resources(workers=1))
    with pytest.raises(InputError, match="NVIDIA_L4:1"):  # validated as train's are
        Vertex(cloud).launch(with_vertex(Request.evaluation(None, None, "gpu1"), Resources(
            "g2-standard-8", Accelerator("NVIDIA_TESLA_T4", 1))))
    assert len(fakes.vertex.received) == 1


def test_a_run_stores_its_job_file_which_rerun_and_eval_read(fakes, tmp_path):
    """The job file goes to gs://BUCKET/runs/RUN_ID/job.yaml with the image the job runs;
    `--rerun` reads it back as the same job (in a new run), and the run's evaluation reads
    the data directory the run recorded."""
    import dataclasses

    from launch.stores.runs import jobfiles
    from launch.values import jobfile

    cloud = fakes.cloud()
    upload_records(cloud, str(records(tmp_path)))
    bucket = fakes.storage.bucket("pets-data")
    for blob in bucket.list_blobs(prefix="records/"):  # a second dataset beside the first
        bucket.copy_blob(blob, bucket, blob.name.replace("records/", "pets-v2/", 1))
    job = jobfile.resolve("train", {"target": "vertex", "steps": "100", "run_id": "ft1",
                                    "data_dir": "gs://pets-data/pets-v2",
                                    "experiment": "pets_retinanet_resnetfpn",
                                    "override": ["batch_size=4"], "machine_type":
                                    "n1-standard-8", "accelerator": "NVIDIA_TESLA_T4:1"})
    Vertex(cloud).launch(jobfile.request(job, "train"))
    text, where = jobfiles.stored_job(cloud, "ft1")
    assert where == "gs://pets-data/runs/ft1/job.yaml"
    stored = jobfile.parse(text, where)
    assert stored["run-id"] == "ft1" and stored["data-dir"] == "gs://pets-data/pets-v2"
    assert stored["vertex"]["region"] == "us-central1"  # Vertex AI's own options
    assert stored["vertex"]["image"].startswith(f"{REPOSITORY}/trainer:")  # what the job ran
    again = jobfile.resolve("train", {"run_id": "ft2"}, stored, where)
    assert dataclasses.replace(again, run_id="ft1", target_options=dataclasses.replace(
        again.target_options, image=None, region=None)) == job

    evaluate(cloud, "ft1")
    (pool,) = fakes.vertex.received[-1].custom_job.job_spec.worker_pool_specs
    assert "--data_dir=gs://pets-data/pets-v2" in pool.container_spec.args  # the run's own
    with pytest.raises(MissingError, match=r"no job\.yaml in gs://pets-data/runs/gpu9"):
        jobfiles.stored_job(cloud, "gpu9")
    # a job file past the limit is refused, not read cut short (a cut YAML parses, as less)
    huge = f"run-id: big\n# {'x' * jobfiles.MAX_BYTES}\n"
    fakes.storage.bucket("pets-data").blob("runs/big/job.yaml").upload_from_string(huge)
    (tmp_path / "local").mkdir()
    (tmp_path / "local" / "job.yaml").write_text(huge)
    for run, where in (("big", "gs://pets-data/runs/big/job.yaml"),
                       (str(tmp_path / "local"), str(tmp_path / "local" / "job.yaml"))):
        with pytest.raises(InputError, match=rf"^--rerun {run}: {where} is larger than "
                                             r"1024 KiB; a job file is a page of settings$"):
            jobfiles.stored_job(cloud, run)
    for recorded in (jobfiles.bucket_run_data(cloud, "big"),
                     jobfiles.local_run_data(str(tmp_path / "local"))):
        assert (recorded.data_dir, recorded.dataset) == (None, None)


def test_a_second_training_job_of_a_running_run_is_refused_before_building(fakes, tmp_path):
    cloud = fakes.cloud()
    upload_records(cloud, str(records(tmp_path)))
    train(cloud)
    evaluate(cloud, "gpu1")  # an evaluator beside the training job writes no checkpoints
    (running,) = [name for name, job in fakes.vertex.jobs.items()
                  if job.labels["role"] == "train"]
    with pytest.raises(InputError, match=r"^--run-id gpu1: training job \d+ in us-central1 "
                       r"\(\w+\) is writing this run's checkpoints; wait for it, cancel it "
                       r"\(invoke jobs.cancel \d+\), or choose another --run-id$"):
        train(cloud)
    assert len(fakes.vertex.received) == 2 and len(fakes.builds.requests) == 1
    train(cloud, run_id="gpu2")  # another run is another writer
    fakes.vertex.jobs[running].state = aiplatform_v1.JobState.JOB_STATE_FAILED
    train(cloud)  # once it has ended, the run may be trained again (it resumes)
    assert len(fakes.vertex.received) == 4
