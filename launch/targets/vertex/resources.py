"""What a job runs on at Vertex AI, as one validated value: the machine (n1-standard-8 by
default) and its accelerators or TPU and topology, the replicas, Reduction Server and
scheduling (timeout, capacity, queueing, a reservation or persistent resource). The Vertex
executor builds it from the request's neutral needs (launch/values/resources.py) and its
options (`VertexOptions.resources`), and the job file checks it the same way when the
request is made, before anything is sent; `--dry-run` shows it."""

from __future__ import annotations

import dataclasses
import re
from typing import Protocol

from launch.errors import InputError
from launch.values.resources import CAPACITY, REPLICAS, Accelerator, number, optional_number
from trainer.common.options import Bound

SCHEDULING_STRATEGIES = CAPACITY  # the neutral kinds of capacity, Vertex AI's names
# A job's timeout (and a Flex-start job's queueing limit) is sent as a protobuf Duration of
# whole seconds, and a timeout left unset (or "0s") is Vertex AI's default: "The maximum job
# running time. The default is 7 days." (Scheduling.timeout, Vertex AI API reference,
# https://docs.cloud.google.com/ruby/docs/reference/google-cloud-ai_platform-v1/0.27.0/
# Google-Cloud-AIPlatform-V1-Scheduling, read 2026-11-26). So a time in hours is sent to the
# nearest second (`whole_seconds`), priced as sent, and never below MIN_HOURS: one minute,
# the shortest limit that means anything (a job stopped sooner has paid for its machines'
# start-up and run nothing; `predict --target vertex` checks its batch job every 30 s).
# Below a second, 1e-300 h was sent as "0s" (7 days) and priced as 0.00 USD.
MIN_HOURS = 1 / 60
MIN_HOURS_SHOWN = "1 minute (0.0167 h)"
MAX_HOURS = 87_600  # ten years: within a protobuf Duration, beyond any real job
HOURS = Bound(minimum=MIN_HOURS, minimum_shown=MIN_HOURS_SHOWN, maximum=MAX_HOURS)
WAIT_HOURS = dataclasses.replace(HOURS, zero="no limit")  # a Flex-start job's queueing
DEFAULT_TIMEOUT_HOURS = 7 * 24  # what Vertex AI runs a job with no timeout for
# A capacity ladder resubmits a preempted job on the same rung at most this many times: each
# preempted job is paid for the time it ran, and a rung preempted ten times over has no
# capacity to give (the next rung, or the user, decides then).
MAX_PREEMPTIONS = 10
PREEMPTIONS = Bound(minimum=0, maximum=MAX_PREEMPTIONS)  # --max-preemptions


RESOURCE_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
_ZONE, _NAME = r"(?P<zone>[a-z]+-[a-z]+\d+-[a-z])", r"(?P<name>[a-z]([-a-z0-9]{0,61}[a-z0-9])?)"
# a reservation of the job's project (ZONE/NAME), or of any project (its resource path)
RESERVATION_FORMS = (
    re.compile(rf"{_ZONE}/{_NAME}"),
    re.compile(rf"projects/(?P<project>[a-z][-a-z0-9]{{4,28}}[a-z0-9])/zones/{_ZONE}/"
               rf"reservations/{_NAME}"),
)


def reservation_parts(text: str) -> re.Match | None:
    """`ZONE/NAME` or `projects/P/zones/ZONE/reservations/NAME` -> its zone, name and
    project (None for the job's own); None for anything else."""
    return next(filter(None, (form.fullmatch(text) for form in RESERVATION_FORMS)), None)


@dataclasses.dataclass(frozen=True)
class Scheduling:
    """How a job gets its capacity and how long it may take."""

    timeout_hours: float = 24.0
    restart_job_on_worker_restart: bool = True
    strategy: str = "STANDARD"  # SPOT: preemptible, cheaper; FLEX_START: waits for capacity
    max_wait_hours: float | None = None  # FLEX_START: how long to queue (0: no limit)
    reservation: str | None = None  # "any", ZONE/NAME, or its full resource path
    persistent_resource: str | None = None  # the id of a Vertex AI persistent resource

    def __post_init__(self) -> None:
        if self.strategy not in SCHEDULING_STRATEGIES:
            raise InputError(f"scheduling strategy must be one of "
                             f"{', '.join(SCHEDULING_STRATEGIES)}, got {self.strategy!r}")
        number("--timeout-hours", self.timeout_hours, float, HOURS)
        if self.max_wait_hours is not None:
            if self.strategy != "FLEX_START":
                raise InputError("--max-wait-hours is how long a --flex-start job queues: "
                                 "add --flex-start or drop it")
            number("--max-wait-hours", self.max_wait_hours, float, WAIT_HOURS)
        if self.reservation and self.persistent_resource:
            raise InputError("--reservation and --persistent-resource exclude each other: a "
                             "persistent resource brings its own capacity")
        if (self.reservation or self.persistent_resource) and self.strategy != "STANDARD":
            raise InputError(f"--reservation and --persistent-resource use capacity already "
                             f"set aside, not {self.strategy} capacity: drop --spot/--flex-start")
        if self.reservation not in (None, "any") and not reservation_parts(self.reservation):
            raise InputError(f"--reservation {self.reservation[:80]!r} is not 'any', ZONE/NAME "
                             "(a reservation of the job's project) or "
                             "projects/P/zones/ZONE/reservations/NAME")
        if self.persistent_resource and not RESOURCE_NAME.fullmatch(self.persistent_resource):
            raise InputError(f"--persistent-resource {self.persistent_resource[:80]!r} is not "
                             "a persistent resource id (lowercase letters, digits and '-')")

    @classmethod
    def from_flags(cls, *, spot: bool = False, flex_start: bool = False,
                   timeout_hours: float | str = 24.0, max_wait_hours: float | str | None = None,
                   reservation: str | None = None, persistent_resource: str | None = None
                   ) -> Scheduling:
        if spot and flex_start:
            raise InputError("--spot and --flex-start exclude each other: choose one")
        strategy = "SPOT" if spot else "FLEX_START" if flex_start else "STANDARD"
        return cls(number("--timeout-hours", timeout_hours, float, HOURS), strategy=strategy,
                   max_wait_hours=optional_number("--max-wait-hours", max_wait_hours, float,
                                                  WAIT_HOURS),
                   reservation=reservation or None,
                   persistent_resource=persistent_resource or None)

    def describe(self) -> str:
        parts = [f"{self.strategy} scheduling", f"timeout {sent(self.timeout_hours):g} h"]
        if self.max_wait_hours is not None:
            parts.append(f"queue up to {sent(self.max_wait_hours):g} h" if self.max_wait_hours
                         else "queue without limit")
        if self.reservation:
            parts.append(f"reservation {self.reservation}")
        if self.persistent_resource:
            parts.append(f"persistent resource {self.persistent_resource}")
        return ", ".join(parts)


DEFAULT_SCHEDULING = Scheduling()


class Described(Protocol):
    """A target's resolved machine (launch.targets.vertex.hardware.Machine), as far as resources
    need it: its words, so this module stays free of any target's catalogue."""

    def describe(self) -> str: ...


@dataclasses.dataclass(frozen=True)
class Resources:
    """A Vertex AI job's worker pools: the neutral needs plus Vertex AI's own options."""

    machine_type: str | None = None  # default: n1-standard-8
    accelerator: Accelerator | None = None
    tpu: str | None = None  # v5litepod-4, v3-8, ...
    tpu_topology: str | None = None
    workers: int = 0  # replicas beside the chief, on the same machine
    reduction_servers: int = 0
    scheduling: Scheduling = DEFAULT_SCHEDULING

    def __post_init__(self) -> None:
        number("--workers", self.workers, int, REPLICAS)
        number("--reduction-servers", self.reduction_servers, int, REPLICAS)
        self.check_one_slice(bool(self.tpu))
        if self.reduction_servers and not self.workers:
            raise InputError("Reduction Server needs GPU workers: pass --workers N as well")

    def check_one_slice(self, tpu: bool) -> None:
        """A TPU job (`tpu`: `--tpu`, or a TPU machine type a target's catalogue knows) is
        one slice, whose hosts all run the trainer: it takes no replicas beside it."""
        if tpu and (self.workers or self.reduction_servers):
            raise InputError("a TPU job is one slice (every host of a multi-host slice runs "
                             "the trainer): drop --workers and --reduction-servers")

    @classmethod
    def from_flags(cls, *, machine_type: str | None = None, accelerator: str | None = None,
                   tpu: str | None = None, tpu_topology: str | None = None,
                   workers: int | str = 0, reduction_servers: int | str = 0,
                   scheduling: Scheduling = DEFAULT_SCHEDULING) -> Resources:
        """The command line's values (invoke passes numbers as text) as Resources."""
        return cls(machine_type or None, Accelerator.parse(accelerator) if accelerator else None,
                   tpu or None, tpu_topology or None,
                   workers=number("--workers", workers, int, REPLICAS),
                   reduction_servers=number("--reduction-servers", reduction_servers, int,
                                            REPLICAS),
                   scheduling=scheduling)

    @property
    def replicas(self) -> tuple[int, ...]:
        """Replicas per worker pool: the chief, then the workers (if any)."""
        return (1, self.workers) if self.workers else (1,)

    def with_strategy(self, strategy: str) -> Resources:
        """The same resources on another kind of capacity (a rung of the capacity ladder);
        the Flex-start queueing time stays with Flex-start."""
        scheduling = dataclasses.replace(
            self.scheduling, strategy=strategy,
            max_wait_hours=self.scheduling.max_wait_hours if strategy == "FLEX_START" else None)
        return dataclasses.replace(self, scheduling=scheduling)

    def hardware_key(self, machine: Described) -> str:
        """The hardware in words, the same for every run on it whatever its scheduling:
        how earlier runs' speed is matched to a new one's."""
        servers = f" + {self.reduction_servers} reduction servers" if self.reduction_servers \
            else ""
        return f"{machine.describe()} x {sum(self.replicas)}{servers}"

    def describe(self) -> str:
        """One line for people: what `--dry-run` says beside the job's JSON."""
        hardware = self.tpu or " with ".join(
            map(str, filter(None, (self.machine_type or "n1-standard-8", self.accelerator))))
        replicas = f"chief + {self.workers} workers" if self.workers else "1 replica"
        servers = f", {self.reduction_servers} reduction servers" if self.reduction_servers \
            else ""
        return f"{hardware}; {replicas}{servers}; {self.scheduling.describe()}"


DEFAULT_RESOURCES = Resources()


def whole_seconds(hours: float) -> int:
    """Hours as the whole seconds of the Duration a job is sent with (to the nearest)."""
    return round(hours * 3600)


def sent(hours: float) -> float:
    """Hours as they are sent: whole seconds (what a dry run shows and a bound prices)."""
    return whole_seconds(hours) / 3600
