"""The ladder (`--capacity spot,flex-start,standard`, `--regions`, `--fallback`): submit a run
on the first rung; when its job fails for capacity (stockout, exhausted quota, resources
insufficient) or is preempted more often than allowed, resubmit the same run on the next
rung. A rung is a region, a hardware and a kind of capacity; the rungs are every (region,
hardware) pair in the order the user gave them, regions outer and hardware inner (all the
hardware is tried in the first region before the second region), and within each pair the
kinds of capacity in order. The run id, and so the run's checkpoints (training resumes from
the newest, in the same bucket whatever the region), its job file and an evaluation job
watching it, carry across."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence

from google.cloud import aiplatform_v1

from launch.context.places import region_name
from launch.errors import InputError, StepFailed
from launch.targets import triage
from launch.targets.vertex.hardware import check_region
from launch.targets.vertex.resources import PREEMPTIONS
from launch.values.resources import number

RUNGS = {"spot": "SPOT", "flex-start": "FLEX_START", "standard": "STANDARD"}
# The failures for want of capacity, as launch/targets/triage.py names them (its table holds how
# Vertex AI and Compute Engine word them); and how a preemption reads.
CAPACITY = ("quota", "stockout")
PREEMPTED = re.compile(r"preempt", re.IGNORECASE)
# google.rpc.Code values a capacity failure comes with.
CAPACITY_CODES = {8, 14}  # RESOURCE_EXHAUSTED, UNAVAILABLE


def _once(flag: str, values: Sequence[str]) -> None:
    if len(set(values)) != len(values):
        twice = next(v for v in values if values.count(v) > 1)
        raise InputError(f"{flag} names {twice} twice")


@dataclasses.dataclass(frozen=True)
class Ladder:
    strategies: tuple[str, ...]  # scheduling strategies, tried in order in each pair
    max_preemptions: int = 2  # per rung: preempted jobs resubmitted on the same rung
    regions: tuple[str, ...] = ()  # (): the job's own region
    fallback: tuple[str, ...] = ()  # machine types tried after the job's own hardware

    def __post_init__(self) -> None:
        if not self.strategies:
            raise InputError("--capacity needs at least one of spot, flex-start, standard")
        if len(set(self.strategies)) != len(self.strategies):
            raise InputError("--capacity names a kind of capacity twice")
        number("--max-preemptions", self.max_preemptions, int, PREEMPTIONS)
        _once("--regions", self.regions)
        _once("--fallback", self.fallback)
        for region in self.regions:
            check_region(region_name(region, "--regions"), "--regions")

    @classmethod
    def from_flag(cls, text: str | None, max_preemptions: int | str = 2,
                  chosen: str = "STANDARD", regions: Sequence[str] = (),
                  fallback: Sequence[str] = ()) -> Ladder | None:
        """`spot,flex-start,standard` -> the strategies in that order, in the `regions` and on
        the job's hardware then `fallback`'s (None: none of these given, no ladder). `chosen`
        is the strategy --spot/--flex-start picked: a --capacity list replaces it; without
        one, each (region, hardware) pair has that one rung."""
        if not (text or regions or fallback):
            return None
        if text and chosen != "STANDARD":
            raise InputError("--capacity names every kind of capacity to try: drop --spot "
                             "and --flex-start")
        names = [name.strip().lower() for name in (text or "").split(",") if name.strip()]
        unknown = [name for name in names if name not in RUNGS]
        if unknown:
            raise InputError(f"--capacity {', '.join(map(repr, unknown))}: use "
                             f"{', '.join(RUNGS)} (in the order to try them)")
        strategies = tuple(RUNGS[name] for name in names) if text else (chosen,)
        return cls(strategies, number("--max-preemptions", max_preemptions, int, PREEMPTIONS),
                   tuple(regions), tuple(fallback))


@dataclasses.dataclass(frozen=True)
class Rung:
    """Where one job of the ladder runs: a region, a hardware (named as the user named it)
    and a kind of capacity."""

    region: str
    hardware: str
    strategy: str


def rungs(regions: Sequence[str], hardware: Sequence[str], strategies: Sequence[str]
          ) -> list[Rung]:
    """Regions outer, hardware inner, capacity innermost: the order the ladder climbs."""
    return [Rung(region, machine, strategy) for region in regions for machine in hardware
            for strategy in strategies]


def labels(ladder: Sequence[Rung]) -> dict[Rung, str]:
    """Each rung in words, naming what differs between rungs (the kind of capacity always):
    `SPOT` on a capacity ladder, `us-east4 g2-standard-8 SPOT` across regions and hardware."""
    varies = [len({getattr(rung, part) for rung in ladder}) > 1
              for part in ("region", "hardware")]
    return {rung: " ".join([*(value for value, shown in
                              zip((rung.region, rung.hardware), varies, strict=True) if shown),
                            rung.strategy]) for rung in ladder}


def outcome(job: aiplatform_v1.CustomJob) -> str:
    """succeeded | capacity | preempted | failed (| cancelled) for an ended job."""
    state = job.state.name
    if state == "JOB_STATE_SUCCEEDED":
        return "succeeded"
    if state == "JOB_STATE_CANCELLED":
        return "cancelled"
    message = job.error.message or ""
    if PREEMPTED.search(message):
        return "preempted"
    if job.error.code in CAPACITY_CODES or triage.classify([message]).name in CAPACITY:
        return "capacity"
    return "failed"


def most_jobs(ladder: Sequence[Rung], max_preemptions: int) -> int:
    """The most jobs a climb submits: on each rung, one and a resubmission per preemption."""
    return len(ladder) * (1 + max_preemptions)


@dataclasses.dataclass
class Budget:
    """`--max-cost` over a whole climb, not each job: a job is submitted only when what the
    jobs before it cost plus the most it can cost (its rung's bound, price x timeout) is
    within the cap, so everything the launch starts stays within it, whatever the ladder
    meets. What an ended job cost is `cost(rung, job)` (the executor prices its run time)."""

    cap: float
    bounds: Mapping[Rung, float]  # the most one job on each rung can cost
    cost: Callable[[Rung, aiplatform_v1.CustomJob], float]
    currency: str = "USD"
    spent: float = 0.0
    jobs: int = 0

    def refusal(self, rung: Rung, name: str) -> str | None:
        """Why the next job, on `rung`, may not be submitted (None: it fits)."""
        left = self.cap - self.spent
        if self.bounds[rung] <= left:
            return None
        usd = self.currency
        return (f"the ladder stops before a job on {name}: the {self.jobs} job"
                f"{'s' * (self.jobs != 1)} it ran cost {self.spent:.2f} {usd}, and a job on "
                f"{name} can cost up to {self.bounds[rung]:.2f} {usd}, more than the "
                f"{max(left, 0.0):.2f} {usd} left of --max-cost {self.cap:g}")

    def paid(self, rung: Rung, job: aiplatform_v1.CustomJob) -> None:
        self.spent += self.cost(rung, job)
        self.jobs += 1


def climb(ladder: Sequence[Rung], run: Callable[[Rung, int], aiplatform_v1.CustomJob],
          max_preemptions: int = 2, say: Callable[[str], None] = print,
          explain: Callable[[aiplatform_v1.CustomJob], str] = lambda job: "",
          on_step: Callable[[aiplatform_v1.CustomJob, str], None] = lambda job, text: None,
          budget: Budget | None = None) -> aiplatform_v1.CustomJob:
    """Runs `run(rung, attempt)` (submit one job and wait for it to end) up the ladder; the
    job that succeeded, or StepFailed saying what each attempt met (`explain`: a failed job's
    cause and fix, from its log). Each resubmission is said, and `on_step` hears of it with
    the job that ended. With a `budget`, StepFailed before a job it cannot pay for."""
    history, attempt, named = [], 0, labels(ladder)

    def step(job: aiplatform_v1.CustomJob, text: str) -> None:
        say(text)
        on_step(job, text)

    for index, rung in enumerate(ladder):
        preemptions, name = 0, named[rung]
        while True:
            if budget and (why := budget.refusal(rung, name)):
                raise StepFailed(f"{why} ({'; '.join(history)})")
            attempt += 1
            job = run(rung, attempt)
            if budget:
                budget.paid(rung, job)
            result = outcome(job)
            history.append(f"{name}: {result}")
            if result == "succeeded":
                return job
            if result in ("failed", "cancelled"):
                cause = explain(job) if result == "failed" else ""
                explained = f"\n{cause}" if cause else ""
                raise StepFailed(f"{job.name} {result} on {name} capacity: "
                                 f"{job.error.message or 'no error message'}{explained}")
            if result == "preempted" and preemptions < max_preemptions:
                preemptions += 1
                step(job, f"{job.name} was preempted ({preemptions} of {max_preemptions} "
                          f"allowed): resubmitting on {name}, resuming from the run's "
                          "checkpoints")
                continue
            if following := ladder[index + 1:index + 2]:
                why = "was preempted too often" if result == "preempted" else \
                    "found no capacity"
                step(job, f"{job.name} {why} on {name} "
                          f"({job.error.message or 'no message'}): resubmitting on "
                          f"{named[following[0]]}, resuming from the run's checkpoints")
            break
    raise StepFailed(f"no capacity for the run on any rung of the ladder "
                     f"({'; '.join(history)})")
