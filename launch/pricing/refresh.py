"""`invoke pricing.refresh`: rebuilds prices.yaml from the Cloud Billing Catalog API's SKUs
for Vertex AI, through its client library (google-cloud-billing).

Each training SKU is one price: a family's vCPU-hour or GB-hour, an accelerator-hour, a TPU
chip-hour (or v2/v3 core-hour), on demand, Spot or Flex-start, in the regions it lists.
`classify` reads that from the SKU's description and usage type; SKUs it does not recognise
(prediction, commitments, storage, ...) are counted and left out. A refresh that recognises
nothing leaves the table as it was.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import os
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path

from google.cloud import billing_v1

from launch.errors import MissingError
from launch.pricing.table import PRICES_FILE, PriceTable

SERVICE_NAME = "Vertex AI"  # the Billing Catalog's display name of the service
SOURCE = "Cloud Billing Catalog API ({service}, {name}), by `invoke pricing.refresh`"
USAGE_COLUMNS = {"OnDemand": "standard", "Preemptible": "spot"}
NOT_TRAINING = re.compile(r"prediction|online|batch|pipeline|commit|reserv|storage|endpoint",
                          re.IGNORECASE)
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


@dataclasses.dataclass(frozen=True)
class Price:
    region: str
    kind: str  # cores | ram | accelerators | tpu_chips
    name: str  # family, accelerator type or TPU generation
    column: str  # standard | spot | flex_start
    hourly: float


def _accelerator(gpu_name: str) -> str | None:
    words = " ".join(gpu_name.upper().replace("TESLA", " ").split())
    for spelt, accelerator in GPU_NAMES:
        if all(re.search(rf"\b{word}\b", words) for word in spelt.split()):
            return accelerator
    return None


def _part(description: str) -> tuple[str, str] | None:
    """(kind, name) of what a training SKU prices, or None."""
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


def classify(sku: billing_v1.Sku) -> list[Price]:
    """The prices one SKU gives (one a region), or [] for a SKU that is not a training price."""
    description = sku.description
    if "training" not in description.lower() or NOT_TRAINING.search(description):
        return []
    if FLEX.search(description):
        column = "flex_start"
    elif SPOT.search(description):
        column = "spot"
    else:
        column = USAGE_COLUMNS.get(sku.category.usage_type)
    part, hourly = _part(description), _hourly(sku)
    if column is None or part is None or hourly is None:
        return []
    return [Price(region, *part, column, hourly) for region in sku.service_regions]


def table_from_skus(skus: Iterable[billing_v1.Sku], taken: str, source: str,
                    currency: str = "USD") -> tuple[PriceTable, int, int]:
    """(the table, SKUs used, SKUs ignored). The first price for a key wins."""
    regions: dict = {}
    used = ignored = 0
    for sku in skus:  # listed in `currency`, which the request names
        prices = classify(sku)
        used, ignored = (used + 1, ignored) if prices else (used, ignored + 1)
        for price in prices:
            columns = regions.setdefault(price.region, {}).setdefault(price.kind, {}) \
                .setdefault(price.name, {})
            columns.setdefault(price.column, price.hourly)
    return PriceTable(taken, source, currency, regions), used, ignored


def vertex_service(client: billing_v1.CloudCatalogClient) -> billing_v1.Service:
    for service in client.list_services(timeout=60):
        if service.display_name == SERVICE_NAME:
            return service
    raise MissingError(f"the Billing Catalog lists no service named {SERVICE_NAME!r}")


def refresh(client: billing_v1.CloudCatalogClient, path: Path = PRICES_FILE,
            today: datetime.date | None = None) -> str:
    """Rewrites `path` from the catalogue (atomically); says what it found."""
    service = vertex_service(client)
    skus = client.list_skus(request=billing_v1.ListSkusRequest(parent=service.name,
                                                               currency_code="USD"),
                            timeout=120)
    table, used, ignored = table_from_skus(
        skus, (today or datetime.date.today()).isoformat(),
        SOURCE.format(service=SERVICE_NAME, name=service.name))
    if not table.regions:
        raise MissingError(f"none of the {ignored} {SERVICE_NAME} SKUs is a training price "
                           f"this refresh recognises; {path.name} left as it was")
    handle, staging = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(handle)
    try:  # a second writer or a crash leaves the old table or the new one, never half
        table.write(Path(staging))
        os.replace(staging, path)
    finally:
        Path(staging).unlink(missing_ok=True)
    count = sum(len(columns) for parts in table.regions.values() for kind in parts.values()
                for columns in kind.values())
    return (f"{path.name}: {count} prices in {len(table.regions)} regions from {used} "
            f"{SERVICE_NAME} training SKUs ({ignored} other SKUs left out), taken "
            f"{table.taken}")
