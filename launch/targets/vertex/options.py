"""Vertex AI's own job options: what a job on Vertex AI can say beyond the neutral job (its
machine type, TPU topology, Reduction Server, capacity set aside, web access, timeout, region
and image, the capacity ladder). Each is a flag of the job tasks and a key of the job file's
`vertex:` section (evaluation's machine: `eval: vertex:`), declared once here; each names the
capability it needs, so another target refuses it in those words. Pure values: no SDK."""

from __future__ import annotations

import dataclasses

from launch.values import capabilities
from launch.values.jobfile import EVAL, TRAIN, TRAINING, JobFileError, option
from launch.values.resources import HOURS, PREEMPTIONS, REPLICAS, WAIT_HOURS

LADDER_TASKS = frozenset({TRAIN})  # a sweep's trials and an evaluation climb none


@dataclasses.dataclass(frozen=True)
class VertexOptions:
    """Vertex AI's part of a job; `Vertex.from_flags` reads the ladder's, `jobfile.request`
    the rest (`into`)."""

    region: str | None = option("the cloud region, by default the infra outputs'",
                                needs=capabilities.REGION, into="cloud")
    image: str | None = option("an Artifact Registry image to run, by default these "
                               "sources' content-hash tag, built first if missing",
                               needs=capabilities.IMAGE, into="cloud")
    machine_type: str | None = option("e.g. n1-standard-8, g2-standard-8, a3-highgpu-8g",
                                      section=EVAL, needs=capabilities.MACHINE_TYPE,
                                      into="resources")
    tpu_topology: str | None = option("e.g. 2x2, 4x4, with a TPU --machine-type",
                                      section=EVAL, needs=capabilities.TPU, into="resources")
    reduction_servers: int = option("Reduction Server replicas beside GPU workers", default=0,
                                    tasks=TRAINING, bound=REPLICAS,
                                    needs=capabilities.REDUCTION_SERVERS, into="resources")
    max_wait_hours: float | None = option("--flex-start: hours to queue, 0 for no limit, "
                                          "default 24", section=EVAL, bound=WAIT_HOURS,
                                          needs=capabilities.FLEX_START, into="scheduling")
    reservation: str | None = option("consume a Compute Engine reservation: any, ZONE/NAME "
                                     "or its path", section=EVAL,
                                     needs=capabilities.RESERVATION, into="scheduling")
    persistent_resource: str | None = option("run on this Vertex AI persistent resource, by "
                                             "its ID", section=EVAL,
                                             needs=capabilities.RESERVATION, into="scheduling")
    web_access: bool = option("an interactive shell into each replica while it runs: "
                              "`invoke jobs.status` prints the links", default=False,
                              section=EVAL, needs=capabilities.WEB_ACCESS, into="request")
    timeout_hours: float = option("job timeout", default=24.0, section=EVAL, bound=HOURS,
                                  needs=capabilities.TIMEOUT, into="scheduling")
    regions: tuple = option("regions to try in order, e.g. us-central1,us-east4, instead of "
                            "--region: a job that finds no capacity is resubmitted in the "
                            "next (it waits); every hardware is tried in a region before the "
                            "next region", default=(), tasks=LADDER_TASKS, commas=True,
                            needs=capabilities.LADDER)
    fallback: tuple = option("machine types to try after the job's own hardware, in order, "
                             "e.g. a2-highgpu-1g,g2-standard-8, each with the accelerator it "
                             "comes with (it waits)", default=(), tasks=LADDER_TASKS,
                             commas=True, needs=capabilities.LADDER)
    capacity: tuple = option("kinds of capacity to try in order, e.g. "
                             "spot,flex-start,standard: a job that finds none is resubmitted "
                             "on the next (it waits)", default=(), tasks=LADDER_TASKS,
                             commas=True, needs=capabilities.LADDER)
    max_preemptions: int = option("--capacity: preempted jobs resubmitted on the same kind "
                                  "before the next", default=2, tasks=LADDER_TASKS,
                                  bound=PREEMPTIONS, needs=capabilities.LADDER)

    def __post_init__(self) -> None:
        if self.region and self.regions:
            raise JobFileError("--region and --regions: choose one (--regions lists the "
                               "regions to try, in order)")
        if (self.regions or self.fallback) and (self.reservation or self.persistent_resource):
            raise JobFileError("--reservation and --persistent-resource use capacity set "
                               "aside in one place, and --regions and --fallback look "
                               "elsewhere: drop one")
