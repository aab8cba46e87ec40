"""The catalogue of what Vertex AI trains on (launch/targets/vertex/catalogue.yaml): each rule's
accepted and rejected shapes, as the CustomJob a dry run would print, before any request."""

from __future__ import annotations

import datetime

import pytest
from google.cloud import aiplatform_v1

from launch.context.places import CloudSetup
from launch.errors import InputError
from launch.targets.vertex import hardware
from launch.targets.vertex.jobs import vertex_job
from launch.targets.vertex.resources import Resources, Scheduling
from launch.values.jobs import Request
from launch.values.resources import Accelerator
from tests.on_vertex import with_vertex

SETUP = CloudSetup(
    project="pets-detector-dev", region="us-central1", bucket="pets-data",
    image="us-central1-docker.pkg.dev/p/pets-images/trainer:abc",
    tpu_image="us-central1-docker.pkg.dev/p/pets-images/trainer-tpu:abc",
    service_account="pets-trainer@pets-detector-dev.iam.gserviceaccount.com")


GOOGLE = ("https://cloud.google.com/", "https://docs.cloud.google.com/")  # Google's pages, moved


def job(resources: Resources, region: str = "us-central1") -> aiplatform_v1.CustomJob:
    setup = CloudSetup(**{**SETUP.__dict__, "region": region})
    return vertex_job(setup, with_vertex(Request.training(None, 100), resources), "run1")


def resolved(resources: Resources) -> hardware.Machine:
    return hardware.machine_for(resources, "us-central1")


def test_the_catalogue_says_when_and_where_its_facts_come_from():
    facts = hardware.catalogue()
    taken = datetime.date.fromisoformat(facts["taken"])
    assert datetime.date(2026, 1, 1) <= taken <= datetime.date.today()
    assert all(url.startswith(GOOGLE) for url in facts["sources"].values())
    for machine_type, (accelerator, count) in facts["gpu_machines"].items():
        assert accelerator in aiplatform_v1.AcceleratorType.__members__, machine_type
        assert accelerator in facts["regions"] and count >= 1
    for name in facts["tpu_names"].values():  # every name resolves to a listed shape
        assert name["machine_type"] in {*facts["tpu_machines"], "cloud-tpu"}


def test_every_prebuilt_container_the_catalogue_offers_has_its_dated_end():
    """Each end date comes with its page and the day it was read, and applies to images the
    project offers; every prebuilt prediction container offered has one."""
    from launch.targets.vertex import lifecycle
    from launch.targets.vertex.registry import prediction_image

    endings = lifecycle.endings()
    for ending in endings:
        assert ending.source.startswith("https://") and ending.fix
        assert ending.read >= datetime.date(2026, 11, 24)
        assert isinstance(ending.end_of_availability, datetime.date)
        assert ending.end_of_patch is None or ending.end_of_patch < ending.end_of_availability
    google = [ending for ending in endings if ending.names != ("mkdocs-material",)]
    assert all(e.source.startswith(GOOGLE) for e in google)
    dated = {name for ending in google for name in ending.names}
    containers = hardware.catalogue()["prediction_containers"]
    offered = {containers["image"].format(geo="us", device=device, version=v.replace(".", "-"))
               for v in containers["tensorflow"] for device in ("cpu", "gpu")}
    assert dated == {lifecycle.image_name(image) for image in offered}
    assert lifecycle.image_name(prediction_image("us-central1")) == "tf2-cpu.2-15"
    assert lifecycle.image_name("europe-docker.pkg.dev/p/r/tf2-gpu.2-15@sha256:ab") == \
        "tf2-gpu.2-15"


@pytest.mark.parametrize("region,geo", [("europe-west1", "europe"), ("asia-northeast1", "asia"),
                                        ("australia-southeast1", "asia"), ("me-west1", "asia"),
                                        ("us-central1", "us"),
                                        ("northamerica-northeast1", "us")])
def test_googles_images_come_from_the_regions_multi_region(region, geo):
    assert hardware.multi_region(region) == geo
    assert hardware.reduction_server_image(region).startswith(f"{geo}-docker.pkg.dev/")
    assert hardware.reduction_server_image(region) in hardware.reduction_server_images()


@pytest.mark.parametrize("tpu,machine_type,topology,hosts", [
    ("v5litepod-1", "ct5lp-hightpu-1t", "1x1", 1),
    ("v5litepod-8", "ct5lp-hightpu-8t", "2x4", 1),
    ("v5litepod-16", "ct5lp-hightpu-4t", "4x4", 4),
    ("v5litepod-64", "ct5lp-hightpu-4t", "8x8", 16),
    ("v5litepod-256", "ct5lp-hightpu-4t", "16x16", 64),
    ("v6e-8", "ct6e-standard-8t", "2x4", 1),
    ("v6e-32", "ct6e-standard-4t", "4x8", 8),
])
def test_tpu_slices_single_and_multi_host(tpu, machine_type, topology, hosts):
    machine = resolved(Resources(tpu=tpu))
    assert (machine.machine_type, machine.tpu_topology, machine.hosts) == \
        (machine_type, topology, hosts)
    (pool,) = job(Resources(tpu=tpu)).job_spec.worker_pool_specs
    assert pool.machine_spec == aiplatform_v1.MachineSpec(machine_type=machine_type,
                                                          tpu_topology=topology)
    assert pool.replica_count == 1  # every host of the slice runs this one replica
    assert pool.container_spec.image_uri == SETUP.tpu_image
    # the same slice named by machine type and topology
    assert resolved(Resources(machine_type=machine_type, tpu_topology=topology)) == machine


def test_a_four_chip_host_alone_is_its_single_host_slice():
    assert resolved(Resources("ct5lp-hightpu-4t")).tpu_topology == "2x2"
    assert resolved(Resources("ct5lp-hightpu-4t", tpu_topology="2x4")).hosts == 2


@pytest.mark.parametrize("machine_type,accelerator,count", [
    ("g2-standard-48", "NVIDIA_L4", 4), ("a2-megagpu-16g", "NVIDIA_TESLA_A100", 16),
    ("a2-ultragpu-8g", "NVIDIA_A100_80GB", 8), ("a3-highgpu-2g", "NVIDIA_H100_80GB", 2),
    ("a3-megagpu-8g", "NVIDIA_H100_MEGA_80GB", 8), ("a3-ultragpu-8g", "NVIDIA_H200_141GB", 8),
    ("a4-highgpu-8g", "NVIDIA_B200", 8),
    ("g4-standard-192", "NVIDIA_RTX_PRO_6000", 4),
])
def test_gpu_machine_types_come_with_their_gpus(machine_type, accelerator, count):
    (pool,) = job(Resources(machine_type)).job_spec.worker_pool_specs
    assert (pool.machine_spec.accelerator_type.name, pool.machine_spec.accelerator_count) == \
        (accelerator, count)
    with_count = resolved(Resources(machine_type, Accelerator(accelerator, count)))
    assert with_count.accelerator == Accelerator(accelerator, count)


@pytest.mark.parametrize("make,message", [
    (lambda: Resources(tpu="v5p-8"), "TPU v5p is offered on Cloud TPU VMs and GKE, not for "
                                     "Vertex AI"),
    (lambda: Resources(tpu="v4-32"), "TPU v4 is offered"),
    (lambda: Resources(tpu="v5litepod-12"), "unknown --tpu 'v5litepod-12'"),
    (lambda: Resources(tpu="v5litepod-16", tpu_topology="2x2"), "is topology 4x4, not 2x2"),
    (lambda: Resources("ct6e-standard-8t", tpu_topology="4x4"), "topologies 2x4, not 4x4"),
    (lambda: Resources("a3-highgpu-8g", Accelerator("NVIDIA_H100_80GB", 4)),
     "comes with NVIDIA_H100_80GB:8"),
    (lambda: Resources("g2-standard-24", Accelerator("NVIDIA_L4", 1)), "comes with NVIDIA_L4:2"),
    (lambda: Resources("n1-standard-8", Accelerator("NVIDIA_L4", 1)),
     "own machine types: g2-standard-4"),
    (lambda: Resources("n3-standard-8"), "unknown machine type 'n3-standard-8'"),
    (lambda: Resources("n1-standard-8; rm -rf /"), "unknown machine type"),
    (lambda: Resources(tpu="v5litepod-16", workers=1), "a TPU job is one slice"),
    (lambda: Resources(tpu="v5litepod-16", scheduling=Scheduling(strategy="SPOT")),
     "Spot VMs are not offered for multi-host TPU slices"),
    (lambda: Resources("n1-standard-8", Accelerator("NVIDIA_TESLA_T4", 1),
               scheduling=Scheduling(strategy="FLEX_START")),
     "--flex-start takes jobs on NVIDIA_L4, NVIDIA_TESLA_A100"),
    (lambda: Resources(tpu="v5litepod-4", scheduling=Scheduling(strategy="FLEX_START")),
     "ct5lp-hightpu-4t 2x2 is not one"),
    (lambda: Resources("a2-highgpu-1g", scheduling=Scheduling(timeout_hours=169,
                                                      strategy="FLEX_START")),
     "at most 168 hours"),
    (lambda: Resources("a2-highgpu-1g", workers=1, reduction_servers=1,
               scheduling=Scheduling(strategy="FLEX_START")),
     "same machine in every worker pool"),
])
def test_shapes_vertex_would_refuse_are_refused_first(make, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(")):
        job(make())


@pytest.mark.parametrize("region,resources,message", [
    ("asia-northeast1", Resources(tpu="v5litepod-4"), "TPU v5e is not offered for training "
                                                     "in asia-northeast1"),
    ("asia-south1", Resources(tpu="v6e-4"), "TPU v6e is not offered"),
    ("europe-west1", Resources("a4-highgpu-8g"), "NVIDIA_B200 is not offered"),
])
def test_regions_follow_the_catalogue(region, resources, message):
    with pytest.raises(hardware.HardwareError, match=message):
        job(resources, region)
    assert job(Resources("n2-standard-32"), region)  # CPUs train everywhere


@pytest.mark.parametrize("resources, disk", [
    # issue 41 item 9: the families that take only Hyperdisk, each with its source
    (Resources("a3-ultragpu-8g"), "hyperdisk-balanced"),
    (Resources("a4-highgpu-8g"), "hyperdisk-balanced"),
    (Resources("g4-standard-48"), "hyperdisk-balanced"),
    (Resources(tpu="v6e-8"), "hyperdisk-balanced"),
    (Resources(tpu="v5litepod-8"), ""),  # Vertex AI's default, as Google's own v5e jobs
    (Resources("n1-standard-8", Accelerator("NVIDIA_TESLA_T4", 1)), "pd-ssd"),
    (Resources("a3-highgpu-8g"), "pd-ssd"),
    (Resources("a2-highgpu-1g"), "pd-ssd"),
    (Resources("g2-standard-8"), "pd-ssd"),
    (Resources("e2-standard-8"), "pd-ssd"),
])
def test_each_machine_family_boots_from_a_disk_it_takes(resources, disk):
    (pool,) = job(resources).job_spec.worker_pool_specs
    assert pool.disk_spec.boot_disk_type == disk
    assert pool.disk_spec.boot_disk_size_gb == 100


def test_every_boot_disk_the_catalogue_names_is_a_diskspec_value_of_a_machine_it_offers():
    facts = hardware.catalogue()
    disks = facts["boot_disks"]
    offered = {m.rpartition("-")[0] for m in (*facts["gpu_machines"], *facts["tpu_machines"])}
    # DiskSpec's valid values (its REST reference, read 2026-11-28), or "": Vertex AI's default
    assert disks["default"] == "pd-ssd"
    for family, chosen in disks["families"].items():
        assert family in offered, family
        assert chosen["type"] in ("pd-ssd", "pd-standard", "hyperdisk-balanced", "")
        assert chosen["source"].startswith("https://")


@pytest.mark.parametrize("region, tpu, offered", [
    # issue 41 item 11: Cloud TPU's zone list and Vertex AI's sample, not us-east1/us-east5
    ("us-central1", "v5litepod-8", True), ("us-south1", "v5litepod-8", True),
    ("us-west1", "v5litepod-8", True), ("us-west4", "v5litepod-8", True),
    ("europe-west4", "v5litepod-8", True), ("us-east1", "v5litepod-8", False),
    ("us-east5", "v5litepod-8", False), ("asia-southeast1", "v5litepod-8", False),
])
def test_tpu_v5e_trains_where_its_zones_are(region, tpu, offered):
    if offered:
        assert job(Resources(tpu=tpu), region)
    else:
        with pytest.raises(hardware.NotOffered, match=f"TPU v5e is not offered for training "
                                                      f"in {region}"):
            job(Resources(tpu=tpu), region)


@pytest.mark.parametrize("machine_type, trains", [
    ("n1-standard-1", False), ("n1-standard-2", False), ("n1-standard-4", True),
    ("n2-standard-2", False), ("e2-standard-2", False), ("e2-standard-4", True),
    ("n1-highcpu-8", False), ("n1-highcpu-16", True), ("n1-highmem-2", True),
])
def test_the_smallest_machines_are_refused_for_training_but_serve(machine_type, trains):
    """Issue 41 item 11: "not supported for training: standard: 2 vCPUs; highcpu: 2, 4 and 8
    vCPUs" (configure-compute); an endpoint may still run on them."""
    from launch.targets.vertex.endpoints import Serving

    if trains:
        assert job(Resources(machine_type))
    else:
        with pytest.raises(hardware.HardwareError, match=rf"{machine_type}: Vertex AI custom "
                           r"training takes .* machines of (4|16) vCPUs or more"):
            job(Resources(machine_type))
    assert Serving.from_flags("us-central1", machine_type, None, 1, 1, 100)


def test_v6e_runs_with_a_note_that_tensorflow_is_not_documented_there():
    note = hardware.tensorflow_note(resolved(Resources(tpu="v6e-4")))
    assert note and "TPU v6e for JAX and PyTorch" in note
    assert hardware.tensorflow_note(resolved(Resources(tpu="v5litepod-16"))) \
        is None


def test_flex_start_waits_as_long_as_asked():
    scheduling = Scheduling.from_flags(flex_start=True, timeout_hours="48",
                                       max_wait_hours="6")
    spec = job(Resources("a3-highgpu-8g", scheduling=scheduling)).job_spec
    assert spec.scheduling.strategy == aiplatform_v1.Scheduling.Strategy.FLEX_START
    assert spec.scheduling.max_wait_duration == datetime.timedelta(hours=6)
    assert spec.scheduling.timeout == datetime.timedelta(hours=48)
    forever = Scheduling.from_flags(flex_start=True, max_wait_hours="0")
    waits = aiplatform_v1.Scheduling.pb(
        job(Resources("g2-standard-8", scheduling=forever)).job_spec.scheduling)
    assert waits.HasField("max_wait_duration") and waits.max_wait_duration.seconds == 0
    default = aiplatform_v1.Scheduling.pb(job(Resources("g2-standard-8")).job_spec.scheduling)
    assert not default.HasField("max_wait_duration")  # Vertex's own default: one day


def test_reservations_and_persistent_resources_in_the_job():
    kinds = aiplatform_v1.ReservationAffinity.Type
    named = Scheduling.from_flags(reservation="us-central1-b/a100-pool")
    (pool,) = job(Resources("a2-highgpu-8g", scheduling=named)).job_spec.worker_pool_specs
    assert pool.machine_spec.reservation_affinity == aiplatform_v1.ReservationAffinity(
        reservation_affinity_type=kinds.SPECIFIC_RESERVATION,
        key="compute.googleapis.com/reservation-name",
        values=["projects/pets-detector-dev/zones/us-central1-b/reservations/a100-pool"])
    with pytest.raises(InputError, match="zone europe-west4-a is not in the job's region "
                                         "us-central1"):
        job(Resources("a2-highgpu-8g", scheduling=Scheduling(reservation="europe-west4-a/r")))
    path = "projects/shared-capacity/zones/us-central1-a/reservations/h100s"
    (pool,) = job(Resources("a3-highgpu-8g", scheduling=Scheduling(reservation=path))
                  ).job_spec.worker_pool_specs
    assert list(pool.machine_spec.reservation_affinity.values) == [path]
    (pool,) = job(Resources("a3-highgpu-8g", scheduling=Scheduling(reservation="any"))
                  ).job_spec.worker_pool_specs
    assert pool.machine_spec.reservation_affinity.reservation_affinity_type == \
        kinds.ANY_RESERVATION
    spec = job(Resources("a2-highgpu-1g",
                         scheduling=Scheduling(persistent_resource="team-a100s"))).job_spec
    assert spec.persistent_resource_id == "team-a100s"


@pytest.mark.parametrize("flags,message", [
    ({"max_wait_hours": "2"}, "--max-wait-hours is how long a --flex-start job queues"),
    *(({"flex_start": True, "max_wait_hours": value}, "--max-wait-hours must be 0 \\(no limit\\) "
       f"or at least 1 minute \\(0.0167 h\\), got '{value}'") for value in ("-1", "1e-300")),
    *(({"flex_start": True, "max_wait_hours": value}, "--max-wait-hours must be a number, got "
       f"'{value}'") for value in ("nan", "inf")),  # the one reader's answer for any flag
    ({"spot": True, "reservation": "us-central1-a/r1"}, "not SPOT capacity"),
    ({"reservation": "us-central1-a/r1", "persistent_resource": "p1"}, "exclude each other"),
    ({"reservation": "../../other-project"}, "is not 'any', ZONE/NAME"),
    ({"reservation": "a100-pool"}, "is not 'any', ZONE/NAME"),
    ({"reservation": "projects/pets-1/zones/us-central1-a/reservations/Bad_Name"},
     "is not 'any'"),
    ({"reservation": "projects/pets-1/zones/us-central1-a/r1"}, "is not 'any'"),
    ({"reservation": "us-central1-a/reservations/r1"}, "is not 'any'"),
    ({"persistent_resource": "Team Pool"}, "is not a persistent resource id"),
])
def test_capacity_flags_are_checked_when_parsed(flags, message):
    with pytest.raises(InputError, match=message):
        Scheduling.from_flags(**flags)


ARM = "hosts are Arm, which run only container images built for Arm, and the project builds " \
      "x86-64 images; choose an x86-64 machine, e.g. "


@pytest.mark.parametrize("make,message", [
    (lambda: Resources("a4x-highgpu-4g"), f"a4x-highgpu-4g: A4X (NVIDIA GB200 on NVIDIA Grace "
                                          f"CPUs) {ARM}a4-highgpu-8g (B200)"),
    (lambda: Resources("n1-standard-8", Accelerator("NVIDIA_GB200", 4)), "NVIDIA_GB200: A4X"),
    (lambda: Resources("c4a-standard-8"), f"C4A (Google Axion CPUs) {ARM}n2-standard-8"),
    (lambda: Resources("n4a-standard-16"), "N4A (Google Axion CPUs) hosts are Arm"),
])
def test_arm_hosts_are_refused_naming_why(make, message):
    """An A4X host runs only Arm images, the project builds x86-64 ones."""
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        job(make())
    with pytest.raises(InputError, match="--fallback a4x-highgpu-4g: a4x-highgpu-4g: A4X"):
        hardware.fallback_resources(Resources("g2-standard-8"), "a4x-highgpu-4g")


def test_every_family_offered_has_a_known_cpu_and_arm_ones_are_not_offered():
    """Each Arm series says where that was read; no machine the catalogue offers is in one."""
    facts = hardware.catalogue()
    for series, host in facts["arm_hosts"].items():
        assert host["source"].startswith(GOOGLE) and host["read"] >= "2026-12-02", series
        assert host["what"] and host["instead"]
    offered = [*facts["gpu_machines"], *facts["machine_shapes"], *facts["memory_per_vcpu"],
               *facts["tpu_machines"], *facts["boot_disks"]["families"]]
    assert not [m for m in offered if m.partition("-")[0] in facts["arm_hosts"]]
    arm_gpus = {gpu for host in facts["arm_hosts"].values() for gpu in host["accelerators"]}
    assert not arm_gpus & {*facts["regions"], *facts["scheduling"]["flex_start"]["accelerators"]}


def test_an_a4x_training_job_is_refused_in_one_line_before_anything_is_built(tmp_path):
    """Exit 2, one line naming why, before an image is built or a job submitted."""
    from launch.stores.gcs.records import upload_records
    from launch.targets.vertex.executor import Vertex
    from tests.cli import invoke, refused
    from tests.fakes.cloud import fake_cloud, write_records

    with fake_cloud(tmp_path) as fakes:
        cloud = fakes.cloud()
        upload_records(cloud, str(write_records(tmp_path / "records")))
        with pytest.raises(InputError, match=r"A4X .* hosts are Arm"):
            Vertex(cloud).launch(with_vertex(
                Request.training(None, 100, run_id="a4x"), Resources("a4x-highgpu-4g")))
        assert fakes.builds.requests == [] and fakes.vertex.received == []
    line = refused(invoke("train", "--target=vertex", "--machine-type=a4x-highgpu-4g",
                          "--run-id=a4x", "--dry-run", cwd=tmp_path, env={
                              "PETS_PROJECT": SETUP.project, "PETS_REGION": SETUP.region,
                              "PETS_BUCKET": SETUP.bucket, "PETS_IMAGE": SETUP.image,
                              "PETS_SERVICE_ACCOUNT": SETUP.service_account}))
    assert line.startswith("error: a4x-highgpu-4g: A4X (NVIDIA GB200 on NVIDIA Grace CPUs) "
                           "hosts are Arm"), line
