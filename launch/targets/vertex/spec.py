"""Pure functions: a TrainerJob plus cloud settings -> the Vertex AI `CustomJob` proto.

Nothing here calls an API, so `--dry-run` prints exactly what would be submitted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import proto
from google.cloud import aiplatform_v1
from google.protobuf import descriptor, duration_pb2

from launch.context.places import CloudSetup, label_value
from launch.targets.vertex.hardware import (
    HardwareError,
    Machine,
    boot_disk_type,
    catalogue,
    reduction_server_image,
    reduction_server_images,
)
from launch.targets.vertex.resources import Resources, reservation_parts, whole_seconds
from launch.values.jobs import TrainerJob

# With Reduction Server, NCCL says in the job's logs whether it loaded Google's plugin
# ("NET/Plugin" lines): the one place to see that the reducers are used.
REDUCTION_SERVER_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}


BOOT_DISK_GB = 100  # a training replica's: the image, a pretrained checkpoint, logs
RESERVATION_KEY = "compute.googleapis.com/reservation-name"


def machine_spec(machine: Machine, reservation: str | None = None,
                  setup: CloudSetup | None = None) -> aiplatform_v1.MachineSpec:
    spec = aiplatform_v1.MachineSpec(machine_type=machine.machine_type)
    if machine.accelerator:
        spec.accelerator_type = aiplatform_v1.AcceleratorType[machine.accelerator.type]
        spec.accelerator_count = machine.accelerator.count
    if machine.tpu_topology:
        spec.tpu_topology = machine.tpu_topology
    if reservation:
        spec.reservation_affinity = _reservation_affinity(reservation, setup.project,
                                                          setup.region)
    return spec


def _reservation_affinity(reservation: str, project: str, region: str
                          ) -> aiplatform_v1.ReservationAffinity:
    """`any`, or one reservation (ZONE/NAME: the job's project's), in the job's region."""
    kinds = aiplatform_v1.ReservationAffinity.Type
    if reservation == "any":
        return aiplatform_v1.ReservationAffinity(reservation_affinity_type=kinds.ANY_RESERVATION)
    parts = reservation_parts(reservation)  # checked when the Scheduling was made
    if not parts["zone"].startswith(f"{region}-"):
        raise HardwareError(f"--reservation {reservation}: zone {parts['zone']} is not in the "
                            f"job's region {region}")
    path = f"projects/{parts.groupdict().get('project') or project}/zones/{parts['zone']}/" \
        f"reservations/{parts['name']}"
    return aiplatform_v1.ReservationAffinity(
        reservation_affinity_type=kinds.SPECIFIC_RESERVATION, key=RESERVATION_KEY,
        values=[path])


def _scheduling(scheduling) -> aiplatform_v1.Scheduling:
    spec = aiplatform_v1.Scheduling(
        timeout=_hours(scheduling.timeout_hours),
        restart_job_on_worker_restart=scheduling.restart_job_on_worker_restart,
        strategy=aiplatform_v1.Scheduling.Strategy[scheduling.strategy])
    if scheduling.max_wait_hours is not None:
        spec.max_wait_duration = _hours(scheduling.max_wait_hours)
    return spec


def _hours(hours: float) -> duration_pb2.Duration:
    """A time in hours as the Duration sent; what is priced (costs.timeout_hours)."""
    return duration_pb2.Duration(seconds=whole_seconds(hours))


def custom_job(job: TrainerJob, machine: Machine, setup: CloudSetup, output_dir: str,
               resources: Resources, labels: Mapping[str, str] | None = None,
               web_access: bool = False, disk_gb: int = BOOT_DISK_GB
               ) -> aiplatform_v1.CustomJob:
    """One worker pool per job pool, all on `machine`; Reduction Server pools if asked;
    `web_access`: an interactive shell into each replica (the job's web_access_uris);
    `disk_gb`: each replica's boot disk (a conversion's holds its raw data)."""
    args = list(job.args)
    if machine.is_tpu and not any(a.startswith("--tpu") for a in args):
        args.append("--tpu=local")  # the TPU is attached to the VM the trainer runs on
    env = {**job.env, **(REDUCTION_SERVER_ENV if resources.reduction_servers else {})}
    pools = [
        aiplatform_v1.WorkerPoolSpec(
            machine_spec=machine_spec(machine, resources.scheduling.reservation, setup),
            replica_count=pool.replica_count,
            disk_spec=aiplatform_v1.DiskSpec(
                boot_disk_type=boot_disk_type(machine.machine_type),
                boot_disk_size_gb=disk_gb),
            container_spec=aiplatform_v1.ContainerSpec(
                image_uri=setup.tpu_image if machine.is_tpu else setup.image,
                args=args,
                env=[aiplatform_v1.EnvVar(name=k, value=v) for k, v in sorted(env.items())],
            ),
        )
        for pool in job.pools
    ]
    if resources.reduction_servers:
        reducers = catalogue()["reduction_server"]
        pools.append(aiplatform_v1.WorkerPoolSpec(
            machine_spec=aiplatform_v1.MachineSpec(machine_type=reducers["machine"]),
            replica_count=resources.reduction_servers,
            container_spec=aiplatform_v1.ContainerSpec(
                image_uri=reduction_server_image(setup.region))))
    spec = aiplatform_v1.CustomJobSpec(
        worker_pool_specs=pools,
        service_account=setup.service_account,
        base_output_directory=aiplatform_v1.GcsDestination(output_uri_prefix=output_dir),
        scheduling=_scheduling(resources.scheduling),
        persistent_resource_id=resources.scheduling.persistent_resource or "",
        enable_web_access=web_access,
    )
    if setup.tensorboard:
        spec.tensorboard = setup.tensorboard
    return aiplatform_v1.CustomJob(
        display_name=job.name,
        labels={k: label_value(v) for k, v in (labels or {}).items()},
        job_spec=spec,
    )


def trainer_images(job: aiplatform_v1.CustomJob) -> list[str]:
    """The images of the job's own containers (Google's Reduction Server is not ours)."""
    return sorted({pool.container_spec.image_uri for pool in job.job_spec.worker_pool_specs}
                  - reduction_server_images())


def pin_images(job: aiplatform_v1.CustomJob, pins: Mapping[str, str]
               ) -> aiplatform_v1.CustomJob:
    """A copy of `job` whose containers run `pins[image]` (the image by digest) instead."""
    pinned = aiplatform_v1.CustomJob.deserialize(aiplatform_v1.CustomJob.serialize(job))
    for pool in pinned.job_spec.worker_pool_specs:
        image = pool.container_spec.image_uri
        pool.container_spec.image_uri = pins.get(image, image)
    return pinned


def to_json(custom_job_proto: aiplatform_v1.CustomJob) -> str:
    """The REST form, as `--dry-run` prints it (and `CustomJob.from_json` reads it back)."""
    return rest_json(custom_job_proto, use_integers_for_enums=False,
                     always_print_fields_with_no_presence=False)


def rest_json(message: proto.Message, **options: Any) -> str:
    """`message` in its REST form (proto-plus's `to_json` with `options`), each map's entries
    in key order: the protobuf runtime keeps a map in hash order, which differs from one
    process to the next, and a dry run should print the same bytes every time."""
    text = type(message).to_json(message, indent=2, **options)
    return json.dumps(_maps_in_order(json.loads(text), type(message).pb().DESCRIPTOR), indent=2)


def _maps_in_order(value: object, kind: descriptor.Descriptor) -> object:
    """The JSON form of a `kind` message with its maps' keys sorted, recursively; the field
    order, and the JSON forms of Google's own types (a Duration is a string), as they are."""
    if not isinstance(value, dict) or kind.full_name.startswith("google.protobuf."):
        return value
    for field in kind.fields:
        if field.json_name not in value or field.message_type is None:
            continue
        found, entry = value[field.json_name], field.message_type
        if entry.GetOptions().map_entry:
            inner = entry.fields_by_name["value"].message_type
            value[field.json_name] = {key: _maps_in_order(found[key], inner) if inner else
                                      found[key] for key in sorted(found)}
        elif isinstance(found, list):
            value[field.json_name] = [_maps_in_order(item, entry) for item in found]
        else:
            value[field.json_name] = _maps_in_order(found, entry)
    return value


def job_id(job_name: str) -> str:
    """`projects/P/locations/R/customJobs/123` -> `123`, the id the console shows."""
    return job_name.rsplit("/", 1)[-1]


def console_url(job_name: str) -> str:
    """The Cloud console page of a custom job (projects/P/locations/R/customJobs/ID)."""
    _, project, _, region, _, number = job_name.split("/")
    return (f"https://console.cloud.google.com/vertex-ai/locations/{region}/training/{number}"
            f"?project={project}")


def tensorboard_url(job: aiplatform_v1.CustomJob) -> str | None:
    """The Vertex AI TensorBoard experiment a job streams to: Vertex names it after the job id."""
    tensorboard = job.job_spec.tensorboard
    if not tensorboard:
        return None
    region = tensorboard.split("/")[3]
    experiment = f"{tensorboard}/experiments/{job_id(job.name)}"
    return (f"https://{region}.tensorboard.googleusercontent.com/experiment/"
            f"{experiment.replace('/', '+')}")
