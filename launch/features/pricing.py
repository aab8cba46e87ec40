"""`invoke pricing.refresh`: rebuilds prices.yaml from the Cloud Billing Catalog API's SKUs
for Vertex AI, through its client library (google-cloud-billing).

Each training or prediction SKU is one price: a family's vCPU-hour or GB-hour, an
accelerator-hour, a TPU chip-hour (or v2/v3 core-hour), on demand, Spot or Flex-start, in
the regions it lists. `classify` reads that from the SKU's description and usage type; SKUs
it does not recognise (pipelines, commitments, storage, ...) are counted and left out. Every
row it writes names its SKU and the date and is marked confirmed; the table's unconfirmed
rows (read from a page) stay only where no SKU priced the same thing. A refresh that
recognises nothing leaves the table as it was.
"""

from __future__ import annotations

import datetime
import math
import os
import re
import tempfile
from collections.abc import Collection, Iterable
from pathlib import Path

from google.cloud import billing_v1

from launch import targets
from launch.context.cloud import Cloud
from launch.errors import MissingError
from launch.stores.pricing.table import PRICES_FILE, Key, PriceMissing, PriceTable, Row
from launch.targets.base import HARDWARE

# Vertex AI's service in the Billing Catalog, by id rather than display name: the product
# was renamed Gemini Enterprise Agent Platform in April 2026, and a display name may follow a
# rename; public code of August-October 2026 still lists Vertex AI's SKUs under this id.
SERVICE_ID = "C7E2-9256-1C43"
USAGE_COLUMNS = {"OnDemand": "standard", "Preemptible": "spot"}
USES = (("training", re.compile(r"\btraining\b", re.IGNORECASE)),
        ("prediction", re.compile(r"\b(prediction|inference)\b", re.IGNORECASE)))
NOT_PRICES = re.compile(r"pipeline|commit|reserv|storage", re.IGNORECASE)
FLEX = re.compile(r"flex[- ]?start|\bDWS\b|dynamic workload scheduler", re.IGNORECASE)
SPOT = re.compile(r"\b(spot|preemptible)\b", re.IGNORECASE)
GPU = re.compile(r"\bNvidia (?P<name>[\w ]+?) GPU\b", re.IGNORECASE)
TPU = re.compile(r"\bTPU[ -]?(?P<generation>v\d+[a-z]*)\b.*\b(?P<unit>chip|core)s?\b",
                 re.IGNORECASE)
FAMILY = re.compile(r"\b(?P<family>[ACEGMN]\d+[A-Z]?)\b.*\b(?P<part>Core|vCPU|Ram|Memory)\b",
                    re.IGNORECASE)
# GPU names as SKUs spell them -> accelerator types; tried in order (GB200 before B200).
GPU_NAMES = (("RTX PRO 6000", "NVIDIA_RTX_PRO_6000"), ("GB200", "NVIDIA_GB200"),
             ("B200", "NVIDIA_B200"), ("H200", "NVIDIA_H200_141GB"),
             ("H100 MEGA", "NVIDIA_H100_MEGA_80GB"), ("H100", "NVIDIA_H100_80GB"),
             ("A100 80GB", "NVIDIA_A100_80GB"), ("A100", "NVIDIA_TESLA_A100"),
             ("L4", "NVIDIA_L4"), ("T4", "NVIDIA_TESLA_T4"), ("V100", "NVIDIA_TESLA_V100"),
             ("P100", "NVIDIA_TESLA_P100"), ("P4", "NVIDIA_TESLA_P4"))


def _accelerator(gpu_name: str) -> str | None:
    words = " ".join(gpu_name.upper().replace("TESLA", " ").split())
    for spelt, accelerator in GPU_NAMES:
        if all(re.search(rf"\b{word}\b", words) for word in spelt.split()):
            return accelerator
    return None


def _part(description: str) -> tuple[str, str] | None:
    """(kind, name) of what a SKU prices, or None."""
    if gpu := GPU.search(description):
        accelerator = _accelerator(gpu["name"])
        return ("accelerators", accelerator) if accelerator else None
    if tpu := TPU.search(description):
        generation = tpu["generation"].lower()
        if tpu["unit"].lower() == "core":
            return "accelerators", f"TPU_{generation.upper()}"
        return "tpu_chips", generation
    if family := FAMILY.search(description):
        kind = "cores" if family["part"].lower() in ("core", "vcpu") else "ram"
        return kind, family["family"].lower()
    return None


def _use(description: str) -> str | None:
    """training or prediction: the one the description names (neither, or both: None)."""
    named = [use for use, words in USES if words.search(description)]
    return named[0] if len(named) == 1 and not NOT_PRICES.search(description) else None


def _hourly(sku: billing_v1.Sku) -> float | None:
    """The first tier's unit price per hour (per GiB-hour for memory), if it is a price."""
    for info in sku.pricing_info[:1]:
        expression = info.pricing_expression
        if expression.usage_unit not in ("h", "GiBy.h"):
            return None
        for rate in sorted(expression.tiered_rates, key=lambda r: r.start_usage_amount)[:1]:
            value = rate.unit_price.units + rate.unit_price.nanos / 1e9
            return value if math.isfinite(value) and value >= 0 else None
    return None


def sku_id(sku: billing_v1.Sku) -> str:
    return sku.sku_id or sku.name.rsplit("/", 1)[-1]


def classify(sku: billing_v1.Sku, read: str) -> list[tuple[Key, Row]]:
    """The prices one SKU gives (one a region), or [] for a SKU that is not a price here."""
    description = sku.description
    use = _use(description)
    if FLEX.search(description):
        column = "flex_start"
    elif SPOT.search(description):
        column = "spot"
    else:
        column = USAGE_COLUMNS.get(sku.category.usage_type)
    part, hourly = _part(description), _hourly(sku)
    if use is None or column is None or part is None or hourly is None:
        return []
    row = Row(hourly, f"SKU {sku_id(sku)}", read, True)
    return [(Key(use, region, *part, column), row) for region in sku.service_regions]


def confirmed_rows(skus: Iterable[billing_v1.Sku], regions: Collection[str], read: str
                   ) -> tuple[dict[Key, Row], int, int]:
    """(the rows for `regions`, SKUs used, SKUs ignored). The first price for a key wins."""
    rows: dict[Key, Row] = {}
    used = ignored = 0
    for sku in skus:  # listed in the currency the request names
        prices = classify(sku, read)
        used, ignored = (used + 1, ignored) if prices else (used, ignored + 1)
        for key, row in prices:
            if key.region in regions:
                rows.setdefault(key, row)
    return rows, used, ignored


def refresh(client: billing_v1.CloudCatalogClient, regions: Collection[str] | None = None,
            path: Path = PRICES_FILE, today: datetime.date | None = None) -> str:
    """Rewrites `path` (atomically) with the catalogue's prices for `regions` (by default the
    regions the hardware catalogue lists: `base.HARDWARE`'s, through the registry) and the old
    table's unconfirmed rows that no SKU replaced; says what it found, and which regions no
    SKU priced."""
    if regions is None:
        regions = targets.first(HARDWARE, Cloud()).regions()
    read = (today or datetime.date.today()).isoformat()
    skus = client.list_skus(request=billing_v1.ListSkusRequest(
        parent=f"services/{SERVICE_ID}", currency_code="USD"), timeout=120)
    rows, used, ignored = confirmed_rows(skus, regions, read)
    if not rows:
        raise MissingError(f"none of the {ignored} Vertex AI SKUs prices training or "
                           f"prediction in {len(regions)} catalogue regions as this refresh "
                           f"recognises them; {path.name} left as it was")
    try:  # a broken old table is what a refresh mends: nothing of it is kept
        old, unreadable = (PriceTable.load(path).rows if path.exists() else {}), ""
    except PriceMissing:
        old, unreadable = {}, f" (the old {path.name} was unreadable)"
    kept = {key: row for key, row in old.items() if not row.confirmed and key not in rows}
    table = PriceTable("USD", {**rows, **kept})
    handle, staging = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(handle)
    try:  # a second writer or a crash leaves the old table or the new one, never half
        table.write(Path(staging))
        os.replace(staging, path)
    finally:
        Path(staging).unlink(missing_ok=True)
    priced = {key.region for key in rows}
    missing = sorted(set(regions) - priced)
    return (f"{path.name}: {len(rows)} prices confirmed by {used} Vertex AI SKUs (read "
            f"{read}) in {len(priced)} of {len(regions)} catalogue regions; {len(kept)} "
            f"unconfirmed rows kept where no SKU priced them{unreadable}; {ignored} other SKUs "
            "left out"
            + (f"; no SKU priced {', '.join(missing)}" if missing else ""))
