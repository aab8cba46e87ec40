"""The pinned price table (prices.yaml) and what a Vertex AI job costs per hour by it.

Pure: a `CustomJob` (the very spec a dry run prints) and a region in, dollars per hour out,
with the parts that make it up, so every estimate and every "cost so far" is priced from
what is (or was) actually submitted.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from collections.abc import Mapping
from pathlib import Path

import yaml
from google.cloud import aiplatform_v1

from launch.errors import MissingError
from launch.vertex import hardware

PRICES_FILE = Path(__file__).with_name("prices.yaml")
HEADER = ("# Hourly prices of Vertex AI custom training, by region: per vCPU-hour and per GB-hour"
          " of\n# each machine family, per accelerator-hour (TPU_V2/TPU_V3: per core), per TPU"
          " chip-hour;\n# standard (on demand), spot and flex_start where they differ. Read by"
          " launch/pricing;\n# rewritten whole by `invoke pricing.refresh`.\n")
PRICE_KINDS = ("cores", "ram", "accelerators", "tpu_chips")
# A job's scheduling strategy -> the price column it pays.
COLUMNS = {"STANDARD": "standard", "SPOT": "spot", "FLEX_START": "flex_start",
           "ON_DEMAND": "standard", "LOW_COST": "spot", "STRATEGY_UNSPECIFIED": "standard"}


class PriceMissing(MissingError):
    """The table has no price for a part of the job."""


@dataclasses.dataclass(frozen=True)
class PriceTable:
    taken: str  # the date the prices were read
    source: str
    currency: str
    regions: Mapping[str, Mapping[str, Mapping[str, Mapping[str, float]]]]

    @classmethod
    def load(cls, path: Path = PRICES_FILE) -> PriceTable:
        data = yaml.safe_load(Path(path).read_text())
        return cls(str(data["taken"]), data["source"], data["currency"], data["regions"])

    def write(self, path: Path = PRICES_FILE) -> None:
        data = {"taken": self.taken, "source": self.source, "currency": self.currency,
                "regions": {r: {k: dict(sorted(v.items())) for k, v in parts.items()}
                            for r, parts in sorted(self.regions.items())}}
        Path(path).write_text(HEADER + yaml.safe_dump(data, sort_keys=False, width=100,
                                                      default_flow_style=None))

    def price(self, region: str, kind: str, name: str, column: str) -> float:
        """One hourly price, or PriceMissing naming what is missing and the fix."""
        where = f"prices.yaml (taken {self.taken})"
        if region not in self.regions:
            raise PriceMissing(f"no prices for {region} in {where}: run `invoke pricing.refresh`"
                               f" (regions now: {', '.join(sorted(self.regions))})")
        prices = self.regions[region].get(kind, {}).get(name)
        if not prices:
            raise PriceMissing(f"no {kind} price for {name} in {region} in {where}: run "
                               "`invoke pricing.refresh`")
        if column not in prices:
            raise PriceMissing(f"no {column} price for {name} in {region} in {where} (it has "
                               f"{', '.join(prices)})")
        value = float(prices[column])
        if not math.isfinite(value) or value < 0:
            raise PriceMissing(f"the {column} price for {name} in {region} in {where} is "
                               f"{value!r}, not a price: run `invoke pricing.refresh`")
        return value


@dataclasses.dataclass(frozen=True)
class Hourly:
    """A job's price per hour and the parts it adds up from (for people to check)."""

    total: float
    parts: tuple[str, ...]
    currency: str = "USD"

    def times(self, runs: int) -> Hourly:
        """`runs` such jobs (a sweep's trials), as one price to bound and estimate."""
        if runs == 1:
            return self
        return dataclasses.replace(self, total=self.total * runs,
                                   parts=(*self.parts, f"x {runs} trials"))


def pool_hourly(table: PriceTable, region: str, pool: aiplatform_v1.WorkerPoolSpec,
                column: str) -> tuple[float, str]:
    """One worker pool's price per hour: replicas x (machine + accelerators, or TPU chips)."""
    spec = pool.machine_spec
    accelerator = spec.accelerator_type.name if spec.accelerator_count else None
    machine = hardware.Machine(spec.machine_type, accelerator, spec.accelerator_count,
                               spec.tpu_topology or None)
    if machine.machine_type == "cloud-tpu":
        each = table.price(region, "accelerators", accelerator, column) * spec.accelerator_count
        what = f"{accelerator}:{spec.accelerator_count}"
    elif machine.is_tpu:
        chips = hardware.tpu_chips(machine)
        each = table.price(region, "tpu_chips", machine.tpu_generation, column) * chips
        what = f"{machine.machine_type} {machine.tpu_topology} ({chips} chips)"
    else:
        vcpus, memory = hardware.machine_shape(machine.machine_type)
        family = machine.machine_type.split("-", 1)[0]
        each = vcpus * table.price(region, "cores", family, column) + \
            memory * table.price(region, "ram", family, column)
        what = machine.machine_type
        if accelerator:
            each += spec.accelerator_count * table.price(region, "accelerators", accelerator,
                                                         column)
            what += f" + {accelerator}:{spec.accelerator_count}"
    replicas = max(int(pool.replica_count), 1)
    return replicas * each, f"{replicas} x {what} at {each:.4f}/h"


def job_hourly(table: PriceTable, region: str, job: aiplatform_v1.CustomJob) -> Hourly:
    """Every pool of the job at its scheduling strategy's prices."""
    column = COLUMNS[job.job_spec.scheduling.strategy.name]
    priced = [pool_hourly(table, region, pool, column)
              for pool in job.job_spec.worker_pool_specs]
    return Hourly(sum(p for p, _ in priced), tuple(part for _, part in priced), table.currency)


def job_region(job: aiplatform_v1.CustomJob) -> str:
    """`projects/P/locations/REGION/customJobs/ID` -> REGION."""
    return job.name.split("/")[3]


def cost_so_far(table: PriceTable, job: aiplatform_v1.CustomJob,
                now: datetime.datetime) -> str:
    """What a running or finished job has cost: its hourly price x the time it has run
    (from start to end, or to `now`); a job that has not started has cost nothing."""
    try:
        amount = job_cost(table, job, now)
    except PriceMissing as error:
        return f"cost unknown ({str(error).split(':')[0]})"
    spent = f"{amount:.2f} {table.currency}"
    return spent if job.end_time else f"{spent} so far"


def job_cost(table: PriceTable, job: aiplatform_v1.CustomJob,
             now: datetime.datetime) -> float:
    """The amount behind `cost_so_far`; PriceMissing when the table lacks the hardware."""
    if not job.start_time:
        return 0.0
    hours = max(((job.end_time or now) - job.start_time).total_seconds(), 0.0) / 3600
    return job_hourly(table, job_region(job), job).total * hours
