"""What a job needs, in terms every target reads the same way (XManager's
`JobRequirements`, SkyPilot's `Resources`): an accelerator kind and count, or a TPU, the
replicas beside the chief, and the kind of capacity it is paid as (standard, spot or
flex-start). The flags become this value in one place (`Resources.from_flags`); how a target
runs it (a machine type, a topology, a timeout, a reservation) is its own options' business
(Vertex AI's: launch/targets/vertex/resources.py)."""

from __future__ import annotations

import dataclasses
import re

from launch.errors import InputError
from trainer.common import options
from trainer.common.options import Bound

# the kinds of capacity a job may be paid as: on demand, preemptible and cheaper, or queued
# until capacity frees up
CAPACITY = ("STANDARD", "SPOT", "FLEX_START")
REPLICAS = Bound(minimum=0)  # --workers (and a target's replicas): beside the chief


def number(flag: str, value: int | float | str, kind: type, bound: Bound | None = None
           ) -> int | float:
    """A flag's value as `kind` within `bound` (invoke passes numbers as text), read by the
    one reader (`trainer.common.options.number`), or an InputError naming the flag."""
    return options.number(value, kind, flag, bound, InputError)


def optional_number(flag: str, value: int | float | str | None, kind: type,
                    bound: Bound | None = None) -> int | float | None:
    return options.optional_number(value, kind, flag, bound, InputError)


@dataclasses.dataclass(frozen=True)
class Accelerator:
    """An accelerator type and how many a machine carries, parsed once from
    `--accelerator TYPE:COUNT`; which types exist is each target's catalogue's business."""

    type: str
    count: int = 1
    counted: bool = dataclasses.field(default=True, compare=False, repr=False)  # False: a
    # bare `--accelerator TYPE`, which means one and is said so

    def __post_init__(self) -> None:
        if not self.type:
            raise InputError(f"--accelerator {str(self)!r} is not TYPE:COUNT "
                             "(e.g. NVIDIA_TESLA_T4:2)")
        if self.count < 1:
            raise InputError(f"--accelerator {str(self)!r}: the count must be at least 1")

    @classmethod
    def parse(cls, text: str) -> Accelerator:
        """`NVIDIA_TESLA_T4:2` -> Accelerator("NVIDIA_TESLA_T4", 2); a bare type means one."""
        name, colon, count = text.partition(":")
        if colon and not re.fullmatch(r"[0-9]{1,9}", count):
            raise InputError(f"--accelerator {text!r}: the count after ':' must be a number "
                             "(TYPE:COUNT, e.g. NVIDIA_TESLA_T4:2)")
        return cls(name, int(count) if colon else 1, counted=bool(colon))

    def __str__(self) -> str:
        return f"{self.type}:{self.count}"


@dataclasses.dataclass(frozen=True)
class Resources:
    """What every target understands of a job's hardware."""

    accelerator: Accelerator | None = None
    tpu: str | None = None  # v5litepod-4, v3-8, ...
    workers: int = 0  # replicas beside the chief, on the same machine
    capacity: str = "STANDARD"  # CAPACITY

    def __post_init__(self) -> None:
        number("--workers", self.workers, int, REPLICAS)
        if self.capacity not in CAPACITY:
            raise InputError(f"scheduling strategy must be one of "
                             f"{', '.join(CAPACITY)}, got {self.capacity!r}")

    @classmethod
    def from_flags(cls, *, accelerator: str | None = None, tpu: str | None = None,
                   workers: int | str = 0, spot: bool = False, flex_start: bool = False
                   ) -> Resources:
        """The command line's values (invoke passes numbers as text) as Resources."""
        if spot and flex_start:
            raise InputError("--spot and --flex-start exclude each other: choose one")
        return cls(Accelerator.parse(accelerator) if accelerator else None, tpu or None,
                   workers=number("--workers", workers, int, REPLICAS),
                   capacity="SPOT" if spot else "FLEX_START" if flex_start else "STANDARD")

    @property
    def replicas(self) -> tuple[int, ...]:
        """Replicas per worker pool: the chief, then the workers (if any)."""
        return (1, self.workers) if self.workers else (1,)


DEFAULT_RESOURCES = Resources()
