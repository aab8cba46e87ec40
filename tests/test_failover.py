"""Failover across regions and hardware (`--regions`, `--fallback`): the ladder's rungs and
the locality rule as pure functions, then the run climbing the ladder through the real Vertex
AI client against the fake JobService, which stocks out by region and machine."""

from __future__ import annotations

import dataclasses
import json

import pytest
from google.cloud import aiplatform_v1

from infra import locations
from infra import outputs as stack_outputs
from infra.config import VERTEX_REGIONS
from launch.context.settings import Locations
from launch.errors import InputError
from launch.stores.gcs.records import upload_records
from launch.stores.pricing import table
from launch.stores.pricing.estimate import OverBudget
from launch.stores.pricing.table import PriceMissing
from launch.targets.vertex import costs, hardware
from launch.targets.vertex.executor import Vertex
from launch.targets.vertex.hardware import HardwareError, fallback_resources, machine_for
from launch.targets.vertex.ladder import Ladder, labels, rungs
from launch.targets.vertex.locality import TooFar, refuse_far, tensorboard_in
from launch.targets.vertex.resources import Resources
from launch.targets.vertex.submit import VertexHandover
from launch.values.jobs import Request
from launch.values.resources import Accelerator
from tests.fakes.cloud import OUTPUTS, PROJECT, fake_cloud, write_records
from tests.on_vertex import with_vertex

INSUFFICIENT = (8, "Resources are insufficient in region: us-central1. Please try a different "
                   "region.")  # Vertex AI's words (launch/targets/triage.py's stockout sources)
A100 = Resources("a2-highgpu-1g")
TENSORBOARD = OUTPUTS.tensorboard  # in us-central1


def test_rungs_are_regions_outer_hardware_inner_capacity_innermost():
    ladder = rungs(["us-central1", "us-east1"], ["a2-highgpu-1g", "g2-standard-8"],
                   ["SPOT", "STANDARD"])
    assert [(r.region, r.hardware, r.strategy) for r in ladder][:5] == [
        ("us-central1", "a2-highgpu-1g", "SPOT"), ("us-central1", "a2-highgpu-1g", "STANDARD"),
        ("us-central1", "g2-standard-8", "SPOT"), ("us-central1", "g2-standard-8", "STANDARD"),
        ("us-east1", "a2-highgpu-1g", "SPOT")]
    assert len(ladder) == 8
    named = labels(ladder)
    assert named[ladder[2]] == "us-central1 g2-standard-8 SPOT"
    # what does not vary is not named: a capacity ladder in one place says its capacity
    one_region = rungs(["us-central1"], ["a2-highgpu-1g"], ["SPOT", "STANDARD"])
    assert list(labels(one_region).values()) == ["SPOT", "STANDARD"]
    assert list(labels(rungs(["us-central1", "us-east1"], ["g2-standard-8"], ["SPOT"]))
                .values()) == ["us-central1 SPOT", "us-east1 SPOT"]


def test_the_flags_become_a_ladder_of_regions_and_hardware():
    ladder = Ladder.from_flag("", 2, "SPOT", ("us-central1", "us-east1"), ("g2-standard-8",))
    assert ladder == Ladder(("SPOT",), 2, ("us-central1", "us-east1"), ("g2-standard-8",))
    assert Ladder.from_flag("spot,standard", regions=("us-east1",)).strategies == \
        ("SPOT", "STANDARD")
    for regions, fallback, message in (
            (("us-east1", "us-east1"), (), "--regions names us-east1 twice"),
            ((), ("g2-standard-8", "g2-standard-8"), "--fallback names g2-standard-8 twice"),
            (("mars-north1",), (), "--regions 'mars-north1' is not a Vertex AI training "
                                   "region the catalogue knows"),
            (("US_EAST1",), (), "--regions 'US_EAST1' is not a Google Cloud region name")):
        with pytest.raises(InputError, match=message):
            Ladder.from_flag(None, regions=regions, fallback=fallback)


def test_a_fallback_brings_the_accelerator_its_machine_comes_with():
    primary = Resources("a2-highgpu-1g", workers=1)
    l4 = fallback_resources(primary, "g2-standard-8")
    assert (l4.machine_type, l4.workers, l4.scheduling) == ("g2-standard-8", 1,
                                                            primary.scheduling)
    assert machine_for(l4, "us-east1").accelerator == Accelerator("NVIDIA_L4", 1)
    tpu = fallback_resources(Resources("g2-standard-8"), "ct5lp-hightpu-4t")
    assert machine_for(tpu, "us-central1").tpu_topology == "2x2"  # its single-host slice
    for machine_type, message in (
            ("n1-standard-8", "--fallback n1-standard-8: the accelerator cannot be inferred"),
            ("cloud-tpu", "--fallback cloud-tpu: the accelerator cannot be inferred"),
            ("z9-mega-1", "--fallback z9-mega-1: unknown machine type 'z9-mega-1'")):
        with pytest.raises(HardwareError, match=message):
            fallback_resources(primary, machine_type)


def test_every_region_the_platform_uses_has_a_continent():
    assert set(hardware.regions()) | VERTEX_REGIONS <= set(locations.REGIONS)
    assert set(locations.REGIONS.values()) <= set(locations.CONTINENTS)
    assert locations.bucket_continent("nam4") == locations.bucket_continent("US") == \
        locations.registry_continent("us") == "north-america"
    assert locations.bucket_continent("EUR4") == "europe"
    assert locations.bucket_continent("MARS") is locations.registry_continent("US") is None


def test_a_region_is_offered_only_where_bucket_and_image_are_near():
    regional = Locations("US-CENTRAL1", "us-central1")
    refuse_far(["us-central1", "us-east1", "northamerica-northeast1"], regional, "--regions")
    with pytest.raises(TooFar) as far:
        refuse_far(["us-central1", "europe-west4"], regional, "--regions")
    assert str(far.value) == (
        "--regions europe-west4 is in europe, but the data bucket is in US-CENTRAL1 "
        "(north-america): choose regions in north-america, where the bucket is read without "
        "crossing a continent")
    american = Locations("US", "us")
    refuse_far(["us-central1", "us-east4", "northamerica-northeast1"], american, "--regions")
    refuse_far(["us-west1"], Locations("NAM4", "us"), "--regions")  # its continent
    with pytest.raises(TooFar, match=r"^--regions europe-west4 is in europe, but the data "
                                     r"bucket is in US \(north-america\): choose regions in "
                                     r"north-america"):
        refuse_far(["us-central1", "europe-west4"], american, "--regions")
    with pytest.raises(TooFar, match=r"^--region asia-east1 is in asia, but the image "
                                     r"repository is in us-central1 \(north-america\): choose "
                                     r"a region in north-america"):
        refuse_far(["asia-east1"], Locations("ASIA", "us-central1"), "--region")
    with pytest.raises(TooFar, match=r"southamerica-east1 is in south-america, but the data "
                                     r"bucket is in MARS1 \(a location infra/locations.py does "
                                     r"not know\): name the bucket's location as "
                                     r"infra/locations.py lists it$"):
        refuse_far(["southamerica-east1"], Locations("MARS1", "us"), "--regions")


def test_a_tensorboard_takes_jobs_of_its_region_writing_to_a_regional_bucket_there():
    assert tensorboard_in("us-central1", TENSORBOARD, "US-CENTRAL1") == (TENSORBOARD, "")
    none, why = tensorboard_in("us-east1", TENSORBOARD, "US-CENTRAL1")
    assert none is None and "the TensorBoard is in us-central1" in why
    none, why = tensorboard_in("us-central1", TENSORBOARD, "US")
    assert none is None and "the bucket is in US" in why
    assert tensorboard_in("us-central1", None, "US") == (None, "")


@pytest.fixture
def fakes(tmp_path):
    with fake_cloud(tmp_path) as services:
        upload_records(services.cloud(), str(write_records(tmp_path / "records")))
        yield services


def multi_region(fakes, **fields) -> None:
    """The stack's outputs after a deploy with a US bucket and a us repository."""
    repository = f"us-docker.pkg.dev/{PROJECT}/pets-images"
    stack_outputs.write({"dev": dataclasses.replace(
        OUTPUTS, bucket_location="US", repository_location="us", repository_url=repository,
        image_uri=f"{repository}/trainer:deployed",
        tpu_image_uri=f"{repository}/trainer-tpu:deployed",
        serving_image_uri=f"{repository}/serving:deployed", **fields)},
        fakes.cloud().outputs_path)


def ladder(regions=("us-central1", "us-east1"), fallback=("g2-standard-8",), capacity=None,
           **handover) -> VertexHandover:
    return VertexHandover(ladder=Ladder.from_flag(capacity, 2, "STANDARD", regions, fallback),
                          poll_seconds=0, **handover)


def sent(fakes) -> list[tuple[str, aiplatform_v1.CustomJob]]:
    return [(r.parent.split("/")[3], r.custom_job) for r in fakes.vertex.received]


def test_a_stockout_of_the_first_pair_moves_the_run_to_the_next_pair(fakes, capsys):
    multi_region(fakes)
    fakes.vertex.stockouts[("us-central1", "a2-highgpu-1g")] = INSUFFICIENT
    said = Vertex(fakes.cloud(), ladder()).launch(
        with_vertex(Request.training("pets_retinanet_resnetfpn", 500, run_id="failover1"), A100))
    assert said.split()[1] == "SUCCEEDED" and said.endswith("(run failover1)")
    (first_region, first), (second_region, second) = sent(fakes)
    assert (first_region, second_region) == ("us-central1", "us-central1")  # hardware inner
    (pool,) = second.job_spec.worker_pool_specs
    assert (pool.machine_spec.machine_type, pool.machine_spec.accelerator_type.name,
            pool.machine_spec.accelerator_count) == ("g2-standard-8", "NVIDIA_L4", 1)
    assert [dict(job.labels) for job in (first, second)] == [
        {**job.labels, "region": "us-central1", "machine": machine, "capacity": "standard",
         "attempt": attempt} for job, machine, attempt in
        ((first, "a2-highgpu-1g", "1"), (second, "g2-standard-8", "2"))]
    out = capsys.readouterr().out
    assert "found no capacity on us-central1 a2-highgpu-1g STANDARD (Resources are " \
           "insufficient in region: us-central1" in out
    assert "resubmitting on us-central1 g2-standard-8 STANDARD, resuming from the run's " \
           "checkpoints" in out


def test_a_stockout_of_every_hardware_in_a_region_moves_the_run_to_the_next_region(
        fakes, capsys):
    from tests.test_notify import SUBSCRIPTION, received

    multi_region(fakes)
    fakes.pubsub.subscriber().create_subscription(name=SUBSCRIPTION,
                                                  topic=OUTPUTS.notifications_topic)
    for machine_type in ("a2-highgpu-1g", "g2-standard-8"):
        fakes.vertex.stockouts[("us-central1", machine_type)] = INSUFFICIENT
    Vertex(fakes.cloud(), ladder()).launch(
        with_vertex(Request.training("pets_retinanet_resnetfpn", 500, run_id="failover2"), A100))
    jobs = sent(fakes)
    assert [(region, job.job_spec.worker_pool_specs[0].machine_spec.machine_type)
            for region, job in jobs] == [("us-central1", "a2-highgpu-1g"),
                                         ("us-central1", "g2-standard-8"),
                                         ("us-east1", "a2-highgpu-1g")]
    # one run: the same directory and command in every region, images built once
    assert {job.job_spec.base_output_directory.output_uri_prefix for _, job in jobs} == \
        {"gs://pets-data/runs/failover2"}
    assert len({tuple(job.job_spec.worker_pool_specs[0].container_spec.args)
                for _, job in jobs}) == 1
    assert len(fakes.builds.requests) == 1
    # a US bucket: no Vertex AI TensorBoard can take a job (it reads a regional bucket)
    assert not any(job.job_spec.tensorboard for _, job in jobs)
    assert "note: jobs in us-central1 run without the Vertex AI TensorBoard (the bucket is in " \
           "US" in capsys.readouterr().err
    events = [(body["event"], body["region"]) for body, _ in received(fakes)]
    assert events == [("failed", "us-central1"), ("ladder_step", "us-central1"),
                      ("failed", "us-central1"), ("ladder_step", "us-central1"),
                      ("ended", "us-east1")]


def test_a_writer_of_the_run_in_any_region_of_the_ladder_is_refused(fakes):
    multi_region(fakes)
    name = f"projects/{PROJECT}/locations/us-east1/customJobs/77"
    fakes.vertex.jobs[name] = aiplatform_v1.CustomJob(
        name=name, state=aiplatform_v1.JobState.JOB_STATE_RUNNING,
        labels={"run": "failover3", "role": "train"})
    with pytest.raises(InputError, match=r"--run-id failover3: training job 77 in us-east1 "
                                         r"\(running\) is writing this run's checkpoints"):
        Vertex(fakes.cloud(), ladder()).launch(
            with_vertex(
                Request.training("pets_retinanet_resnetfpn", 500, run_id="failover3"), A100))
    assert fakes.vertex.received == [] and fakes.builds.requests == []


@pytest.fixture
def prices(tmp_path, monkeypatch):
    """The pinned training prices of us-central1, and the same 10 % dearer in us-east1."""
    pinned = table.PriceTable.load()
    rows = dict(pinned.rows)
    for key, row in pinned.rows.items():
        if key.use == "training" and key.region == "us-central1":
            rows[key._replace(region="us-east1")] = dataclasses.replace(row, usd=row.usd * 1.1)
    path = tmp_path / "prices.yaml"
    table.PriceTable(pinned.currency, rows).write(path)
    monkeypatch.setattr(table, "PRICES_FILE", path)
    return table.PriceTable.load()


def dry_run(fakes, regions=("us-central1", "us-east1"), fallback=("g2-standard-8",),
            **handover) -> aiplatform_v1.CustomJob:
    multi_region(fakes)
    return aiplatform_v1.CustomJob.from_json(Vertex(fakes.cloud(), ladder(
        regions, fallback, "spot,standard", dry_run=True, **handover)).launch(
        with_vertex(
            Request.training("pets_retinanet_resnetfpn", 500, run_id="failover4"),
            dataclasses.replace(
                A100, scheduling=dataclasses.replace(A100.scheduling, timeout_hours=10)))))


def test_the_dry_run_prints_every_rung_with_its_price(fakes, prices, capsys):
    shown = dry_run(fakes)
    assert shown.job_spec.scheduling.strategy.name == "SPOT"  # the first rung's job
    err = capsys.readouterr().err
    order = [f"{region} {machine} {strategy}" for region in ("us-central1", "us-east1")
             for machine in ("a2-highgpu-1g", "g2-standard-8") for strategy in ("SPOT", "STANDARD")]
    assert f"ladder (regions, then hardware, then capacity): {' -> '.join(order)}" in err
    for region, machine, strategy in (rung.split() for rung in order):
        job = dry_run_job(region, machine, strategy)
        hourly = costs.job_hourly(prices, region, job).total
        assert (f"{region} {machine} {strategy.lower()} rung: cost: {hourly:.2f} USD/h "
                f"(1 x {machine} + ") in err
        assert f"at {hourly:.4f}/h); at most {hourly * 10:.2f} USD (10 h timeout)" in err
    assert fakes.vertex.received == [] and fakes.builds.requests == []


def dry_run_job(region: str, machine: str, strategy: str) -> aiplatform_v1.CustomJob:
    """A job of one rung's hardware and capacity, as costs price it."""
    resources = Resources(machine).with_strategy(strategy)
    accelerator = machine_for(resources, region).accelerator
    return aiplatform_v1.CustomJob(job_spec={
        "scheduling": {"strategy": strategy},
        "worker_pool_specs": [{"replica_count": 1, "machine_spec": {
            "machine_type": machine, "accelerator_type": accelerator.type,
            "accelerator_count": accelerator.count}}]})


def test_max_cost_is_applied_to_the_dearest_rung(fakes, prices, capsys):
    bounds = {(region, machine): costs.job_hourly(
        prices, region, dry_run_job(region, machine, "STANDARD")).total * 10
        for region in ("us-central1", "us-east1") for machine in ("a2-highgpu-1g",
                                                                   "g2-standard-8")}
    dearest = max(bounds, key=bounds.get)
    assert dearest == ("us-east1", "a2-highgpu-1g")
    with pytest.raises(OverBudget) as over:
        dry_run(fakes, max_cost=round(bounds[dearest] - 1))
    assert str(over.value).startswith(
        f"us-east1 a2-highgpu-1g standard rung: the job can cost up to {bounds[dearest]:.2f} "
        "USD")
    assert fakes.vertex.received == [] and fakes.builds.requests == []
    dry_run(fakes, max_cost=round(bounds[dearest] + 1))  # every rung within budget


def test_a_rung_without_a_price_refuses_max_cost_and_names_the_rung(fakes):
    with pytest.raises(PriceMissing, match=r"^--max-cost cannot be checked: us-east1 "
                                           r"a2-highgpu-1g spot rung: no training prices for "
                                           r"us-east1"):
        dry_run(fakes, max_cost=1000)  # the pinned table prices us-central1 only


def test_a_pair_the_catalogue_does_not_offer_is_skipped_and_none_left_is_refused(
        fakes, capsys):
    job = dry_run(fakes, regions=("us-east4", "us-central1"))
    assert job.job_spec.worker_pool_specs[0].machine_spec.machine_type == "g2-standard-8"
    assert "note: the ladder skips a2-highgpu-1g in us-east4: NVIDIA_TESLA_A100 is not " \
           "offered for training in us-east4" in capsys.readouterr().err
    with pytest.raises(HardwareError, match="no rung of the ladder can run: NVIDIA_TESLA_A100 "
                                            "is not offered for training in us-east4"):
        dry_run(fakes, regions=("us-east4",), fallback=())


def test_a_rung_short_of_quota_is_dropped_and_none_left_is_refused(fakes, capsys):
    for metric in ("nvidia_a100_gpus", "preemptible_nvidia_a100_gpus"):
        fakes.quotas.set_limit(f"custom_model_training_{metric}", "us-central1", 0)
    job = dry_run(fakes)
    assert job.job_spec.worker_pool_specs[0].machine_spec.machine_type == "g2-standard-8"
    err = capsys.readouterr().err
    assert "note: the ladder drops its us-central1 a2-highgpu-1g STANDARD rung: a2-highgpu-1g " \
           "with NVIDIA_TESLA_A100:1 x 1 needs 1 custom_model_training_nvidia_a100_gpus in " \
           "us-central1; the project's limit there is 0" in err
    assert "us-east1 a2-highgpu-1g standard rung: cost:" in err  # another region's quota
    for region in ("us-central1", "us-east1"):
        for metric in ("nvidia_a100_gpus", "preemptible_nvidia_a100_gpus", "nvidia_l4_gpus",
                       "preemptible_nvidia_l4_gpus"):
            fakes.quotas.set_limit(f"custom_model_training_{metric}", region, 0)
    with pytest.raises(InputError, match=r"^no rung of the ladder fits the project's quota: "):
        dry_run(fakes)


def test_a_region_far_from_the_bucket_is_refused_with_the_reason(fakes):
    request = with_vertex(Request.training("pets_retinanet_resnetfpn", 500, run_id="far1"), A100)
    far = ladder(("us-central1", "europe-west4"))
    with pytest.raises(TooFar, match=r"^--regions europe-west4 is in europe, but the data "
                                     r"bucket is in US-CENTRAL1 \(north-america\): choose "
                                     r"regions in north-america"):
        Vertex(fakes.cloud(), far).launch(request)  # the stack's regional bucket
    with pytest.raises(TooFar, match=r"^--region europe-west4 is in europe, but the data "
                                     r"bucket is in US-CENTRAL1"):
        Vertex(fakes.cloud(region="europe-west4")).launch(request)  # one region, one rule
    multi_region(fakes)
    with pytest.raises(TooFar, match=r"^--regions europe-west4 is in europe, but the data "
                                     r"bucket is in US \(north-america\)"):
        Vertex(fakes.cloud(), far).launch(request)
    outputs = fakes.cloud().outputs_path  # a stack deployed before the locations were outputs
    older = {key: value for key, value in OUTPUTS.as_dict().items()
             if key not in ("bucket_location", "repository_location")}
    outputs.write_text(json.dumps({stack_outputs.stack_name("dev"): older}))
    with pytest.raises(TooFar, match=r"^--regions europe-west4 is in europe, but the data "
                                     r"bucket is in us-central1 \(north-america\), taken to be "
                                     r"the environment's region as its location is not known: "
                                     r"choose regions in north-america, where the bucket is read "
                                     r"without crossing a continent, or set "
                                     r"PETS_BUCKET_LOCATION$"):
        Vertex(fakes.cloud(), far).launch(request)
    assert fakes.vertex.received == [] and fakes.builds.requests == []


def test_a_fallback_that_cannot_take_the_job_is_refused_naming_it(fakes):
    with pytest.raises(InputError, match=r"^--fallback a2-highgpu-1g is the job's own "
                                         r"hardware: list only the alternatives$"):
        dry_run(fakes, fallback=("a2-highgpu-1g",))
    multi_region(fakes)
    with pytest.raises(InputError, match=r"^--fallback ct5lp-hightpu-4t: a TPU job is one "
                                         r"slice"):  # the job's workers do not fit a slice
        Vertex(fakes.cloud(), ladder(fallback=("ct5lp-hightpu-4t",), dry_run=True)).launch(
            with_vertex(
                Request.training(None, 100, run_id="tpu1"), dataclasses.replace(A100, workers=1)))
    assert fakes.vertex.received == [] and fakes.builds.requests == []


def test_the_locations_come_from_the_outputs_unless_the_environment_names_them(fakes):
    cloud = fakes.cloud()
    assert cloud.locations() == Locations("US-CENTRAL1", "us-central1")
    named = dataclasses.replace(cloud, environ={"PETS_BUCKET_LOCATION": "NAM4"})
    assert named.locations() == Locations("NAM4", "us-central1")
    with pytest.raises(InputError, match=r"^PETS_REPOSITORY_LOCATION 'US' is not a location "
                                         r"infra/locations.py knows"):
        dataclasses.replace(cloud, environ={"PETS_REPOSITORY_LOCATION": "US"}).locations()
