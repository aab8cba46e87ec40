"""A conversion job next to the data (`invoke data.convert --target vertex`), as Vertex AI
sees it: one CPU machine sized for the raw prefix (a pure function of its bytes), running the
trainer image's `data convert-in-bucket`, whose output is a named dataset.

    raw size        machine          boot disk                    timeout
    < 2 GB          n1-standard-4    max(100, 3 x raw + 20) GB    3 x the planned hours,
    < 20 GB         n1-standard-8                                 at least 1 h
    < 200 GB        n1-standard-16
    larger          n1-standard-32

The disk holds the staged raw objects and the records written from them (about the raw size
again: the records keep the JPEG bytes) with room to spare. The planned hours assume
PLANNED_MB_PER_CORE_SECOND of raw data a core (the 1,800-image benchmark converts ~10x that;
README "Measured") plus staging at PLANNED_STAGING_MB_PER_SECOND: a bound for the timeout
and --max-cost, not a promise.
"""

from __future__ import annotations

import dataclasses
import math

from google.cloud import aiplatform_v1

from launch.jobs import TrainerJob
from launch.places import CloudTarget
from launch.resources import Resources, Scheduling
from launch.vertex.hardware import HardwareError, machine_for
from launch.vertex.spec import custom_job

# raw bytes below which each machine is enough, smallest first; beyond the last, the last
SHAPES = ((2 * 10**9, "n1-standard-4"), (20 * 10**9, "n1-standard-8"),
          (200 * 10**9, "n1-standard-16"), (None, "n1-standard-32"))
MIN_DISK_GB, DISK_PER_RAW_GB, SPARE_DISK_GB = 100, 3, 20
MAX_DISK_GB = 65_536  # a pd-ssd boot disk's limit
PLANNED_MB_PER_CORE_SECOND = 5.0
PLANNED_STAGING_MB_PER_SECOND = 50.0
TIMEOUT_FACTOR = 3
CONVERSION_LABELS = {"role": "convert"}


@dataclasses.dataclass(frozen=True)
class Sizing:
    machine_type: str
    cores: int
    disk_gb: int
    timeout_hours: float
    max_raw_bytes: int  # what the job refuses beyond: the disk it was given


def size_for(raw_bytes: int) -> Sizing:
    """The machine, disk and timeout for a raw prefix of `raw_bytes` (the table above)."""
    machine_type = next(name for bound, name in SHAPES if bound is None or raw_bytes < bound)
    cores = int(machine_type.rsplit("-", 1)[1])
    raw_gb = raw_bytes / 10**9
    disk_gb = max(MIN_DISK_GB, math.ceil(DISK_PER_RAW_GB * raw_gb) + SPARE_DISK_GB)
    if disk_gb > MAX_DISK_GB:
        raise HardwareError(f"--data-dir holds {raw_gb:,.0f} GB: more than one machine's "
                            f"disk ({MAX_DISK_GB:,} GB) can convert; split the data into "
                            "several datasets")
    seconds = raw_bytes / 1e6 / PLANNED_STAGING_MB_PER_SECOND + \
        raw_bytes / 1e6 / (PLANNED_MB_PER_CORE_SECOND * cores)
    timeout = max(1.0, math.ceil(TIMEOUT_FACTOR * seconds / 3600))
    # the job may stage what the disk holds beside the records it writes
    max_raw = (disk_gb - SPARE_DISK_GB) * 10**9 // 2
    return Sizing(machine_type, cores, disk_gb, timeout, max(max_raw, raw_bytes))


def conversion_job(job: TrainerJob, sizing: Sizing, target: CloudTarget, dataset_url: str,
                   labels: dict[str, str]) -> aiplatform_v1.CustomJob:
    """The CustomJob: one replica on the sized CPU machine and disk, no TensorBoard, the
    conversion's service account."""
    resources = Resources(machine_type=sizing.machine_type,
                          scheduling=Scheduling(timeout_hours=sizing.timeout_hours))
    machine = machine_for(resources, target.region)
    return custom_job(job, machine, dataclasses.replace(target, tensorboard=None),
                      dataset_url, resources, {**labels, **CONVERSION_LABELS},
                      disk_gb=sizing.disk_gb)
