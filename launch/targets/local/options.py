"""The local target's own job option (`--detach`, a key of the job file's `local:` section),
declared as Vertex AI's are (launch/targets/vertex/options.py)."""

from __future__ import annotations

import dataclasses

from launch.values import capabilities
from launch.values.jobfile import EVAL, TRAIN, option


@dataclasses.dataclass(frozen=True)
class LocalOptions:
    """This machine's part of a job; `Local.from_flags` reads it."""

    detach: bool = option("run in the background and return at once: `invoke jobs.list "
                          "--target local` lists it, jobs.logs, jobs.wait and jobs.cancel "
                          "reach it", default=False, tasks=frozenset({TRAIN, EVAL}),
                          needs=capabilities.BACKGROUND)
