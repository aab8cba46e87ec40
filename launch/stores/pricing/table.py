"""The pinned price table (prices.yaml): hourly prices by use (training, prediction), region,
kind, name and column, each row with where it was read, when, and whether the Cloud Billing
Catalog API confirmed it; and a price per hour with the parts it adds up from. What a
target's job costs by it lives with the target (a Vertex AI `CustomJob`:
launch/targets/vertex/costs.py), so this table knows no target's catalogue.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import NamedTuple

import yaml

from launch.errors import MissingError
from trainer.common import jsonnum

PRICES_FILE = Path(__file__).with_name("prices.yaml")
HEADER = """\
# Hourly prices of Vertex AI, by use (training; prediction: endpoints and batch jobs) and
# region: per vCPU-hour and per GB-hour of each machine family (cores, ram), per
# accelerator-hour (TPU_V2/TPU_V3: per core), per TPU chip-hour; standard (on demand), spot
# and flex_start where they differ. Every row says where it was read (a Billing Catalog SKU
# id, or a page), when (`read`: the day the price was read from Google; a quote's own date
# when it was read through a quote), and whether the Cloud Billing Catalog API confirmed it:
# estimates built on an unconfirmed row, or on a row read more than 6 months ago, say so.
# Read by launch/stores/pricing; `invoke pricing.refresh` rewrites it from the Billing Catalog
# (confirmed rows) and keeps unconfirmed rows only where no SKU priced them.
"""
USES = ("training", "prediction")
PRICE_KINDS = ("cores", "ram", "accelerators", "tpu_chips")
COLUMNS = ("standard", "spot", "flex_start")
ROW_FIELDS = ("usd", "source", "read", "confirmed")
# A price read longer ago than this is shown as unconfirmed, even if the Billing Catalog gave
# it: Google reprices hardware without notice in the table, and a refresh is one command.
STALE_MONTHS = 6


class PriceMissing(MissingError):
    """The table has no price for a part of the job."""


class Key(NamedTuple):
    """What one price is of: `training us-central1 accelerators NVIDIA_TESLA_T4 spot`."""

    use: str
    region: str
    kind: str  # cores | ram | accelerators | tpu_chips
    name: str  # a machine family, an accelerator type or a TPU generation
    column: str  # standard | spot | flex_start


@dataclasses.dataclass(frozen=True)
class Row:
    """One hourly price and where it came from."""

    usd: float
    source: str  # `SKU <id>` (the Billing Catalog's), or the page it was read from
    read: str  # the date it was read, ISO
    confirmed: bool  # True only for a price the Billing Catalog API gave

    @property
    def origin(self) -> str:
        return f"{self.source}, read {self.read}"

    def stale(self, today: datetime.date) -> bool:
        """Read more than STALE_MONTHS before `today` (an unreadable date counts as old)."""
        try:
            read = datetime.date.fromisoformat(self.read)
        except ValueError:
            return True
        return (today - read).days > STALE_MONTHS * 365 // 12


@dataclasses.dataclass(frozen=True)
class PriceTable:
    currency: str
    rows: Mapping[Key, Row]

    @classmethod
    def load(cls, path: Path | None = None) -> PriceTable:
        """The table in `path` (default: the pinned prices.yaml, looked up at each call)."""
        path = Path(path or PRICES_FILE)
        try:
            data = yaml.safe_load(path.read_text())
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
            raise PriceMissing(f"{path.name} cannot be read as YAML ({str(error)[:200]}): "
                               "restore it from git, or run `invoke pricing.refresh`"
                               ) from None
        if not isinstance(data, dict) or not isinstance(data.get("prices"), dict) or \
                not isinstance(data.get("currency"), str):
            raise PriceMissing(f"{path.name} is not a price table (currency, prices): "
                               "restore it from git, or run `invoke pricing.refresh`")
        rows = {}
        try:
            for use, regions in data["prices"].items():
                for region, kinds in regions.items():
                    for kind, names in kinds.items():
                        for name, columns in names.items():
                            for column, row in columns.items():
                                key = Key(use, region, kind, str(name), column)
                                rows[key] = _row(key, row)
        except AttributeError:  # a level that is not a mapping
            raise PriceMissing(f"{path.name}: prices nest use, region, kind, name, column, "
                               "row; restore it from git, or run `invoke pricing.refresh`"
                               ) from None
        return cls(data["currency"], rows)

    def write(self, path: Path) -> None:
        nested: dict = {}
        for key in sorted(self.rows, key=_order):
            row = self.rows[key]
            *where, column = key
            level = nested
            for part in where:
                level = level.setdefault(part, {})
            level[column] = {"usd": row.usd, "source": row.source, "read": row.read,
                             "confirmed": row.confirmed}
        text = yaml.safe_dump({"currency": self.currency, "prices": nested}, sort_keys=False,
                              width=1000, default_flow_style=None)
        Path(path).write_text(HEADER + text)

    @functools.cached_property
    def _regions(self) -> dict[str, list[str]]:
        return {use: sorted({key.region for key in self.rows if key.use == use})
                for use in USES}

    def regions(self, use: str) -> list[str]:
        return self._regions.get(use, [])

    def price(self, key: Key) -> Row:
        """One hourly price, or PriceMissing naming what is missing and the fix."""
        use, region, kind, name, column = key
        if region not in self.regions(use):
            raise PriceMissing(f"no {use} prices for {region} in prices.yaml: run `invoke "
                               f"pricing.refresh` ({use} regions now: "
                               f"{', '.join(self.regions(use)) or 'none'})")
        row = self.rows.get(key)
        if row is None:
            has = [k.column for k in self.rows if k[:4] == key[:4]]
            if has:
                raise PriceMissing(f"no {column} {use} price for {name} in {region} in "
                                   f"prices.yaml (it has {', '.join(has)})")
            raise PriceMissing(f"no {kind} {use} price for {name} in {region} in "
                               "prices.yaml: run `invoke pricing.refresh`")
        if (usd := jsonnum.number(row.usd)) is None or usd < 0:  # 10**400 too
            raise PriceMissing(f"the {column} {use} price for {name} in {region} in "
                               f"prices.yaml is {row.usd!r}, not a price: run `invoke "
                               "pricing.refresh`")
        return row


def _order(key: Key) -> tuple:
    """The file's order: uses, regions, kinds, names, columns as the tuples above list them."""
    return (USES.index(key.use), key.region, PRICE_KINDS.index(key.kind), key.name,
            COLUMNS.index(key.column))


def _row(key: Key, row: object) -> Row:
    """A row of the file, checked: a hand edit that breaks one is named, not a traceback."""
    if key.use not in USES or key.kind not in PRICE_KINDS or key.column not in COLUMNS or \
            not isinstance(row, dict) or set(row) != set(ROW_FIELDS):
        raise PriceMissing(f"prices.yaml: {' '.join(key)} is not a row of this table (uses "
                           f"{', '.join(USES)}; kinds {', '.join(PRICE_KINDS)}; columns "
                           f"{', '.join(COLUMNS)}; each row {', '.join(ROW_FIELDS)})")
    return Row(row["usd"], str(row["source"]), str(row["read"]), row["confirmed"] is True)


@dataclasses.dataclass(frozen=True)
class Hourly:
    """A price per hour, the parts it adds up from (for people to check), and the prices it
    rests on that the Billing Catalog API did not confirm."""

    total: float
    parts: tuple[str, ...]
    currency: str = "USD"
    unconfirmed: tuple[tuple[str, str], ...] = ()  # (what, where and when it was read)

    @classmethod
    def of(cls, hourlies: Iterable[Hourly], currency: str) -> Hourly:
        """Several prices paid at once (a job's worker pools) as one."""
        hourlies = list(hourlies)
        return cls(sum(h.total for h in hourlies), tuple(p for h in hourlies for p in h.parts),
                   currency, tuple(dict.fromkeys(u for h in hourlies for u in h.unconfirmed)))

    def unconfirmed_lines(self) -> list[str]:
        """What an estimate adds when it rests on unconfirmed prices: one line a source."""
        by_origin: dict[str, list[str]] = {}
        for what, origin in self.unconfirmed:
            by_origin.setdefault(origin, []).append(what)
        return [f"      unconfirmed: {', '.join(whats)} from {origin}; `invoke pricing.refresh` "
                "confirms prices from the Cloud Billing Catalog API"
                for origin, whats in by_origin.items()]


class Bill:
    """Collects the prices one estimate reads, and which of them are unconfirmed."""

    def __init__(self, table: PriceTable, today: datetime.date | None = None) -> None:
        self.table = table
        self.today = today or datetime.date.today()
        self.unconfirmed: list[tuple[str, str]] = []

    def __call__(self, key: Key) -> float:
        row = self.table.price(key)
        why = [*(() if row.confirmed else ("not from the Billing Catalog API",)),
               *((f"over {STALE_MONTHS} months ago",) if row.stale(self.today) else ())]
        if why:  # not given by the Billing Catalog API within the last STALE_MONTHS
            what = {"cores": f"{key.name} vCPUs", "ram": f"{key.name} memory",
                    "tpu_chips": f"TPU {key.name} chips"}.get(key.kind, key.name)
            origin = f"{row.origin}: {' and '.join(why)}"
            note = (what if key.column == "standard" else f"{what} ({key.column})", origin)
            if note not in self.unconfirmed:
                self.unconfirmed.append(note)
        return float(row.usd)

    def hourly(self, total: float, parts: tuple[str, ...]) -> Hourly:
        return Hourly(total, parts, self.table.currency, tuple(self.unconfirmed))
