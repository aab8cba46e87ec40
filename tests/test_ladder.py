"""The capacity ladder: a run resubmitted on the next kind of capacity when its job finds none
or is preempted too often, against the fake JobService scripting those failures."""

from __future__ import annotations

import dataclasses

import pytest
from google.cloud import aiplatform_v1

from launch.errors import InputError, StepFailed
from launch.stores.gcs.records import upload_records
from launch.targets.vertex.executor import Vertex
from launch.targets.vertex.ladder import Ladder, Rung, climb, outcome, rungs
from launch.targets.vertex.resources import Resources
from launch.targets.vertex.submit import VertexHandover
from launch.values.jobs import Request
from launch.values.resources import Accelerator
from tests.fakes.cloud import fake_cloud, write_records
from tests.on_vertex import with_vertex

STOCKOUT = (8, "The zone 'us-central1-a' does not have enough resources available to fulfill "
               "the request. Try a different zone, or try again later (stockout)")
INSUFFICIENT = (8, "Resources are insufficient in region: us-central1. Please try a different "
                   "region.")
PREEMPTED = (14, "The replica workerpool0-0 was preempted")
CRASH = (13, "The replica workerpool0-0 exited with a non-zero status of 1")


def ended(state: str, code: int = 0, message: str = "") -> aiplatform_v1.CustomJob:
    return aiplatform_v1.CustomJob(name="projects/p/locations/l/customJobs/9",
                                   state=aiplatform_v1.JobState[state],
                                   error={"code": code, "message": message})


def test_the_flag_becomes_an_ordered_ladder():
    assert Ladder.from_flag("spot, flex-start,STANDARD", "1") == \
        Ladder(("SPOT", "FLEX_START", "STANDARD"), 1)
    assert Ladder.from_flag(None) is None and Ladder.from_flag("") is None
    for text, message in (("spot,cheap", "'cheap': use spot, flex-start, standard"),
                          ("spot,spot", "twice"), (",", "at least one")):
        with pytest.raises(InputError, match=message):
            Ladder.from_flag(text)
    with pytest.raises(InputError, match="drop --spot and --flex-start"):
        Ladder.from_flag("spot,standard", chosen="SPOT")
    with pytest.raises(InputError, match="--max-preemptions must be a whole number, got 'many'"):
        Ladder.from_flag("spot", "many")
    with pytest.raises(InputError, match="--max-preemptions must be at least 0, got '-1'"):
        Ladder.from_flag("spot", "-1")


@pytest.mark.parametrize("job,expected", [
    (ended("JOB_STATE_SUCCEEDED"), "succeeded"),
    (ended("JOB_STATE_CANCELLED"), "cancelled"),
    (ended("JOB_STATE_FAILED", *STOCKOUT), "capacity"),
    (ended("JOB_STATE_FAILED", *INSUFFICIENT), "capacity"),
    (ended("JOB_STATE_FAILED", 8, "Quota exceeded for aiplatform.googleapis.com/"
                                  "custom_model_training_nvidia_h100_gpus"), "capacity"),
    (ended("JOB_STATE_FAILED", *PREEMPTED), "preempted"),
    (ended("JOB_STATE_FAILED", *CRASH), "failed"),
])
def test_how_an_ended_job_is_read(job, expected):
    assert outcome(job) == expected


def test_climb_moves_up_on_capacity_and_repeated_preemption_only():
    script = iter([ended("JOB_STATE_FAILED", *PREEMPTED), ended("JOB_STATE_FAILED", *PREEMPTED),
                   ended("JOB_STATE_FAILED", *STOCKOUT), ended("JOB_STATE_SUCCEEDED")])
    tried, said = [], []
    done = climb(capacity("SPOT", "FLEX_START", "STANDARD"),
                 lambda rung, attempt: tried.append((rung.strategy, attempt)) or next(script),
                 max_preemptions=1, say=said.append)
    assert outcome(done) == "succeeded"
    assert tried == [("SPOT", 1), ("SPOT", 2), ("FLEX_START", 3), ("STANDARD", 4)]
    assert "preempted (1 of 1 allowed): resubmitting on SPOT" in said[0]
    assert "was preempted too often on SPOT" in said[1] and "on FLEX_START" in said[1]
    assert "found no capacity on FLEX_START" in said[2]
    with pytest.raises(StepFailed, match="exited with a non-zero status"):  # not capacity
        climb(capacity("SPOT", "STANDARD"), lambda r, a: ended("JOB_STATE_FAILED", *CRASH))
    with pytest.raises(StepFailed, match=r"no capacity for the run on any rung of the ladder "
                                         r"\(SPOT: capacity; STANDARD: capacity\)"):
        climb(capacity("SPOT", "STANDARD"), lambda r, a: ended("JOB_STATE_FAILED", *STOCKOUT))


def capacity(*strategies: str) -> list[Rung]:
    """A capacity ladder: one region, one hardware."""
    return rungs(["us-central1"], ["a2-highgpu-1g"], strategies)


@pytest.fixture
def fakes(tmp_path):
    with fake_cloud(tmp_path) as services:
        yield services


A100 = Resources("a2-highgpu-1g")


def test_the_run_climbs_the_ladder_against_the_job_service(fakes, tmp_path, capsys):
    cloud = fakes.cloud()
    upload_records(cloud, str(write_records(tmp_path / "records")))
    fakes.vertex.script = [PREEMPTED, PREEMPTED, PREEMPTED, INSUFFICIENT, None]
    ladder = Ladder.from_flag("spot,flex-start,standard", max_preemptions=2)
    request = with_vertex(Request.training("pets_retinanet_resnetfpn", 500, run_id="a100run"), A100)
    said = Vertex(cloud, VertexHandover(ladder=ladder, poll_seconds=0)).launch(request)
    assert said.split()[1] == "SUCCEEDED" and said.endswith("(run a100run)")

    jobs = [r.custom_job for r in fakes.vertex.received]
    assert [j.job_spec.scheduling.strategy.name for j in jobs] == \
        ["SPOT", "SPOT", "SPOT", "FLEX_START", "STANDARD"]
    assert [j.labels["attempt"] for j in jobs] == ["1", "2", "3", "4", "5"]
    assert [j.labels["capacity"] for j in jobs] == ["spot"] * 3 + ["flex_start", "standard"]
    # the same run each time: its labels, its directory, the very same trainer command, so
    # every attempt resumes from the checkpoints the last one left
    assert {j.labels["run"] for j in jobs} == {"a100run"}
    assert {j.job_spec.base_output_directory.output_uri_prefix for j in jobs} == \
        {"gs://pets-data/runs/a100run"}
    assert len({tuple(j.job_spec.worker_pool_specs[0].container_spec.args) for j in jobs}) == 1
    assert len({j.job_spec.worker_pool_specs[0].container_spec.image_uri for j in jobs}) == 1
    assert len(fakes.builds.requests) == 1  # the images are built once
    out = capsys.readouterr().out
    assert out.count("resubmitting on SPOT") == 2 and "resubmitting on FLEX_START" in out
    assert "found no capacity on FLEX_START" in out and "resubmitting on STANDARD" in out


def test_every_rung_is_checked_before_anything_is_sent(fakes, tmp_path):
    from launch.targets.vertex.hardware import HardwareError

    cloud = fakes.cloud()
    upload_records(cloud, str(write_records(tmp_path / "records")))
    t4 = Resources("n1-standard-8", Accelerator("NVIDIA_TESLA_T4", 1))
    with pytest.raises(HardwareError, match="--flex-start takes jobs on"):
        Vertex(cloud, VertexHandover(ladder=Ladder(("SPOT", "FLEX_START")))).launch(
            with_vertex(Request.training(None, 100, run_id="t4run"), t4))
    assert fakes.vertex.received == [] and fakes.builds.requests == []


def test_the_dry_run_shows_the_first_rung_and_the_ladder(fakes, capsys):
    job = aiplatform_v1.CustomJob.from_json(Vertex(fakes.cloud(), VertexHandover(
        dry_run=True, ladder=Ladder(("SPOT", "STANDARD")))).launch(
        with_vertex(Request.training(None, 100, run_id="a100run"), A100)))
    assert job.job_spec.scheduling.strategy.name == "SPOT"
    err = capsys.readouterr().err
    # issue 38 item 6: the summary is the printed job's, not the flag's STANDARD
    assert "; SPOT scheduling, timeout" in err and "STANDARD scheduling" not in err
    assert "ladder (regions, then hardware, then capacity): SPOT -> STANDARD" in err
    assert "spot rung: cost: " in err and "standard rung: cost: " in err
    assert fakes.vertex.received == []


def test_a_bare_accelerator_type_is_one_and_the_launch_says_so(fakes, capsys):
    """Issue 38 item 6: `--accelerator NVIDIA_TESLA_T4` is NVIDIA_TESLA_T4:1, said aloud."""
    bare = Resources.from_flags(machine_type="n1-standard-8", accelerator="NVIDIA_TESLA_T4")
    assert bare.accelerator == Accelerator("NVIDIA_TESLA_T4", 1)
    assert not bare.accelerator.counted and Accelerator.parse("NVIDIA_TESLA_T4:1").counted
    for resources, said in ((bare, True), (Resources.from_flags(
            machine_type="n1-standard-8", accelerator="NVIDIA_TESLA_T4:1"), False)):
        Vertex(fakes.cloud(), VertexHandover(dry_run=True)).launch(
            with_vertex(Request.training(None, 100, run_id="t4run"), resources))
        note = "note: --accelerator NVIDIA_TESLA_T4 is one a machine (NVIDIA_TESLA_T4:1); " \
               "NVIDIA_TESLA_T4:N asks for N"
        assert (note in capsys.readouterr().err.splitlines()) is said


def persistent_resource(state="RUNNING", replicas=2, autoscale_to=0):
    pool = aiplatform_v1.ResourcePool(
        id="a100s", replica_count=replicas,
        machine_spec=aiplatform_v1.MachineSpec(
            machine_type="a2-highgpu-1g", accelerator_count=1,
            accelerator_type=aiplatform_v1.AcceleratorType.NVIDIA_TESLA_A100))
    if autoscale_to:
        pool.autoscaling_spec = {"min_replica_count": 1, "max_replica_count": autoscale_to}
    return aiplatform_v1.PersistentResource(
        name="projects/pets-detector-dev/locations/us-central1/persistentResources/team-a100s",
        resource_pools=[pool], state=aiplatform_v1.PersistentResource.State[state])


def on_resource(resources: Resources) -> Resources:
    from launch.targets.vertex.resources import Scheduling

    return dataclasses.replace(resources, scheduling=Scheduling(
        persistent_resource="team-a100s"))


def test_jobs_on_a_persistent_resource_must_fit_its_pools(fakes, tmp_path):
    from launch.errors import MissingError
    from launch.targets.vertex.hardware import HardwareError

    cloud = fakes.cloud()
    upload_records(cloud, str(write_records(tmp_path / "records")))
    name = "projects/pets-detector-dev/locations/us-central1/persistentResources/team-a100s"

    def launch(resources, run_id):
        return Vertex(cloud).launch(with_vertex(
            Request.training(None, 100, run_id=run_id), on_resource(resources)))

    with pytest.raises(MissingError, match="no persistent resource team-a100s in "
                                           "pets-detector-dev/us-central1"):
        launch(A100, "r1")
    fakes.persistent.resources[name] = persistent_resource()
    for resources, message in (
            (Resources("n1-standard-8", Accelerator("NVIDIA_TESLA_T4", 1)),
             "has no pool of n1-standard-8 with NVIDIA_TESLA_T4:1 \\(worker pool 0\\); its "
             "pools: a2-highgpu-1g with NVIDIA_TESLA_A100:1 x2"),
            (Resources("a2-highgpu-1g", workers=2), "the job asks for 3 replicas of "
                                                    "a2-highgpu-1g with NVIDIA_TESLA_A100:1; "
                                                    "persistent resource team-a100s holds at "
                                                    "most 2")):
        with pytest.raises(HardwareError, match=message):
            launch(resources, "r2")
    fakes.persistent.resources[name] = persistent_resource("PROVISIONING")
    with pytest.raises(HardwareError, match="is PROVISIONING, not RUNNING"):
        launch(A100, "r3")
    assert fakes.vertex.received == [] and fakes.builds.requests == []

    fakes.persistent.resources[name] = persistent_resource(autoscale_to=4)
    launch(Resources("a2-highgpu-1g", workers=2), "r4")  # 1 + 2 replicas: the pool grows to 4
    (received,) = fakes.vertex.received
    assert received.custom_job.job_spec.persistent_resource_id == "team-a100s"
