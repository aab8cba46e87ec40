"""The continuous-training pipeline's requests, as data: the run's parameters, the compiled
spec (definition.py) with the environment's launcher image bound in, a cron checked. Pure
functions: runs.py hands them to the target's pipeline service (`base.Pipelines`: Vertex
AI Pipelines' PipelineJob and Schedule are launch/targets/vertex/pipelines.py's).
"""

from __future__ import annotations

import copy
import re

from launch.errors import InputError
from launch.features.pipeline.definition import DEFAULT_CANARY, DEFAULT_MAX_DROP, IMAGE
from launch.features.pipeline.steps import NO_SETTINGS

# Vertex AI's cron: five fields, an optional "TZ=Area/City " or "CRON_TZ=..." first
# (aiplatform v1 Schedule.cron: "Cron schedule (https://en.wikipedia.org/wiki/Cron) to launch
# scheduled runs. To explicitly set a timezone to the cron tab, apply a prefix in the cron
# tab: "CRON_TZ=${IANA_TIME_ZONE}" or "TZ=${IANA_TIME_ZONE}"")
CRON = re.compile(r"((CRON_)?TZ=[A-Za-z0-9_+/-]{1,64} )?"
                  r"([0-9*/,-]{1,40} ){4}[0-9A-Za-z*/,-]{1,40}")
MAX_JOB_BYTES = 64 << 10  # a job file is a few hundred bytes; it travels as a parameter


def check_cron(cron: str) -> str:
    if not CRON.fullmatch(cron.strip()):
        raise InputError(f"--cron {cron[:80]!r}: give five cron fields, optionally after "
                         "TZ=Area/City, e.g. 'TZ=Europe/Berlin 0 3 * * 1' (Mondays at 03:00)")
    return cron.strip()


def parameters(job: str, state: str, canary_traffic: int = DEFAULT_CANARY,
               max_drop: float = DEFAULT_MAX_DROP, settings: str = NO_SETTINGS) -> dict:
    """The pipeline's parameters, checked as its steps would check them."""
    if not job.strip() or len(job.encode()) > MAX_JOB_BYTES:
        raise InputError(f"--job: the job file is empty or over {MAX_JOB_BYTES // 1024} KB")
    if not 1 <= canary_traffic <= 100:
        raise InputError(f"--canary-traffic is a percentage, 1 to 100, got {canary_traffic}")
    if not 0 <= max_drop < 1:
        raise InputError(f"--max-drop must be at least 0 and below 1, got {max_drop}")
    return {"job": job, "state": state, "canary_traffic": canary_traffic,
            "max_drop": max_drop, "settings": settings}


def with_image(spec: dict, image: str) -> dict:
    """The compiled spec with every step on `image` (the placeholder replaced)."""
    bound = copy.deepcopy(spec)
    executors = bound["deploymentSpec"]["executors"]
    for executor in executors.values():
        if executor["container"]["image"] != IMAGE:
            raise InputError(f"the pipeline spec names image {executor['container']['image']}"
                             f", not the placeholder {IMAGE}: recompile it "
                             "(`invoke pipeline.compile`)")
        executor["container"]["image"] = image
    return bound
