"""Vertex AI training quota, read before anything is built: a job whose CPUs, GPUs or TPU
cores exceed the project's limit in its region is refused with the number it needs, the
limit and the page to ask for more, instead of a 429 after the image build.

`needs` (pure) turns a CustomJob into {metric: amount}; `limits` reads the project's limits
through the Cloud Quotas API; `refuse_short` compares. Which metric each part of a job counts
against is data (catalogue.yaml `quotas`, with its sources)."""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable, Mapping

from google.api_core.exceptions import PermissionDenied
from google.auth.exceptions import DefaultCredentialsError
from google.cloud import aiplatform_v1

from launch.errors import NO_CREDENTIALS, InputError, reason
from launch.targets.vertex.hardware import Machine, catalogue, machine_shape, tpu_chips

UNLIMITED = -1  # what Cloud Quotas reports for a quota without a limit


def facts() -> dict:
    return catalogue()["quotas"]


@dataclasses.dataclass(frozen=True)
class Needs:
    """What a job counts against each quota metric, and the parts no known metric covers."""

    amounts: Mapping[str, int]  # metric (without the service) -> amount
    unchecked: tuple[str, ...] = ()  # e.g. "NVIDIA_B200", "g2-standard-8 vCPUs"
    preemptible: bool = False


def metric(name: str, preemptible: bool) -> str:
    """`nvidia_t4_gpus` -> `custom_model_training_[preemptible_]nvidia_t4_gpus`."""
    quotas = facts()
    return f"{quotas['prefix']}{quotas['preemptible'] if preemptible else ''}{name}"


def _pool_parts(spec: aiplatform_v1.MachineSpec) -> list[tuple[str | None, int, str]]:
    """(metric name or None, amount a replica takes, what it is) for one machine."""
    quotas = facts()
    machine_type = spec.machine_type
    tpu = catalogue()["tpu_machines"].get(machine_type)
    if tpu:  # a TPU VM slice: its chips
        chips = tpu_chips(Machine(machine_type, tpu_topology=spec.tpu_topology))
        return [(quotas["tpu_generations"].get(tpu["generation"]), chips,
                 f"TPU {tpu['generation']}")]
    parts: list[tuple[str | None, int, str]] = []
    if spec.accelerator_count:
        kind = spec.accelerator_type.name
        parts.append((quotas["accelerators"].get(kind), spec.accelerator_count, kind))
    if machine_type != "cloud-tpu":  # v2/v3 TPUs: only the cores count
        family = machine_type.split("-", 1)[0]
        parts.append((quotas["cpus"].get(family), machine_shape(machine_type)[0],
                      f"{machine_type} vCPUs"))
    return parts


def needs(job: aiplatform_v1.CustomJob, copies: int = 1) -> Needs:
    """Every pool of `job` (chief, workers, evaluator, Reduction Server) times its replicas,
    `copies` jobs at once (a sweep's parallel trials); Spot and Flex-start count against the
    preemptible metrics."""
    strategy = aiplatform_v1.Scheduling.Strategy(job.job_spec.scheduling.strategy).name
    preemptible = strategy in facts()["strategies_preemptible"]
    amounts: collections.Counter[str] = collections.Counter()
    unchecked: dict[str, None] = {}
    for pool in job.job_spec.worker_pool_specs:
        for name, amount, what in _pool_parts(pool.machine_spec):
            if name is None:
                unchecked[what] = None
            else:
                amounts[metric(name, preemptible)] += amount * pool.replica_count * copies
    return Needs(dict(amounts), tuple(unchecked), preemptible)


def _regional_limit(info, region: str) -> int | None:
    """The limit a QuotaInfo sets in `region`: its region's own DimensionsInfo, else the one
    without a region (which applies to every region not named)."""
    default = None
    for dimensions in info.dimensions_infos:
        named = dimensions.dimensions.get("region")
        if named == region:
            return dimensions.details.value
        if named is None and (not dimensions.applicable_locations
                              or region in dimensions.applicable_locations):
            default = dimensions.details.value
    return default


def _tighter(first: int, second: int) -> int:
    if first == UNLIMITED:
        return second
    return first if second == UNLIMITED else min(first, second)


def limits(client, project: str, region: str, metrics: Iterable[str] | None = None
           ) -> dict[str, int]:
    """{metric: limit in `region`} for the project's per-region Vertex AI quotas (all of
    them, or `metrics`); UNLIMITED for none; a metric the project does not list is absent."""
    service = facts()["service"]
    wanted = set(metrics) if metrics is not None else None
    found: dict[str, int] = {}
    pages = client.list_quota_infos(
        parent=f"projects/{project}/locations/global/services/{service}", timeout=30)
    for info in pages:
        name = info.metric.removeprefix(f"{service}/")
        if (wanted is not None and name not in wanted) or "region" not in info.dimensions:
            continue
        limit = _regional_limit(info, region)
        if limit is not None:
            found[name] = _tighter(found.get(name, UNLIMITED), limit)
    return found


def unreadable(error: Exception) -> str:
    """Why the quotas could not be read, and what lets them be."""
    quotas = facts()
    if isinstance(error, DefaultCredentialsError):
        return NO_CREDENTIALS
    if isinstance(error, PermissionDenied):
        return (f"reading them needs {quotas['permission']} on the project (in "
                f"{quotas['role']}): {reason(error, 120)}")
    return reason(error)


def console_url(project: str) -> str:
    return facts()["console"].format(project=project)


def refuse_short(needed: Needs, found: Mapping[str, int], what: str, project: str,
                 region: str) -> list[str]:
    """Raises InputError for the first metric over its limit; otherwise the notes to print
    (what could not be checked)."""
    for name, amount in needed.amounts.items():
        limit = found.get(name, UNLIMITED)
        if limit != UNLIMITED and amount > limit:
            capacity = "Spot/Flex-start (preemptible) " if needed.preemptible else ""
            raise InputError(
                f"{what} needs {amount} {name} in {region}; the project's {capacity}limit "
                f"there is {limit}: ask for more at {console_url(project)} (filter by "
                f"{name}), or choose other hardware or --region")
    notes = [f"{name} (not among the project's quotas in {region})"
             for name in needed.amounts if name not in found]
    return [f"note: quota not checked for {', '.join([*needed.unchecked, *notes])}"] \
        if needed.unchecked or notes else []


def offered_metrics(region: str) -> dict[str, tuple[str, str]]:
    """The hardware the catalogue offers for training in `region`, as {label: (on-demand
    metric, preemptible metric)}: what `invoke doctor` lists."""
    quotas, hardware = facts(), catalogue()
    names = {f"vCPUs ({', '.join(f for f, n in quotas['cpus'].items() if n == name)})": name
             for name in dict.fromkeys(quotas["cpus"].values())}
    names |= {kind: name for kind, name in quotas["accelerators"].items()
              if region in hardware["regions"].get(kind, ())}
    names |= {f"TPU {generation}": name
              for generation, name in quotas["tpu_generations"].items()
              if region in hardware["tpu_regions"].get(generation, ())}
    return {label: (metric(name, False), metric(name, True)) for label, name in names.items()}
