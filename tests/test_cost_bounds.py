"""What a launch may cost: a timeout too short to mean anything is refused and every bound is
priced from the Duration sent; --max-cost bounds a capacity ladder's whole launch, not each
job; --max-preemptions has a maximum."""

from __future__ import annotations

import dataclasses
import datetime

import pytest
from google.cloud import aiplatform_v1

from launch.errors import InputError, StepFailed
from launch.stores.gcs.records import upload_records
from launch.stores.pricing.table import PriceTable
from launch.targets.vertex import costs
from launch.targets.vertex.executor import Vertex
from launch.targets.vertex.jobs import vertex_job
from launch.targets.vertex.ladder import Budget, Ladder, climb, most_jobs, rungs
from launch.targets.vertex.resources import MAX_PREEMPTIONS, Resources, Scheduling
from launch.targets.vertex.submit import VertexHandover
from launch.values import jobfile
from launch.values.jobs import Request
from tests.fakes.cloud import fake_cloud, write_records
from tests.on_vertex import with_vertex

PREEMPTED = (14, "The replica workerpool0-0 was preempted")
A100 = Resources("a2-highgpu-1g")


@pytest.fixture
def fakes(tmp_path):
    with fake_cloud(tmp_path) as services:
        upload_records(services.cloud(), str(write_records(tmp_path / "records")))
        yield services


def hours(value: float) -> Resources:
    return dataclasses.replace(A100, scheduling=Scheduling(timeout_hours=value))


# --- a timeout under a minute; the duration sent is the duration priced ----------------

@pytest.mark.parametrize("flags, file, message", [
    ({"timeout_hours": "1e-300"}, None,
     "--timeout-hours must be at least 1 minute (0.0167 h), got '1e-300'"),
    ({"timeout_hours": "0.0002"}, None,  # 0.72 s: was sent as "0s", Vertex AI's 7 days
     "--timeout-hours must be at least 1 minute (0.0167 h), got '0.0002'"),
    ({}, {"eval": {"timeout-hours": 1e-300}},
     "--timeout-hours (in --job j.yaml) must be at least 1 minute (0.0167 h), got 1e-300"),
    ({"flex_start": True, "max_wait_hours": "1e-300"}, None,
     "--max-wait-hours must be 0 (no limit) or at least 1 minute (0.0167 h), got '1e-300'"),
])
def test_a_time_under_a_minute_is_refused_naming_its_flag(flags, file, message):
    with pytest.raises(jobfile.JobFileError) as refused:
        jobfile.resolve("train", {"target": "vertex", **flags}, file, "--job j.yaml")
    assert str(refused.value) == message
    for name in ("timeout_hours", "max_wait_hours"):  # predict --timeout-hours: the same rule
        with pytest.raises(jobfile.JobFileError, match="at least 1 minute"):
            jobfile.flag_value(name, "1e-300")
    assert jobfile.flag_value("max_wait_hours", "0") == 0  # no limit, as before
    assert jobfile.flag_value("timeout_hours", "0.0167") == 0.0167


def test_the_bound_is_priced_from_the_duration_sent_not_the_number_typed(fakes, capsys):
    typed = 0.123456789  # 444.44 s: the job is sent 444 s
    job = aiplatform_v1.CustomJob.from_json(Vertex(fakes.cloud(), VertexHandover(
        dry_run=True)).launch(with_vertex(
            Request.training(None, 100, run_id="short1"), hours(typed))))
    assert job.job_spec.scheduling.timeout == datetime.timedelta(seconds=444)
    assert costs.timeout_hours(job) == 444 / 3600
    hourly = costs.job_hourly(PriceTable.load(), "us-central1", job).total
    err = capsys.readouterr().err
    assert f"at most {hourly * 444 / 3600:.2f} USD (0.123333 h timeout)" in err
    assert "0.123457" not in err
    # a job sent without a timeout runs for Vertex AI's default, and is priced so
    assert costs.timeout_hours(aiplatform_v1.CustomJob()) == 7 * 24
    assert fakes.vertex.received == []


# --- --max-cost bounds the ladder's climb -------------------------------------------

def ran(hours_run: float, message: tuple[int, str] | None = PREEMPTED
        ) -> aiplatform_v1.CustomJob:
    start = datetime.datetime(2026, 11, 26, tzinfo=datetime.UTC)
    job = aiplatform_v1.CustomJob(
        name="projects/p/locations/us-central1/customJobs/1",
        state="JOB_STATE_FAILED" if message else "JOB_STATE_SUCCEEDED", start_time=start,
        end_time=start + datetime.timedelta(hours=hours_run))
    if message:
        job.error = {"code": message[0], "message": message[1]}
    return job


def test_the_climb_stops_before_a_job_the_rest_of_the_budget_cannot_pay_for():
    ladder = rungs(["us-central1"], ["a2-highgpu-1g"], ["SPOT", "STANDARD"])
    price = {"SPOT": 1.0, "STANDARD": 3.0}  # USD/h; every job's timeout: 2 h

    def cost(rung, job):
        return price[rung.strategy] * costs.hours_counted(job, 2.0)

    budget = Budget(7.0, {rung: price[rung.strategy] * 2 for rung in ladder}, cost)
    tried = []
    with pytest.raises(StepFailed) as stopped:  # each job is preempted after 1.5 h
        climb(ladder, lambda rung, attempt: tried.append(rung.strategy) or ran(1.5),
              max_preemptions=MAX_PREEMPTIONS, say=lambda text: None, budget=budget)
    # 1.5 + 1.5 + 1.5 spent on spot, then 4.5 + 2 (a spot job's bound) = 6.5 <= 7: a fourth;
    # 6 + 2 > 7: no fifth
    assert tried == ["SPOT"] * 4
    assert str(stopped.value).startswith(
        "the ladder stops before a job on SPOT: the 4 jobs it ran cost 6.00 USD, and a job "
        "on SPOT can cost up to 2.00 USD, more than the 1.00 USD left of --max-cost 7 (SPOT: "
        "preempted; ")
    assert budget.spent <= budget.cap
    # run time is counted in whole minutes, up: never under what a job ran
    assert costs.hours_counted(ran(1 / 3600), None) == 1 / 60
    assert costs.hours_counted(aiplatform_v1.CustomJob(), 2.0) == 0  # never started


def test_max_preemptions_has_a_maximum():
    assert MAX_PREEMPTIONS == 10
    with pytest.raises(InputError, match=r"^--max-preemptions must be at most 10, got '11'$"):
        Ladder.from_flag("spot,standard", "11")  # the job file's bound, the one check
    with pytest.raises(jobfile.JobFileError, match=r"^--max-preemptions must be at most 10, "
                                                   r"got '1e9'$"):
        jobfile.resolve("train", {"max_preemptions": "1e9"})
    assert most_jobs(rungs(["r"], ["m"], ["SPOT", "STANDARD"]), 10) == 22


def test_max_cost_bounds_the_whole_launch_against_the_job_service(fakes, capsys):
    """Every job is preempted after an hour (the fake's clock); spot and standard rungs, up to
    10 resubmissions each: 22 jobs could be paid for. The cap holds what they cost."""
    cloud = fakes.cloud()
    request = with_vertex(
        Request.training("pets_retinanet_resnetfpn", 500, run_id="capped1"), hours(2))
    table = PriceTable.load()
    hourly = {strategy: costs.job_hourly(table, "us-central1", vertex_job(
        cloud.setup(), request, "capped1", resources=hours(2).with_strategy(strategy))).total
        for strategy in ("SPOT", "STANDARD")}
    cap = round(2 * hourly["STANDARD"] + 0.5, 1)  # one standard job's bound fits
    fakes.vertex.script = [PREEMPTED] * 30
    ladder = Ladder.from_flag("spot,standard", MAX_PREEMPTIONS)

    Vertex(cloud, VertexHandover(ladder=ladder, max_cost=cap, dry_run=True)).launch(request)
    err = capsys.readouterr().err
    worst = 2 * (hourly["SPOT"] + hourly["STANDARD"]) * (1 + MAX_PREEMPTIONS)
    assert (f"ladder: up to 22 jobs (2 rungs x 1 + 10 resubmissions after preemption), each "
            f"paid for: at most {worst:.2f} USD if every one ran to its timeout") in err
    assert (f"--max-cost {cap:g} bounds the whole launch, not each job: a job "
            f"({2 * hourly['SPOT']:.2f} to {2 * hourly['STANDARD']:.2f} USD at most each) is "
            f"submitted only while the jobs before it left that much of the {cap:g} USD") in err
    assert fakes.vertex.received == []

    with pytest.raises(StepFailed, match=r"^the ladder stops before a job on "):
        Vertex(cloud, VertexHandover(ladder=ladder, max_cost=cap, poll_seconds=0)).launch(request)
    sent = [r.custom_job.job_spec.scheduling.strategy.name for r in fakes.vertex.received]
    assert 1 <= len(sent) < 22
    spent = 0.0
    for strategy in sent:  # each job fitted what the ones before it left
        assert spent + 2 * hourly[strategy] <= cap
        spent += hourly[strategy]  # each ran one hour
    assert spent <= cap
    next_rung = "STANDARD" if sent.count("SPOT") == 1 + MAX_PREEMPTIONS else "SPOT"
    assert spent + 2 * hourly[next_rung] > cap  # the next could have passed the cap
