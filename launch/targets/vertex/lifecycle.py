"""What Google stops offering, and when: catalogue.yaml's `lifecycle`, each date with the page
that says so and the day it was read. Pure functions of a date, so a test can pass any day:
the warnings `invoke doctor` gives ahead of each end, and the refusal of a container past its
end before a model is uploaded on it."""

from __future__ import annotations

import dataclasses
import datetime

from launch.errors import InputError
from launch.targets.vertex.hardware import catalogue

WARN_DAYS = 90  # how long ahead `invoke doctor` warns of an end


class EndedError(InputError):
    """Something Google no longer offers; the message names its end, source and fix."""


@dataclasses.dataclass(frozen=True)
class Ending:
    """One dated fact: the names it applies to and the day Google stops offering them."""

    about: str
    names: tuple[str, ...]
    end_of_availability: datetime.date
    source: str
    read: datetime.date
    fix: str
    end_of_patch: datetime.date | None = None

    def when(self, today: datetime.date) -> str:
        """`2027-01-14, in 51 days` (or `..., 3 days ago`): the date and how near it is."""
        days = (self.end_of_availability - today).days
        near = f"in {days} days" if days > 0 else "today" if days == 0 else f"{-days} days ago"
        return f"{self.end_of_availability}, {near}"


def endings() -> tuple[Ending, ...]:
    """Every dated fact, soonest end first."""
    found = (Ending(**{**entry, "names": tuple(entry["names"])})
             for entry in catalogue()["lifecycle"])
    return tuple(sorted(found, key=lambda ending: ending.end_of_availability))


def image_name(uri: str) -> str:
    """`us-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-15:latest` -> `tf2-cpu.2-15` (a
    digest or tag, if any, dropped): the name catalogue.yaml's dates are keyed by."""
    return uri.rsplit("/", 1)[-1].split("@", 1)[0].split(":", 1)[0]


def due(today: datetime.date, days: int = WARN_DAYS) -> tuple[Ending, ...]:
    """The facts whose end is at most `days` away from `today`, or already past."""
    return tuple(e for e in endings() if (e.end_of_availability - today).days <= days)


def check_offered(image_uri: str, today: datetime.date) -> str:
    """`image_uri` if Google still offers it on `today`; EndedError on and after its end of
    availability (images without a documented end, ours among them, always pass)."""
    name = image_name(image_uri)
    for ending in endings():
        if name in ending.names and today >= ending.end_of_availability:
            raise EndedError(f"{name} ({ending.about}) is no longer offered: its end of "
                             f"availability was {ending.end_of_availability} "
                             f"({ending.source}); {ending.fix}")
    return image_uri
