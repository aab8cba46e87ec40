"""The pinned price table (prices.yaml): hourly prices by region, kind, name and column,
and a price per hour with the parts it adds up from. What a target's job costs by it lives
with the target (a Vertex AI `CustomJob`: launch/vertex/costs.py), so this table knows
no target's catalogue.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from pathlib import Path

import yaml

from launch.errors import MissingError

PRICES_FILE = Path(__file__).with_name("prices.yaml")
HEADER = ("# Hourly prices of Vertex AI custom training, by region: per vCPU-hour and per GB-hour"
          " of\n# each machine family, per accelerator-hour (TPU_V2/TPU_V3: per core), per TPU"
          " chip-hour;\n# standard (on demand), spot and flex_start where they differ. Read by"
          " launch/pricing;\n# rewritten whole by `invoke pricing.refresh`.\n")
PRICE_KINDS = ("cores", "ram", "accelerators", "tpu_chips")


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
