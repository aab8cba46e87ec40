"""What Vertex AI jobs and machines cost per hour by the pinned price table
(launch/stores/pricing/table.py).

Pure: a `CustomJob` (the very spec a dry run prints), or the `MachineSpec` an endpoint or a
batch prediction job runs on, and a region in, dollars per hour out, with the parts that
make it up, so every estimate and every "cost so far" is priced from what is (or was)
actually submitted.
"""

from __future__ import annotations

import dataclasses
import datetime
import math

from google.cloud import aiplatform_v1

from launch.stores.pricing.table import Bill, Hourly, Key, PriceMissing, PriceTable
from launch.targets.vertex import hardware
from launch.targets.vertex.resources import DEFAULT_TIMEOUT_HOURS
from launch.values.resources import Accelerator

# A job's scheduling strategy -> the price column it pays.
COLUMNS = {"STANDARD": "standard", "SPOT": "spot", "FLEX_START": "flex_start",
           "ON_DEMAND": "standard", "LOW_COST": "spot", "STRATEGY_UNSPECIFIED": "standard"}


def machine_hourly(table: PriceTable, use: str, region: str, spec: aiplatform_v1.MachineSpec,
                   column: str = "standard") -> Hourly:
    """One machine's price per hour for `use` (training, prediction): its vCPUs and memory
    at its family's prices plus its accelerators, or its TPU chips (v2/v3: cores)."""
    bill = Bill(table)
    accelerator = Accelerator(spec.accelerator_type.name, spec.accelerator_count) \
        if spec.accelerator_count else None
    machine = hardware.Machine(spec.machine_type, accelerator, spec.tpu_topology or None)
    if machine.machine_type == "cloud-tpu":
        each = bill(Key(use, region, "accelerators", accelerator.type, column)) * \
            accelerator.count
        what = str(accelerator)
    elif machine.is_tpu:
        chips = hardware.tpu_chips(machine)
        each = bill(Key(use, region, "tpu_chips", machine.tpu_generation, column)) * chips
        what = f"{machine.machine_type} {machine.tpu_topology} ({chips} chips)"
    else:
        vcpus, memory = hardware.machine_shape(machine.machine_type)
        family = machine.machine_type.split("-", 1)[0]
        each = vcpus * bill(Key(use, region, "cores", family, column)) + \
            memory * bill(Key(use, region, "ram", family, column))
        what = machine.machine_type
        if accelerator:
            each += accelerator.count * bill(Key(use, region, "accelerators", accelerator.type,
                                                 column))
            what += f" + {accelerator}"
    return bill.hourly(each, (what,))


def pool_hourly(table: PriceTable, region: str, pool: aiplatform_v1.WorkerPoolSpec,
                column: str) -> Hourly:
    """One worker pool's training price per hour: replicas x its machine."""
    machine = machine_hourly(table, "training", region, pool.machine_spec, column)
    replicas = max(int(pool.replica_count), 1)
    return dataclasses.replace(machine, total=replicas * machine.total, parts=(
        f"{replicas} x {machine.parts[0]} at {machine.total:.4f}/h",))


def job_hourly(table: PriceTable, region: str, job: aiplatform_v1.CustomJob) -> Hourly:
    """Every pool of the job at its scheduling strategy's prices."""
    column = COLUMNS[job.job_spec.scheduling.strategy.name]
    return Hourly.of((pool_hourly(table, region, pool, column)
                      for pool in job.job_spec.worker_pool_specs), table.currency)


def timeout_hours(job: aiplatform_v1.CustomJob) -> float:
    """The running time the job is sent with (its Duration, whole seconds), in hours: what a
    bound is priced by, not the number typed; none, or 0 s, is Vertex AI's default, 7 days
    (launch/targets/vertex/resources.py)."""
    seconds = job.job_spec.scheduling.timeout.total_seconds()
    return seconds / 3600 if seconds > 0 else DEFAULT_TIMEOUT_HOURS


def job_region(job: aiplatform_v1.CustomJob) -> str:
    """`projects/P/locations/REGION/customJobs/ID` -> REGION."""
    return job.name.split("/")[3]


def cost_so_far(table: PriceTable, job: aiplatform_v1.CustomJob,
                now: datetime.datetime) -> str:
    """What a running or finished job has cost: its hourly price x the time it has run
    (from start to end, or to `now`); a job that has not started has cost nothing."""
    try:
        hourly = job_hourly(table, job_region(job), job) if job.start_time else None
    except PriceMissing as error:
        return f"cost unknown ({str(error).split(':')[0]})"
    spent = f"{hourly.total * _hours_run(job, now) if hourly else 0.0:.2f} {table.currency}"
    unconfirmed = " (unconfirmed prices)" if hourly and hourly.unconfirmed else ""
    return (spent if job.end_time else f"{spent} so far") + unconfirmed


def job_cost(table: PriceTable, job: aiplatform_v1.CustomJob,
             now: datetime.datetime) -> float:
    """The amount behind `cost_so_far`; PriceMissing when the table lacks the hardware."""
    if not job.start_time:
        return 0.0
    return job_hourly(table, job_region(job), job).total * _hours_run(job, now)


def hours_counted(job: aiplatform_v1.CustomJob, timeout: float) -> float:
    """The hours an ended job is counted as having run against a budget: start to end,
    rounded up to the whole minute (never under what it ran); none when it never started
    (a stockout before any machine); its whole `timeout` when its end is not known."""
    if not job.start_time:
        return 0.0
    if not job.end_time:
        return timeout
    seconds = max((job.end_time - job.start_time).total_seconds(), 0.0)
    return math.ceil(seconds / 60) / 60


def _hours_run(job: aiplatform_v1.CustomJob, now: datetime.datetime) -> float:
    """From its start to its end, or to `now` while it runs."""
    return max(((job.end_time or now) - job.start_time).total_seconds(), 0.0) / 3600
