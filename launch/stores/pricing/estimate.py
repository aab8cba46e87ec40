"""A price before every job: its hourly price by the pinned table, the most it can cost
(price x timeout; a sweep: every trial's), and what it should cost (steps x the seconds per
step earlier runs of the same experiment measured on the same hardware); an endpoint's price
per hour and per month, and a batch prediction job's bound. `--max-cost` refuses a job or a
deployment over budget before anything is built or submitted."""

from __future__ import annotations

import dataclasses
import statistics
import sys
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from google.api_core.exceptions import GoogleAPIError
from google.auth.exceptions import GoogleAuthError

from launch.errors import InputError, UserError, reason
from launch.stores.gcs.upload import read_json
from launch.stores.pricing.table import Hourly, PriceMissing
from trainer.common import jsonnum
from trainer.common.files import RUNS_PREFIX, TRAINING_SUMMARY_FILE

RECENT_RUNS = 50  # earlier runs read for their speed, newest names first
READERS = 8  # summaries read at once
SUMMARY_BYTES = 65536
HOURS_PER_MONTH = 730  # 365 x 24 / 12: the month an always-on endpoint is priced by
T = TypeVar("T")


class OverBudget(InputError):
    """A job whose price bound or expected cost is over `--max-cost`."""


@dataclasses.dataclass(frozen=True)
class Speed:
    seconds_per_step: float  # the median of the runs measured
    runs: int


@dataclasses.dataclass(frozen=True)
class Estimate:
    """A training job's price, or a sweep's: `runs` such jobs (trials), `at_once` of them at a
    time (the sweep's parallel trials), each stopped by the timeout."""

    hourly: Hourly  # one job
    timeout_hours: float
    steps: int | None = None  # None: the job's length is not known (evaluation)
    speed: Speed | None = None
    no_speed: str = ""  # why there is no speed, said to the user
    runs: int = 1
    at_once: int = 1

    @property
    def rate(self) -> float:
        """What is paid per hour while `at_once` jobs run."""
        return self.hourly.total * self.at_once

    @property
    def bound(self) -> float:
        return self.hourly.total * self.timeout_hours * self.runs

    @property
    def expected(self) -> float | None:
        if self.steps is None or self.speed is None:
            return None
        return self.steps * self.speed.seconds_per_step / 3600 * self.hourly.total * self.runs

    def _trials(self, word: str = "trials") -> str:
        return f"{self.runs} {word} x " if self.runs > 1 else ""

    def lines(self) -> list[str]:
        """What `train`/`eval`/`tune --target vertex` print on stderr (stdout stays the job)."""
        usd, each = self.hourly.currency, "; ".join(self.hourly.parts)
        if self.runs > 1:
            each = f"{self.at_once} trial{'s' * (self.at_once != 1)} at a time, each {each}"
        lines = [f"cost: {self.rate:.2f} {usd}/h ({each}); at most {self.bound:.2f} {usd} "
                 f"({self._trials()}{self.timeout_hours:g} h timeout)"]
        if self.expected is not None:
            lines.append(f"      expected {self.expected:.2f} {usd}: {self._trials()}"
                         f"{self.steps} steps at {self.speed.seconds_per_step:.3g} s/step "
                         f"(median of {self.speed.runs} earlier run"
                         f"{'s' * (self.speed.runs != 1)} on this hardware)")
            if self.expected > self.bound:  # each run stopped by its timeout
                last = int(self.timeout_hours * 3600 / self.speed.seconds_per_step)
                job = "each trial" if self.runs > 1 else "the job"
                lines.append(f"      the {self.timeout_hours:g} h timeout ends {job} first, "
                             f"near step {last}: raise --timeout-hours")
        elif self.steps is not None:
            lines.append(f"      no expected cost: {self.no_speed}")
        return lines + self.hourly.unconfirmed_lines()

    def refuse_over(self, max_cost: float | None) -> None:
        if max_cost is None:
            return
        usd, job = self.hourly.currency, "the sweep" if self.runs > 1 else "the job"
        if self.bound > max_cost:
            raise OverBudget(
                f"{job} can cost up to {self.bound:.2f} {usd} ({self._trials()}"
                f"{self.hourly.total:.2f} {usd}/h x {self.timeout_hours:g} h timeout), over "
                f"--max-cost {max_cost:g}: lower --timeout-hours to "
                f"{max_cost / self.hourly.total / self.runs:.2f} or less, or choose cheaper "
                "hardware")
        if self.expected is not None and self.expected > max_cost:
            raise OverBudget(f"{job} is expected to cost {self.expected:.2f} {usd}, over "
                             f"--max-cost {max_cost:g}: train fewer steps or on cheaper "
                             "hardware")


@dataclasses.dataclass(frozen=True)
class ServingCost:
    """What serving costs: one replica's price per hour x the replicas running. An endpoint
    runs until it is undeployed, so its bound is a month at its most replicas; a batch
    prediction job's is its time limit at its most replicas."""

    replica: Hourly
    least: int  # an endpoint's --min-replicas; a batch job's starting replicas
    most: int  # the autoscaling maximum, --max-replicas
    timeout_hours: float | None = None  # a batch job's; None: an endpoint

    @property
    def hours(self) -> float:
        return HOURS_PER_MONTH if self.timeout_hours is None else self.timeout_hours

    @property
    def bound(self) -> float:
        return self.replica.total * self.most * self.hours

    def lines(self) -> list[str]:
        """What `endpoint.deploy` and `predict --target vertex` print before any request."""
        usd, price = self.replica.currency, self.replica.total
        low, high = self.least * price, self.most * price
        first = f"cost: {low:.2f} {usd}/h"
        if self.timeout_hours is None:
            first += f", {low * HOURS_PER_MONTH:.2f} {usd}/month"
        first += f" ({self.least} x {self.replica.parts[0]} at {price:.4f}/h)"
        if self.timeout_hours is None and self.most > self.least:
            first += (f"; at most {high:.2f} {usd}/h, {self.bound:.2f} {usd}/month autoscaling "
                      f"to {self.most} replicas")
        elif self.timeout_hours is not None:
            more = f"{high:.2f} {usd}/h at {self.most} replicas x " if self.most > self.least \
                else ""
            first += f"; at most {self.bound:.2f} {usd} ({more}{self.timeout_hours:g} h timeout)"
        return [first, *self.replica.unconfirmed_lines()]

    def refuse_over(self, max_cost: float | None) -> None:
        if max_cost is None or self.bound <= max_cost:
            return
        usd, price = self.replica.currency, self.replica.total
        if self.timeout_hours is not None:
            raise OverBudget(
                f"the batch job can cost up to {self.bound:.2f} {usd} ({self.most} replicas x "
                f"{price:.2f} {usd}/h x {self.timeout_hours:g} h timeout), over --max-cost "
                f"{max_cost:g}: lower --timeout-hours to {max_cost / price / self.most:.2f} or "
                "less, lower --max-replicas, or choose a cheaper machine")
        fit = int(max_cost / (price * HOURS_PER_MONTH))
        fix = f"lower --max-replicas to {fit}" if fit >= self.least else \
            (f"choose a cheaper machine ({self.least} replica{'s' * (self.least != 1)} cost "
             f"{self.least * price * HOURS_PER_MONTH:.2f} {usd} a month)")
        raise OverBudget(f"the endpoint can cost up to {self.bound:.2f} {usd} a month "
                         f"({self.most} replicas x {price:.2f} {usd}/h x {HOURS_PER_MONTH} h), "
                         f"over --max-cost {max_cost:g}: {fix}")


def known_price(price: Callable[[], T], max_cost: float | None, what: str = "",
                say: Callable[[str], None] = lambda text: print(text, file=sys.stderr,
                                                                flush=True)) -> T | None:
    """`price()`; or, when the table lacks a price, None after saying the cost (of `what`,
    e.g. a ladder's rung) is unknown. With --max-cost an unknown price refuses: the budget
    cannot be checked."""
    try:
        return price()
    except PriceMissing as error:
        if max_cost is not None:
            raise PriceMissing(f"--max-cost cannot be checked: {what}{error}") from None
        say(f"{what}cost: unknown ({error})")
        return None


def speed_of(summaries: Iterable[Mapping], experiment: str, hardware: str) -> Speed | None:
    """The median seconds per step of the summaries of `experiment` on `hardware`. Summaries
    come from the bucket: anything that is not a finite positive number is ignored."""
    measured = []
    for summary in summaries:
        if not isinstance(summary, Mapping) or summary.get("experiment") != experiment or \
                summary.get("hardware") != hardware:
            continue
        value = jsonnum.number(summary.get("seconds_per_step"))
        if value is not None and value > 0:
            measured.append(value)
    return Speed(statistics.median(measured), len(measured)) if measured else None


def read_summaries(storage_client, bucket: str, limit: int = RECENT_RUNS) -> list:
    """The training summaries of the newest `limit` runs in gs://BUCKET/runs/ (by name)."""
    prefix = f"{RUNS_PREFIX}/"
    listing = storage_client.list_blobs(bucket, prefix=prefix, delimiter="/")
    list(listing)  # the prefixes arrive with the pages
    runs = sorted(listing.prefixes, reverse=True)[:limit]

    def read(run: str) -> object | None:
        try:  # a summary is a few hundred bytes: read no more than SUMMARY_BYTES of anything
            return read_json(storage_client, bucket, f"{run}checkpoints/{TRAINING_SUMMARY_FILE}",
                             SUMMARY_BYTES)
        except (GoogleAPIError, jsonnum.JsonError):  # not JSON, too deep: not measured
            return None

    with ThreadPoolExecutor(READERS) as pool:  # one small read a run, before every launch
        return [summary for summary in pool.map(read, runs) if summary is not None]


def measured_speeds(read, experiment: str, hardware: Iterable[str]
                    ) -> dict[str, tuple[Speed | None, str]]:
    """{hardware: (speed, why none)} from one `read()` of the bucket's summaries (a ladder's
    rungs on several hardware read it once); a failure to read is said."""
    try:
        summaries = read()
    except (GoogleAPIError, GoogleAuthError, UserError, OSError) as error:
        return dict.fromkeys(hardware, (None, f"earlier runs could not be read "
                                           f"({reason(error)})"))
    return {each: (speed, "") if (speed := speed_of(summaries, experiment, each)) else
            (None, f"no earlier run of {experiment} on {each} has recorded its speed")
            for each in hardware}
