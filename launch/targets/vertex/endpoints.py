"""Endpoints as data: the machine a deployment asks for (`Serving`), checked before any
request, and its DeployedModel (no API calls here); the traffic splits that move traffic
onto a new version and off an undeployed one are launch/targets/traffic.py's."""

from __future__ import annotations

import dataclasses

from google.cloud import aiplatform_v1

from launch.errors import InputError
from launch.targets.vertex.hardware import Machine, catalogue, resolve_machine
from launch.targets.vertex.spec import machine_spec
from launch.values.resources import Accelerator

DEFAULT_ENDPOINT = "pets-detector"  # display name of the endpoint `deploy` creates
MAX_REPLICAS = 100
# What Vertex AI scales a deployment's replicas on (AutoscalingMetricSpec.metric_name, the
# aiplatform v1 proto's documented values): each replica's CPU use, or its GPU's duty cycle.
CPU_UTILIZATION = "aiplatform.googleapis.com/prediction/online/cpu/utilization"
GPU_DUTY_CYCLE = "aiplatform.googleapis.com/prediction/online/accelerator/duty_cycle"
DEFAULT_UTILIZATION = 60  # "The default value is 60 (representing 60%) if not provided."


@dataclasses.dataclass(frozen=True)
class Serving:
    """What a deployment runs on: checked before any request."""

    machine: Machine
    min_replicas: int = 1
    max_replicas: int = 1
    traffic: int = 100  # percent of the endpoint's requests the new version answers
    target_utilization: int | None = None  # percent; None: Vertex AI's default (60)

    def __post_init__(self) -> None:
        if not 1 <= self.min_replicas <= self.max_replicas <= MAX_REPLICAS:
            raise InputError(f"replicas: need 1 <= --min-replicas ({self.min_replicas}) <= "
                             f"--max-replicas ({self.max_replicas}) <= {MAX_REPLICAS}")
        if not 0 <= self.traffic <= 100:
            raise InputError(f"--traffic is a percentage, 0 to 100, got {self.traffic}")
        if self.target_utilization is not None:
            if not 1 <= self.target_utilization <= 100:
                raise InputError(f"--target-utilization is a percentage, 1 to 100, got "
                                 f"{self.target_utilization}")
            if self.max_replicas == self.min_replicas:
                raise InputError(f"--target-utilization {self.target_utilization}: with "
                                 f"--max-replicas equal to --min-replicas "
                                 f"({self.min_replicas}) there is nothing to scale; raise "
                                 "--max-replicas")

    @property
    def autoscaling_metric(self) -> str:
        return GPU_DUTY_CYCLE if self.machine.accelerator else CPU_UTILIZATION

    def autoscaling(self) -> str:
        """In words, for the dry run and the deployment's line."""
        if self.max_replicas == self.min_replicas:
            return f"{self.min_replicas} replica(s), no autoscaling"
        measure = "GPU duty cycle" if self.machine.accelerator else "CPU utilization"
        utilization = self.target_utilization or DEFAULT_UTILIZATION
        default = "" if self.target_utilization else " (Vertex AI's default)"
        return (f"autoscaling {self.min_replicas} to {self.max_replicas} replicas at "
                f"{utilization}% {measure}{default}")

    @classmethod
    def from_flags(cls, region: str, machine_type: str | None, accelerator: str | None,
                   min_replicas: int, max_replicas: int, traffic: int,
                   target_utilization: int | None = None) -> Serving:
        """The serving machine (by default the catalogue's), checked against `region`."""
        machine_type = machine_type or catalogue()["prediction_containers"]["default_machine"]
        machine = resolve_machine(
            region=region, machine_type=machine_type,
            accelerator=Accelerator.parse(accelerator) if accelerator else None)
        if machine.is_tpu:
            raise InputError(f"--machine-type {machine_type}: endpoints here serve on CPU or "
                             "GPU machines (e.g. n1-standard-4, or g2-standard-4 with "
                             "--accelerator NVIDIA_L4:1)")
        return cls(machine, min_replicas, max_replicas, traffic, target_utilization)


def deployed_model(model_version: str, serving: Serving, service_account: str | None,
                   display_name: str) -> aiplatform_v1.DeployedModel:
    return aiplatform_v1.DeployedModel(
        model=model_version, display_name=display_name,
        service_account=service_account or "",
        dedicated_resources=aiplatform_v1.DedicatedResources(
            machine_spec=machine_spec(serving.machine), min_replica_count=serving.min_replicas,
            max_replica_count=serving.max_replicas,
            autoscaling_metric_specs=[aiplatform_v1.AutoscalingMetricSpec(
                metric_name=serving.autoscaling_metric,
                target=serving.target_utilization)] if serving.target_utilization else []))
