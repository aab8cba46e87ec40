"""Training quota before anything is built: the job's needs per Cloud Quotas metric, the
project's limits read through the real Cloud Quotas client from a local server, a refusal
(exit 2) before any image build or job, and doctor's list."""

from __future__ import annotations

import pytest

from launch.errors import InputError
from launch.stores.gcs.records import upload_records
from launch.targets.vertex import doctor, quota
from launch.targets.vertex.executor import Vertex
from launch.targets.vertex.resources import Resources, Scheduling
from launch.targets.vertex.submit import VertexHandover
from launch.values.jobs import Request
from launch.values.resources import Accelerator
from launch.values.sweep import Sweep
from tests.fakes.cloud import fake_cloud, write_records
from tests.fakes.quotas import DEFAULT_LIMIT, FakeCloudQuotas
from tests.on_vertex import with_vertex
from tests.test_vertex import SETUP, train_custom_job

T4 = "custom_model_training_nvidia_t4_gpus"
SPOT_T4 = "custom_model_training_preemptible_nvidia_t4_gpus"
CPUS = "custom_model_training_cpus"
T4_X4 = Resources("n1-standard-16", Accelerator("NVIDIA_TESLA_T4", 4))


def test_needs_count_every_pool_its_replicas_and_the_capacity_kind():
    distributed = Resources("n1-standard-8", Accelerator("NVIDIA_TESLA_T4", 2), workers=3,
                            reduction_servers=2)
    needed = quota.needs(train_custom_job(SETUP, "r", distributed))
    # chief + 3 workers, 2 T4 and 8 vCPUs each; 2 reducers of n1-highcpu-16
    assert needed.amounts == {T4: 8, CPUS: 4 * 8 + 2 * 16} and not needed.preemptible
    spot = quota.needs(train_custom_job(SETUP, "r", Resources(
        "n1-standard-8", Accelerator("NVIDIA_TESLA_T4", 1), scheduling=Scheduling(
            strategy="SPOT"))), copies=3)
    assert spot.amounts == {SPOT_T4: 3, "custom_model_training_preemptible_cpus": 24}
    tpu = quota.needs(train_custom_job(SETUP, "r", Resources(tpu="v5litepod-16")))
    assert tpu.amounts == {"custom_model_training_tpu_v5e": 16}
    assert quota.needs(train_custom_job(SETUP, "r", Resources(tpu="v3-8"))).amounts == {
        "custom_model_training_tpu_v3": 8}
    unknown = quota.needs(train_custom_job(SETUP, "r", Resources("g2-standard-8")))
    assert unknown.amounts == {"custom_model_training_nvidia_l4_gpus": 1}
    assert unknown.unchecked == ("g2-standard-8 vCPUs",)


def test_limits_read_the_regions_own_value_else_the_default_across_pages():
    with FakeCloudQuotas(page_size=3) as fake:
        fake.set_limit(T4, "us-central1", 2)
        fake.set_limit(T4, "europe-west4", 0)
        found = quota.limits(fake.client(), "p", "us-central1", {T4, CPUS, "not_a_metric"})
        assert found == {T4: 2, CPUS: DEFAULT_LIMIT}
        assert quota.limits(fake.client(), "p", "us-east1", {T4})[T4] == DEFAULT_LIMIT
        assert len(fake.requests) > 3  # paged through every QuotaInfo
        assert fake.requests[0].parent == (
            "projects/p/locations/global/services/aiplatform.googleapis.com")


@pytest.fixture
def fakes(tmp_path):
    with fake_cloud(tmp_path) as services:
        cloud = services.cloud()
        upload_records(cloud, str(write_records(tmp_path / "records")))
        yield services


def test_too_little_quota_is_refused_before_any_build_or_job(fakes):
    fakes.quotas.set_limit(T4, "us-central1", 0)
    with pytest.raises(InputError) as refused:
        Vertex(fakes.cloud()).launch(with_vertex(
            Request.training(None, 100, run_id="t4run"), T4_X4))
    message = str(refused.value)
    assert message.startswith(f"n1-standard-16 with NVIDIA_TESLA_T4:4 x 1 needs 4 {T4} in "
                              "us-central1; the project's limit there is 0: ask for more at "
                              "https://console.cloud.google.com/iam-admin/quotas?project="
                              "pets-detector-dev")
    assert "\n" not in message
    assert not fakes.builds.requests and not fakes.vertex.received


def test_enough_quota_is_submitted(fakes):
    fakes.quotas.set_limit(T4, "us-central1", 4)
    fakes.quotas.set_limit(SPOT_T4, "us-central1", 0)  # not what a standard job uses
    Vertex(fakes.cloud()).launch(with_vertex(Request.training(None, 100, run_id="t4run"), T4_X4))
    assert len(fakes.vertex.received) == 1


def test_spot_counts_against_the_preemptible_quota(fakes):
    fakes.quotas.set_limit(SPOT_T4, "us-central1", 2)
    spot = Resources("n1-standard-16", Accelerator("NVIDIA_TESLA_T4", 4),
                     scheduling=Scheduling(strategy="SPOT"))
    with pytest.raises(InputError, match=f"needs 4 {SPOT_T4} in us-central1; the project's "
                                         r"Spot/Flex-start \(preemptible\) limit there is 2"):
        Vertex(fakes.cloud()).launch(with_vertex(
            Request.training(None, 100, run_id="spotrun"), spot))
    assert not fakes.builds.requests and not fakes.vertex.received


def test_a_sweep_needs_its_parallel_trials_at_once(fakes):
    fakes.quotas.set_limit(T4, "us-central1", 6)
    sweep = Sweep.from_yaml("params: {batch_size: [8, 16]}\nparallel: 2\n")
    with pytest.raises(InputError, match=f"x 2 trials at once needs 8 {T4}"):
        Vertex(fakes.cloud()).tune(with_vertex(
            Request.training(None, 100, run_id="sweep1"), T4_X4), sweep)
    assert not fakes.vertex.tuning.received


def test_unreadable_quota_is_a_note_not_a_failure(fakes, capsys):
    fakes.quotas.deny = True
    Vertex(fakes.cloud(), VertexHandover(dry_run=True)).launch(
        with_vertex(Request.training(None, 100, run_id="t4run"), T4_X4))
    assert ("note: quota not checked: reading them needs cloudquotas.quotas.get on the project "
            "(in roles/cloudquotas.viewer)") in capsys.readouterr().err


def test_a_dry_run_without_credentials_says_it_could_not_check(tmp_path, monkeypatch, capsys):
    from dataclasses import replace

    from launch.context.clients import cloud_quotas

    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "none.json"))
    with fake_cloud(tmp_path) as services:
        cloud = services.cloud()
        cloud = replace(cloud, clients=replace(cloud.clients, quotas=cloud_quotas))
        Vertex(cloud, VertexHandover(dry_run=True)).launch(
            with_vertex(Request.training(None, 100, run_id="t4run"), T4_X4))
    assert "note: quota not checked: no Google credentials" in capsys.readouterr().err


def test_doctor_lists_the_quotas_of_the_hardware_offered_in_the_region():
    with FakeCloudQuotas() as fake:
        fake.set_limit(T4, "europe-west4", 0)
        checks = doctor.check_quotas(fake.client(), "p", "europe-west4")
        lines = {check.detail.split(":")[0]: check.detail for check in checks}
        assert lines["NVIDIA_TESLA_T4"] == (f"NVIDIA_TESLA_T4: {T4} 0, preemptible "
                                            f"{DEFAULT_LIMIT}")
        assert "TPU v5e" in lines and "NVIDIA_L4" in lines
        assert "NVIDIA_H100_MEGA_80GB" in lines  # offered in europe-west4
        assert all(check.ok for check in checks)
        asia = {c.detail.split(":")[0] for c in doctor.check_quotas(fake.client(), "p",
                                                                     "asia-south1")}
        assert "NVIDIA_TESLA_V100" not in asia and "NVIDIA_TESLA_T4" in asia
        fake.deny = True
        (denied,) = doctor.check_quotas(fake.client(), "p", "europe-west4")
        assert denied.warning and "roles/cloudquotas.viewer" in denied.fix
