"""A target as the job values know it (SkyPilot's `Cloud` and its declared features): what it
can do (`Capability`), the job options it owns, and where its executor is, in a `TargetSpec`
its package declares (launch/targets/NAME/__init__.py) and the registry names lazily
(target_names.py). So the job file, the flags and a refusal learn a target without importing
its executor or its SDKs, and a refusal is phrased from what the target cannot do: "`--spot`:
the local target cannot run spot capacity"."""

from __future__ import annotations

import dataclasses
import importlib


@dataclasses.dataclass(frozen=True)
class Capability:
    """Something a job may ask of its target; `words` finish "the local target cannot ...".
    A target with a capability of its own declares it in its package, as these are."""

    name: str
    words: str

    def __str__(self) -> str:
        return self.name


GPU = Capability("gpu", "attach GPUs")
TPU = Capability("tpu", "run on TPU slices")
SPOT = Capability("spot", "run spot capacity")
FLEX_START = Capability("flex-start", "queue for flex-start capacity")
REGION = Capability("region", "run in a chosen cloud region")
IMAGE = Capability("image", "run a container image")
MACHINE_TYPE = Capability("machine-type", "choose a machine type")
REDUCTION_SERVERS = Capability("reduction-servers", "run Reduction Server replicas")
RESERVATION = Capability("reservation", "run on capacity set aside (reservations, "
                                        "persistent resources)")
WEB_ACCESS = Capability("web-access", "open a shell into a running replica")
TIMEOUT = Capability("timeout", "stop a job at a timeout")
LADDER = Capability("ladder", "climb a capacity ladder (regions, fallback machines, kinds "
                              "of capacity)")
BACKGROUND = Capability("background", "run a job in this machine's background")
SUBMIT = Capability("submit", "submit a job to a service (to follow until it ends)")
PRICE = Capability("price", "price a job before it runs")


@dataclasses.dataclass(frozen=True)
class NoOptions:
    """The options of a target that owns none."""


@dataclasses.dataclass(frozen=True)
class TargetSpec:
    """A target: its executor ("module:Class", imported when a job runs there), what it can
    do, and its own job options (a frozen dataclass of `jobfile.option` fields: each a flag
    and a key of the file's section named after the target, each saying the capability it
    `needs`)."""

    executor: str
    capabilities: frozenset[Capability] = frozenset()
    options: type = NoOptions

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self.options):
            if field.metadata.get("needs") not in self.capabilities:
                raise ValueError(f"{self.options.__name__}.{field.name} needs "
                                 f"{field.metadata.get('needs')}, which its target does not "
                                 "declare")

    def can(self, capability: Capability | None) -> bool:
        return capability is None or capability in self.capabilities

    def executor_class(self) -> type:
        module, _, name = self.executor.partition(":")
        return getattr(importlib.import_module(module), name)
