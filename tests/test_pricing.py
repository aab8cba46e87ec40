"""A price before every job: the pinned table's loader, a known table giving known figures,
the estimate from earlier runs' speed, and `--max-cost` refusing before any request."""

from __future__ import annotations

import datetime
import json
import math
import re

import pytest
from google.cloud import aiplatform_v1

from launch.context.places import CloudSetup
from launch.stores.gcs.records import upload_records
from launch.stores.pricing import table as prices
from launch.stores.pricing.estimate import Estimate, OverBudget, Speed, speed_of
from launch.targets.vertex import costs
from launch.targets.vertex.executor import Vertex
from launch.targets.vertex.jobs import vertex_job
from launch.targets.vertex.resources import Resources, Scheduling
from launch.targets.vertex.submit import VertexHandover
from launch.values.jobs import Request
from launch.values.resources import Accelerator
from tests.fakes.cloud import fake_cloud, write_records
from tests.on_vertex import with_vertex

TODAY = datetime.date.today().isoformat()  # a refresh's rows: read today, so current


def rows(nested: dict, use: str = "training", region: str = "us-central1",
         source: str = "SKU 0000-TEST-0001", read: str = TODAY,
         confirmed: bool = True) -> dict[prices.Key, prices.Row]:
    """Rows of a table from {kind: {name: {column: usd}}}, all from one source."""
    return {prices.Key(use, region, kind, name, column): prices.Row(usd, source, read, confirmed)
            for kind, names in nested.items() for name, columns in names.items()
            for column, usd in columns.items()}


TABLE = prices.PriceTable("USD", rows({
    "cores": {"n1": {"standard": 0.04, "spot": 0.01}, "g2": {"standard": 0.03,
                                                            "flex_start": 0.015}},
    "ram": {"n1": {"standard": 0.005, "spot": 0.001}, "g2": {"standard": 0.004,
                                                            "flex_start": 0.002}},
    "accelerators": {"NVIDIA_TESLA_T4": {"standard": 0.4, "spot": 0.1},
                     "NVIDIA_L4": {"standard": 0.6, "flex_start": 0.3},
                     "TPU_V3": {"standard": 1.0}},
    "tpu_chips": {"v5e": {"standard": 1.5, "spot": 0.75}},
}))
SETUP = CloudSetup(project="p", region="us-central1", bucket="b", image="i:1",
                   tpu_image="t:1", service_account="sa@p.iam.gserviceaccount.com")


def hourly(resources: Resources, region: str = "us-central1") -> prices.Hourly:
    job = vertex_job(SETUP, with_vertex(Request.training(None, 100), resources), "run1")
    return costs.job_hourly(TABLE, region, job)


def test_the_pinned_table_loads_and_round_trips_and_every_row_names_its_source(tmp_path):
    pinned = prices.PriceTable.load()
    assert pinned.currency == "USD" and "us-central1" in pinned.regions("training")
    for key, row in pinned.rows.items():
        assert key.use in prices.USES and key.kind in prices.PRICE_KINDS
        assert key.column in prices.COLUMNS and 0 <= row.usd < math.inf
        # a SKU id when the Billing Catalog API gave it, else the page it was read from
        assert re.fullmatch(r"SKU [0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{4}", row.source) if \
            row.confirmed else row.source.startswith("https://cloud.google.com/")
        assert datetime.date.fromisoformat(row.read) <= datetime.date.today()
    pinned.write(tmp_path / "prices.yaml")
    assert prices.PriceTable.load(tmp_path / "prices.yaml") == pinned
    # the H100 at the Vertex AI pricing page's 9.79655057 USD/h (issue 23), not confirmed
    h100 = pinned.price(prices.Key("training", "us-central1", "accelerators",
                                   "NVIDIA_H100_80GB", "standard"))
    assert (h100.usd, h100.read, h100.confirmed) == (9.79655057, "2026-11-24", False)
    assert "vertex-ai/pricing" in h100.source
    # every GPU the catalogue offers has an on-demand training price in us-central1, but
    # those no source gave a figure for (their estimates say `cost: unknown` until
    # `invoke pricing.refresh`)
    from launch.targets.vertex import hardware
    unpriced = set()
    for accelerator, _ in hardware.catalogue()["gpu_machines"].values():
        try:
            assert pinned.price(prices.Key("training", "us-central1", "accelerators",
                                           accelerator, "standard")).usd > 0
        except prices.PriceMissing:
            unpriced.add(accelerator)
    assert unpriced == {"NVIDIA_B200", "NVIDIA_H100_MEGA_80GB",
                        "NVIDIA_H200_141GB", "NVIDIA_RTX_PRO_6000"}


def test_a_known_table_gives_known_figures():
    # n1-standard-8: 8 vCPUs at 0.04 + 30 GB at 0.005 + one T4 at 0.4
    t4 = hourly(Resources("n1-standard-8", Accelerator("NVIDIA_TESLA_T4", 1)))
    assert t4.total == pytest.approx(8 * 0.04 + 30 * 0.005 + 0.4)
    assert t4.parts == ("1 x n1-standard-8 + NVIDIA_TESLA_T4:1 at 0.8700/h",)
    spot = hourly(Resources("n1-standard-8", Accelerator("NVIDIA_TESLA_T4", 1), workers=2,
                            scheduling=Scheduling(strategy="SPOT")))
    assert spot.total == pytest.approx(3 * (8 * 0.01 + 30 * 0.001 + 0.1))
    flex = hourly(Resources("g2-standard-8", scheduling=Scheduling(strategy="FLEX_START")))
    assert flex.total == pytest.approx(8 * 0.015 + 32 * 0.002 + 0.3)
    assert hourly(Resources(tpu="v5litepod-16")).total == pytest.approx(16 * 1.5)
    assert hourly(Resources(tpu="v3-8")).total == pytest.approx(8 * 1.0)
    estimate = Estimate(t4, timeout_hours=10, steps=3600, speed=Speed(0.5, 3))
    assert estimate.bound == pytest.approx(8.7)
    assert estimate.expected == pytest.approx(0.5 * 0.87)  # half an hour
    assert estimate.lines() == [
        "cost: 0.87 USD/h (1 x n1-standard-8 + NVIDIA_TESLA_T4:1 at 0.8700/h); at most 8.70 "
        "USD (10 h timeout)",
        "      expected 0.43 USD: 3600 steps at 0.5 s/step (median of 3 earlier runs on this "
        "hardware)"]


@pytest.mark.parametrize("resources,region,message", [
    (Resources("n1-standard-8"), "europe-west4", "no training prices for europe-west4 in "
     "prices.yaml: run `invoke pricing.refresh` \\(training regions now: us-central1\\)"),
    (Resources("e2-standard-8"), "us-central1", "no cores training price for e2 in "
     "us-central1"),
    (Resources(tpu="v3-8", scheduling=Scheduling(strategy="SPOT")), "us-central1",
     "no spot training price for TPU_V3 in us-central1 in prices.yaml \\(it has standard\\)"),
])
def test_a_missing_price_names_what_and_the_fix(resources, region, message):
    setup = CloudSetup(**{**SETUP.__dict__, "region": region})
    job = vertex_job(setup, with_vertex(Request.training(None, 100), resources), "run1")
    with pytest.raises(prices.PriceMissing, match=message):
        costs.job_hourly(TABLE, region, job)


@pytest.mark.parametrize("value", [math.nan, math.inf, -0.4, "0.4", True, 10 ** 400])
def test_a_price_that_is_not_a_price_is_refused(value):
    broken = prices.PriceTable("USD", rows({"cores": {"n1": {"standard": value}}}))
    with pytest.raises(prices.PriceMissing, match=r"is .*, not a price: run `invoke "
                                                  r"pricing\.refresh`"):
        broken.price(prices.Key("training", "us-central1", "cores", "n1", "standard"))


@pytest.mark.parametrize("text", [
    "the table as it was\n",
    "currency: USD\nprices: {training: [\n",  # a hand edit that is not YAML
    b"\xff\xfe not UTF-8",
    "currency: USD\nprices: {training: {us-central1: {cores: {n1: {standard: 0.04}}}}}\n",
    "currency: USD\nprices: {training: {us-central1: [cores, n1]}}\n",
    "currency: USD\nprices: {renting: {us-central1: {cores: {n1: {standard: {usd: 1, "
    "source: s, read: '2026-11-24', confirmed: true}}}}}}\n",
])
def test_a_broken_table_file_is_named_not_a_traceback(tmp_path, text):
    (tmp_path / "prices.yaml").write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(prices.PriceMissing, match=r"prices\.yaml"):
        prices.PriceTable.load(tmp_path / "prices.yaml")
    with pytest.raises(prices.PriceMissing, match=r"prices\.yaml"):  # missing altogether
        prices.PriceTable.load(tmp_path / "gone" / "prices.yaml")


def test_estimates_built_on_unconfirmed_rows_say_so_and_where_the_price_came_from():
    page = "https://cloud.google.com/vertex-ai/pricing (by hand)"
    mixed = prices.PriceTable("USD", {**TABLE.rows, **rows(
        {"accelerators": {"NVIDIA_TESLA_T4": {"standard": 0.4}}}, source=page,
        read=TODAY, confirmed=False)})
    job = vertex_job(SETUP, with_vertex(Request.training(None, 100), Resources(
        "n1-standard-8", Accelerator("NVIDIA_TESLA_T4", 1))), "run1")
    assert costs.job_hourly(TABLE, "us-central1", job).unconfirmed_lines() == []
    hourly = costs.job_hourly(mixed, "us-central1", job)
    assert hourly.total == pytest.approx(8 * 0.04 + 30 * 0.005 + 0.4)  # the same price...
    assert Estimate(hourly, timeout_hours=10).lines()[-1] == (  # ...said to be unconfirmed
        f"      unconfirmed: NVIDIA_TESLA_T4 from {page}, read {TODAY}: not from the Billing "
        "Catalog API; `invoke pricing.refresh` confirms prices from the Cloud Billing Catalog "
        "API")
    import datetime as dt

    job.name = "projects/p/locations/us-central1/customJobs/7"
    job.start_time = dt.datetime(2026, 11, 22, 10, 0, tzinfo=dt.UTC)
    job.end_time = job.start_time + dt.timedelta(hours=2)
    assert costs.cost_so_far(mixed, job, job.end_time) == "1.74 USD (unconfirmed prices)"
    assert costs.cost_so_far(TABLE, job, job.end_time) == "1.74 USD"


def test_speed_comes_from_matching_finite_measurements_only():
    def run(seconds, experiment="e", hardware="h"):
        return {"experiment": experiment, "hardware": hardware, "seconds_per_step": seconds}

    hostile = [run(math.nan), run(-1.0), run(math.inf), run("0.1"), run(True), run(None),
               "not a dict", run(0.1, experiment="other"), run(0.1, hardware="other"), {}]
    assert speed_of(hostile, "e", "h") is None
    assert speed_of([*hostile, run(0.2), run(0.4), run(9.0)], "e", "h") == Speed(0.4, 3)


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "ten", "1e400"])
def test_max_cost_must_be_an_amount(value):
    from launch.values import jobfile

    with pytest.raises(jobfile.JobFileError, match=r"--max-cost must be (more than 0|a number)"):
        jobfile.resolve("train", {"max_cost": value})


def test_a_sweep_pays_its_parallel_trials_per_hour_and_bounds_all_its_trials():
    trial = prices.Hourly(2.0, ("1 x n1-standard-8 at 2.0000/h",))
    sweep = Estimate(trial, timeout_hours=5, steps=1000, speed=Speed(36.0, 1), runs=12,
                     at_once=3)  # each trial: 10 hours expected, 5 allowed
    assert (sweep.rate, sweep.bound, sweep.expected) == (6.0, 120.0, 240.0)
    assert sweep.lines() == [
        "cost: 6.00 USD/h (3 trials at a time, each 1 x n1-standard-8 at 2.0000/h); at most "
        "120.00 USD (12 trials x 5 h timeout)",
        "      expected 240.00 USD: 12 trials x 1000 steps at 36 s/step (median of 1 earlier "
        "run on this hardware)",
        "      the 5 h timeout ends each trial first, near step 500: raise --timeout-hours"]
    with pytest.raises(OverBudget, match=r"up to 120\.00 USD \(12 trials x 2\.00 USD/h x 5 h "
                                         r"timeout\), over --max-cost 60: lower "
                                         r"--timeout-hours to 2\.50 or less"):
        sweep.refuse_over(60)


def test_over_budget_messages_say_what_would_fit():
    estimate = Estimate(prices.Hourly(2.0, ()), timeout_hours=24, steps=1000,
                        speed=Speed(36.0, 1))  # 10 hours expected, 24 allowed
    with pytest.raises(OverBudget, match=r"up to 48\.00 USD .* lower --timeout-hours to "
                                         r"5\.00 or less"):
        estimate.refuse_over(10)
    estimate.refuse_over(48)
    short = Estimate(prices.Hourly(2.0, ()), timeout_hours=5, steps=1000, speed=Speed(36.0, 1))
    assert short.lines()[-1] == ("      the 5 h timeout ends the job first, near step 500: "
                                 "raise --timeout-hours")
    with pytest.raises(OverBudget, match=r"expected to cost 20\.00 USD, over --max-cost 15"):
        short.refuse_over(15)


@pytest.fixture
def fakes(tmp_path):
    with fake_cloud(tmp_path) as services:
        yield services


def summary(run_id: str, seconds_per_step: float, fakes, hardware: str) -> None:
    fakes.storage.bucket("pets-data").blob(
        f"runs/{run_id}/checkpoints/training_summary.json").upload_from_string(json.dumps({
            "experiment": "pets_retinanet_resnetfpn", "hardware": hardware, "steps": 100,
            "seconds": 100 * seconds_per_step, "seconds_per_step": seconds_per_step}))


T4 = Resources("n1-standard-8", Accelerator("NVIDIA_TESLA_T4", 1),
               scheduling=Scheduling(timeout_hours=2))
T4_KEY = "n1-standard-8 with NVIDIA_TESLA_T4:1 x 1"


def launch(cloud, steps=1000, run_id="new1", budget=None, dry_run=False):
    request = with_vertex(Request.training("pets_retinanet_resnetfpn", steps, run_id=run_id), T4)
    return Vertex(cloud, VertexHandover(max_cost=budget, dry_run=dry_run)).launch(request)


def test_train_prints_the_estimate_from_earlier_runs(fakes, tmp_path, capsys):
    cloud = fakes.cloud()
    upload_records(cloud, str(write_records(tmp_path / "records")))
    job = aiplatform_v1.CustomJob.from_json(launch(cloud, dry_run=True))
    env = {e.name: e.value for e in job.job_spec.worker_pool_specs[0].container_spec.env}
    assert env == {"PETS_HARDWARE": T4_KEY}  # what the trainer records with its speed
    err = capsys.readouterr().err
    assert "USD/h (1 x n1-standard-8 + NVIDIA_TESLA_T4:1 at " in err
    assert "no expected cost: no earlier run of pets_retinanet_resnetfpn on " + T4_KEY in err

    summary("old1", 1.0, fakes, T4_KEY)
    summary("old2", 3.0, fakes, T4_KEY)
    summary("old3", 2.0, fakes, T4_KEY)
    summary("other", 0.01, fakes, "a3-highgpu-8g with NVIDIA_H100_80GB:8 x 1")
    fakes.storage.bucket("pets-data").blob("runs/junk/checkpoints/training_summary.json") \
        .upload_from_string(b"\xff not json")
    huge = json.dumps({"experiment": "pets_retinanet_resnetfpn", "hardware": T4_KEY,
                       "seconds_per_step": 0.001, "padding": "x" * 200_000})
    fakes.storage.bucket("pets-data").blob("runs/huge/checkpoints/training_summary.json") \
        .upload_from_string(huge)  # read only in part, so not JSON: not measured
    launch(cloud)
    err = capsys.readouterr().err
    assert "1000 steps at 2 s/step (median of 3 earlier runs on this hardware)" in err
    assert len(fakes.vertex.received) == 1


def test_max_cost_refuses_before_any_request(fakes, tmp_path):
    cloud = fakes.cloud()
    upload_records(cloud, str(write_records(tmp_path / "records")))
    hourly_price = costs.job_hourly(prices.PriceTable.load(), "us-central1", vertex_job(
        cloud.setup(), with_vertex(
            Request.training("pets_retinanet_resnetfpn", 1000), T4), "x")).total
    with pytest.raises(OverBudget, match="lower --timeout-hours"):  # the bound: 2 h
        launch(cloud, budget=hourly_price * 1.5)
    summary("old1", 36.0, fakes, T4_KEY)  # 1000 steps: 10 hours, over a 2 h timeout's bound
    with pytest.raises(OverBudget, match="expected to cost"):
        launch(cloud, budget=hourly_price * 2.5)
    assert fakes.builds.requests == [] and fakes.vertex.received == []
    launch(cloud, steps=100, budget=hourly_price * 2.5)  # one hour expected: fits
    assert len(fakes.vertex.received) == 1


def geography() -> dict[str, list[str]]:
    """The catalogue's regions as the Billing Catalog groups them in SKU descriptions."""
    from launch.targets.vertex.hardware import regions

    prefixes = {"Americas": ("us-", "northamerica-", "southamerica-"),
                "EMEA": ("europe-", "me-"), "APAC": ("asia-", "australia-")}
    grouped = {where: [r for r in regions() if r.startswith(p)] for where, p in
               prefixes.items()}
    assert sorted(r for members in grouped.values() for r in members) == regions()
    return grouped


def catalogue_skus() -> list:
    """Vertex AI SKUs as the Billing Catalog describes them: training and prediction in every
    geography (each also listing a region the hardware catalogue does not), and others."""
    from tests.fakes.billing import sku

    skus = []
    for where, listed in geography().items():
        listed = [*listed, "mars-north1"]
        skus += [
            sku(f"Custom Training: N1 Predefined Instance Core running in {where}", listed,
                0.036354),
            sku(f"Custom Training: N1 Predefined Instance Ram running in {where}", listed,
                0.004873, unit="GiBy.h"),
            sku(f"Custom Training: Spot Preemptible N1 Predefined Instance Core running in "
                f"{where}", listed, 0.008, "Preemptible"),
            sku(f"Custom Training: Nvidia Tesla T4 GPU running in {where}", listed, 0.4025),
            sku(f"Online Prediction: N1 Predefined Instance Core running in {where}", listed,
                0.0365),
            sku(f"Online Prediction: N1 Predefined Instance Ram running in {where}", listed,
                0.0049, unit="GiBy.h"),
            sku(f"Online Prediction: Nvidia Tesla T4 GPU running in {where}", listed, 0.41),
        ]
    central = ["us-central1"]
    return [
        *skus,
        sku("Custom Training: Nvidia H100 80GB Mega GPU running in Americas", central, 12.0),
        sku("Custom Training: Nvidia H100 80GB GPU running in Americas", central, 9.79655057),
        sku("Custom Training: DWS Flex-start Nvidia H100 80GB GPU running in Americas",
            central, 5.2),
        sku("Custom Training: Nvidia GB200 GPU running in Americas", central, 16.5),
        sku("Custom Training: Nvidia RTX PRO 6000 GPU running in Americas", central, 3.58),
        sku("Custom Training: TPU v5e chip running in Americas", central, 1.38),
        sku("Custom Training: TPU v3 Pod core running in EMEA", ["europe-west4"], 1.15),
        sku("Custom Training: Commitment v1: Nvidia Tesla T4 GPU for 1 year", central, 0.2),
        sku("Custom Training: Nvidia Tesla T4 GPU running in Americas", central, 99.0,
            "Commit1Yr"),
        sku("Vertex AI Pipelines: pipeline run", central, 0.03),
        sku("Training and Online Prediction: both at once", central, 1.0),
    ]


def test_refresh_writes_confirmed_rows_for_every_catalogue_region(tmp_path, prices_today):
    import datetime

    from launch.features.pricing import refresh
    from launch.targets.vertex.hardware import regions
    from tests.fakes.billing import VERTEX, FakeCloudCatalog

    path = tmp_path / "prices.yaml"
    page = "https://cloud.google.com/vertex-ai/pricing (by hand)"
    old = prices.PriceTable("USD", {
        **rows({"accelerators": {"NVIDIA_TESLA_T4": {"standard": 0.35},  # a SKU replaces it
                                 "NVIDIA_B200": {"standard": 14.5}}},  # no SKU: kept
               source=page, read="2026-11-23", confirmed=False),
        **rows({"accelerators": {"NVIDIA_TESLA_P4": {"standard": 0.69}}}),  # gone from the
    })                                                                     # catalogue: dropped
    old.write(path)
    skus = catalogue_skus()
    with FakeCloudCatalog(skus, page_size=10) as catalog:
        said = refresh(catalog.client(), regions(), path, today=datetime.date(2026, 12, 1))
        (request, *more) = catalog.sku_requests
        assert request.parent == VERTEX.name and request.currency_code == "USD"
        assert len(more) == (len(skus) - 1) // 10  # every page read
    table = prices.PriceTable.load(path)
    for region in regions():  # every region the hardware catalogue lists, both uses
        for use, usd in (("training", 0.036354), ("prediction", 0.0365)):
            row = table.price(prices.Key(use, region, "cores", "n1", "standard"))
            assert row.usd == usd and row.confirmed and row.read == "2026-12-01"
            assert re.fullmatch(r"SKU [0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{4}", row.source)
    assert "mars-north1" not in table.regions("training")  # not a catalogue region
    central = {key[2:]: row for key, row in table.rows.items()
               if key[:2] == ("training", "us-central1")}
    assert central["accelerators", "NVIDIA_H100_80GB", "standard"].usd == 9.79655057
    assert central["accelerators", "NVIDIA_H100_80GB", "flex_start"].usd == 5.2
    assert central["accelerators", "NVIDIA_H100_MEGA_80GB", "standard"].usd == 12.0
    assert central["cores", "n1", "spot"].usd == 0.008
    assert central["tpu_chips", "v5e", "standard"].usd == 1.38
    t4 = central["accelerators", "NVIDIA_TESLA_T4", "standard"]
    assert (t4.usd, t4.confirmed) == (0.4025, True)  # not the commitment's, nor the page's
    b200 = central["accelerators", "NVIDIA_B200", "standard"]
    assert (b200.usd, b200.source, b200.read, b200.confirmed) == (14.5, page, "2026-11-23",
                                                                   False)
    assert ("accelerators", "NVIDIA_TESLA_P4", "standard") not in central
    assert table.price(prices.Key("training", "europe-west4", "accelerators", "TPU_V3",
                                  "standard")).usd == 1.15
    assert said == (f"prices.yaml: {len(table.rows) - 1} prices confirmed by "
                    f"{len(skus) - 4} Vertex AI SKUs (read 2026-12-01) in {len(regions())} "
                    f"of {len(regions())} catalogue regions; 1 unconfirmed rows kept where no "
                    "SKU priced them; 4 other SKUs left out")
    # the refreshed table prices a training job and a serving machine
    job = vertex_job(SETUP, with_vertex(Request.training(None, 100), Resources(
        "n1-standard-8", Accelerator("NVIDIA_TESLA_T4", 1))), "run1")
    hourly = costs.job_hourly(table, "us-central1", job)
    assert hourly.total == pytest.approx(8 * 0.036354 + 30 * 0.004873 + 0.4025)
    assert hourly.unconfirmed == ()
    serving = costs.machine_hourly(table, "prediction", "asia-east1", job.job_spec
                                   .worker_pool_specs[0].machine_spec)
    assert serving.total == pytest.approx(8 * 0.0365 + 30 * 0.0049 + 0.41)


def test_a_refresh_names_the_catalogue_regions_no_sku_priced(tmp_path):
    from launch.features.pricing import refresh
    from tests.fakes.billing import FakeCloudCatalog

    with FakeCloudCatalog(catalogue_skus()) as catalog:
        said = refresh(catalog.client(), ["us-central1", "xx-nowhere1"], tmp_path / "p.yaml")
    assert said.endswith("in 1 of 2 catalogue regions; 0 unconfirmed rows kept where no SKU "
                         "priced them; 4 other SKUs left out; no SKU priced xx-nowhere1")


def test_a_refresh_that_recognises_nothing_keeps_the_table(tmp_path):
    from launch.errors import MissingError
    from launch.features.pricing import refresh
    from tests.fakes.billing import FakeCloudCatalog, sku

    path = tmp_path / "prices.yaml"
    path.write_text("the table as it was\n")
    with FakeCloudCatalog([sku("Vertex AI Pipelines: pipeline run", ["us-central1"], 1.0)]
                          ) as fake, \
            pytest.raises(MissingError, match=r"none of the 1 Vertex AI SKUs prices training "
                                              r"or prediction.*prices\.yaml left as it was"):
        refresh(fake.client(), ["us-central1"], path)
    assert path.read_text() == "the table as it was\n"
    assert [p.name for p in tmp_path.iterdir()] == ["prices.yaml"]  # no staging file left


def test_a_refresh_mends_a_table_it_cannot_read(tmp_path):
    """The fix a broken table's message names works: nothing of the old table is kept."""
    from launch.features.pricing import refresh
    from launch.targets.vertex.hardware import regions
    from tests.fakes.billing import FakeCloudCatalog

    path = tmp_path / "prices.yaml"
    path.write_text("currency: USD\nprices: {training: [\n")
    with FakeCloudCatalog(catalogue_skus()) as catalog:
        said = refresh(catalog.client(), regions(), path)
    assert "(the old prices.yaml was unreadable)" in said
    table = prices.PriceTable.load(path)
    assert table.rows and all(row.confirmed for row in table.rows.values())


def test_the_readme_example_estimate_is_what_the_task_prints(fakes, tmp_path, capsys):
    from tests.conftest import REPO

    cloud = fakes.cloud()
    upload_records(cloud, str(write_records(tmp_path / "records")))
    for run_id, seconds in (("old1", 1.0), ("old2", 2.0), ("old3", 3.0)):
        summary(run_id, seconds, fakes, T4_KEY)
    resources = Resources("n1-standard-8", Accelerator("NVIDIA_TESLA_T4", 1),
                          scheduling=Scheduling(timeout_hours=12))
    Vertex(cloud, VertexHandover(dry_run=True)).launch(
        with_vertex(Request.training("pets_retinanet_resnetfpn", 5000, run_id="gpu2"), resources))
    printed = [line for line in capsys.readouterr().err.splitlines()
               if line.lstrip().startswith(("cost:", "expected", "unconfirmed:"))]
    guide = (REPO / "docs" / "guides" / "cost.md").read_text()
    assert len(printed) == 3 and all(f"\n{line}\n" in guide for line in printed), printed


def test_cost_so_far_of_queued_running_and_finished_jobs():
    import datetime

    start = datetime.datetime(2026, 11, 22, 10, 0, tzinfo=datetime.UTC)
    job = vertex_job(SETUP, with_vertex(Request.training(None, 100), Resources(
        "n1-standard-8", Accelerator("NVIDIA_TESLA_T4", 1))), "run1")
    job.name = "projects/p/locations/us-central1/customJobs/7"
    now = start + datetime.timedelta(minutes=30)
    assert costs.cost_so_far(TABLE, job, now) == "0.00 USD so far"  # not started
    job.start_time = start
    assert costs.cost_so_far(TABLE, job, now) == "0.43 USD so far"  # half an hour of 0.87
    job.end_time = start + datetime.timedelta(hours=2)
    assert costs.cost_so_far(TABLE, job, now) == "1.74 USD"  # finished: two hours
    job.name = "projects/p/locations/mars-north1/customJobs/7"
    assert costs.cost_so_far(TABLE, job, now) == "cost unknown (no training prices for " \
        "mars-north1 in prices.yaml)"


def test_no_host_price_is_another_familys_copied_over():
    """Issue 41 item 10: the A3, A4 and A4X hosts' vCPU and memory rows were A2's rates copied
    by hand (A3's host overstated by about half); no page gave them, so the pinned table has
    none and such a job's price is unknown (as their GPUs' are) until a refresh confirms one."""
    pinned = prices.PriceTable.load()
    for key, row in pinned.rows.items():
        if key.kind in ("cores", "ram") and key.name in ("a3", "a4", "a4x"):
            assert row.confirmed, (key, row.source)
    spec = aiplatform_v1.MachineSpec(machine_type="a3-highgpu-8g",
                                     accelerator_type="NVIDIA_H100_80GB", accelerator_count=8)
    with pytest.raises(prices.PriceMissing):
        costs.machine_hourly(pinned, "training", "us-central1", spec)


def test_prices_read_over_six_months_ago_are_unconfirmed_and_say_how_to_confirm_them():
    """The pinned prediction prices every deploy dry run shows were read from
    Google's page in 2022 (through a quote); a Billing Catalog price goes stale too."""
    from launch.targets.vertex.serving import prediction_hourly

    spec = aiplatform_v1.MachineSpec(machine_type="n1-standard-4")
    total, notes = prediction_hourly("us-central1", spec)
    assert total == pytest.approx(4 * 0.03635495 + 15 * 0.0048783)
    (line,) = notes
    assert line.startswith("      unconfirmed: n1 vCPUs, n1 memory from https://cloud.google.com/"
                           "vertex-ai/pricing (prediction, Iowa")
    assert line.endswith(", read 2022-08-20: not from the Billing Catalog API and over "
                         f"{prices.STALE_MONTHS} months ago; `invoke pricing.refresh` confirms "
                         "prices from the Cloud Billing Catalog API")
    key = prices.Key("training", "us-central1", "cores", "n1", "standard")
    table = prices.PriceTable("USD", {key: prices.Row(0.04, "SKU 0000-TEST-0001", "2026-05-01",
                                                      True)})
    for today, said in ((datetime.date(2026, 10, 30), []),
                        (datetime.date(2026, 11, 2), [
                            "      unconfirmed: n1 vCPUs from SKU 0000-TEST-0001, read "
                            "2026-05-01: over 6 months ago; `invoke pricing.refresh` confirms "
                            "prices from the Cloud Billing Catalog API"])):
        bill = prices.Bill(table, today)
        assert bill(key) == 0.04
        assert bill.hourly(0.04, ("n1",)).unconfirmed_lines() == said
