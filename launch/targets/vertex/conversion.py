"""A conversion job next to the data (`invoke data.convert --target vertex`), as Vertex AI
sees it: one CPU machine sized for the raw prefix from its bytes and objects, running the
trainer image's `data convert-in-bucket`, whose output is a named dataset.

    raw size        machine
    < 2 GB          n1-standard-4
    < 20 GB         n1-standard-8
    < 200 GB        n1-standard-16
    larger          n1-standard-32

The boot disk and the planned time come from the capacity model (capacity.py, the measured
conversion speed in capacity.yaml): the disk holds the staged raw objects and the records
written from them, plus its margin, and never less than Vertex AI's default; the timeout
is TIMEOUT_FACTOR times the planned hours, at least an hour: a bound for the job and for
--max-cost, not a promise.
"""

from __future__ import annotations

import dataclasses
import math

from google.cloud import aiplatform_v1

from launch.context.places import CloudSetup
from launch.targets.vertex import capacity
from launch.targets.vertex.hardware import HardwareError, machine_for
from launch.targets.vertex.resources import Resources, Scheduling
from launch.targets.vertex.spec import custom_job
from launch.values.jobs import TrainerJob

# raw bytes below which each machine is enough, smallest first; beyond the last, the last
SHAPES = ((2 * 10**9, "n1-standard-4"), (20 * 10**9, "n1-standard-8"),
          (200 * 10**9, "n1-standard-16"), (None, "n1-standard-32"))
TIMEOUT_FACTOR = 3
CONVERSION_LABELS = {"role": "convert"}


@dataclasses.dataclass(frozen=True)
class Sizing:
    machine_type: str
    cores: int
    disk_gb: int
    timeout_hours: float
    max_raw_bytes: int  # what the job refuses beyond: the disk it was given


def size_for(raw_bytes: int, raw_objects: int) -> Sizing:
    """The machine, disk and timeout for a raw prefix of `raw_bytes` in `raw_objects`."""
    machine_type = next(name for bound, name in SHAPES if bound is None or raw_bytes < bound)
    model = capacity.Capacity.load()
    planned = capacity.plan(raw_objects, raw_bytes, model.machine(machine_type), model.speed,
                            model.storage, model.limits)
    if planned.disk_gb > model.limits.max_disk_gb:
        raise HardwareError(f"--data-dir holds {raw_bytes / 1e9:,.0f} GB: more than one "
                            f"machine's disk ({model.limits.max_disk_gb:,.0f} GB) can convert; "
                            "split the data into several datasets")
    disk_gb = math.ceil(planned.disk_gb)
    timeout = max(1.0, math.ceil(TIMEOUT_FACTOR * planned.hours))
    # the job may stage what the disk holds beside the records it writes, less the margin
    max_raw = int(disk_gb * capacity.GB / (1 + model.limits.disk_margin) /
                  (1 + model.speed.records_per_input_byte))
    return Sizing(machine_type, int(machine_type.rsplit("-", 1)[1]), disk_gb, timeout,
                  max(max_raw, raw_bytes))


def conversion_resources(sizing: Sizing) -> Resources:
    """One replica of the sized machine, on demand, for at most the planned timeout."""
    return Resources(machine_type=sizing.machine_type,
                     scheduling=Scheduling(timeout_hours=sizing.timeout_hours))


def conversion_job(job: TrainerJob, sizing: Sizing, setup: CloudSetup, dataset_url: str,
                   labels: dict[str, str]) -> aiplatform_v1.CustomJob:
    """The CustomJob: one replica on the sized CPU machine and disk, no TensorBoard, the
    conversion's service account."""
    resources = conversion_resources(sizing)
    machine = machine_for(resources, setup.region)
    return custom_job(job, machine, dataclasses.replace(setup, tensorboard=None),
                      dataset_url, resources, {**labels, **CONVERSION_LABELS},
                      disk_gb=sizing.disk_gb)
