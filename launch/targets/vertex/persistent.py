"""Jobs on a Vertex AI persistent resource (`--persistent-resource ID`): Vertex runs each of a
job's worker pools on a pool of the resource with the same machine, and no more replicas
than that pool can have. `check_fits` applies that check before the job is sent."""

from __future__ import annotations

from google.api_core import exceptions
from google.cloud import aiplatform_v1

from launch.errors import MissingError
from launch.targets.vertex.hardware import HardwareError


def _shape(spec: aiplatform_v1.MachineSpec) -> tuple[str, str, int, str]:
    accelerator = spec.accelerator_type.name if spec.accelerator_count else ""
    return spec.machine_type, accelerator, int(spec.accelerator_count), spec.tpu_topology


def _describe(shape: tuple[str, str, int, str]) -> str:
    machine, accelerator, count, topology = shape
    return " ".join(filter(None, (machine, f"with {accelerator}:{count}" if accelerator
                                  else "", topology)))


def _capacity(pool: aiplatform_v1.ResourcePool) -> int:
    """The most replicas a resource pool can run: its autoscaling bound, or its size."""
    return max(int(pool.autoscaling_spec.max_replica_count or 0), int(pool.replica_count))


def check_fits(job: aiplatform_v1.CustomJob, resource: aiplatform_v1.PersistentResource
               ) -> None:
    """HardwareError naming the resource's pools unless every worker pool of `job` has a
    running pool of the same machine that holds its replicas."""
    name = resource.name.rsplit("/", 1)[-1]
    if resource.state.name != "RUNNING":
        raise HardwareError(f"persistent resource {name} is {resource.state.name}, not "
                            "RUNNING: wait for it, or drop --persistent-resource")
    offered = {_shape(pool.machine_spec): _capacity(pool) for pool in resource.resource_pools}
    listed = ", ".join(f"{_describe(shape)} x{size}" for shape, size in offered.items())
    wanted: dict[tuple[str, str, int, str], int] = {}
    for index, pool in enumerate(job.job_spec.worker_pool_specs):
        shape = _shape(pool.machine_spec)
        if shape not in offered:
            raise HardwareError(f"persistent resource {name} has no pool of "
                                f"{_describe(shape)} (worker pool {index}); its pools: "
                                f"{listed}. Ask for one of those shapes")
        wanted[shape] = wanted.get(shape, 0) + int(pool.replica_count)
    for shape, replicas in wanted.items():  # pools of one shape share the resource's pool
        if replicas > offered[shape]:
            raise HardwareError(f"the job asks for {replicas} replicas of {_describe(shape)}; "
                                f"persistent resource {name} holds at most {offered[shape]}")


def fetch(client: aiplatform_v1.PersistentResourceServiceClient, project: str, region: str,
          resource_id: str) -> aiplatform_v1.PersistentResource:
    name = f"projects/{project}/locations/{region}/persistentResources/{resource_id}"
    try:
        return client.get_persistent_resource(name=name, timeout=60)
    except exceptions.NotFound:
        raise MissingError(f"no persistent resource {resource_id} in {project}/{region}: "
                           "create it, or check --persistent-resource") from None
