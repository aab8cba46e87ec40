"""Vertex AI's own job options: what a job on Vertex AI can say beyond the neutral job (its
machine type, TPU topology, Reduction Server, capacity set aside, web access, timeout, region
and image, the capacity ladder). Each is a flag of the job tasks and a key of the job file's
`vertex:` section (evaluation's machine: `eval: vertex:`), declared once here; each names the
capability it needs, so another target refuses it in those words. Pure values: no SDK."""

from __future__ import annotations

import dataclasses
from typing import Any

from launch.targets.vertex.resources import HOURS, PREEMPTIONS, WAIT_HOURS, Resources, Scheduling
from launch.values import capabilities
from launch.values import resources as neutral
from launch.values.jobfile import EVAL, TRAIN, TRAINING, JobFileError, option
from launch.values.resources import REPLICAS, number

LADDER_TASKS = frozenset({TRAIN})  # a sweep's trials and an evaluation climb none


@dataclasses.dataclass(frozen=True)
class VertexOptions:
    """Vertex AI's part of a job; `Vertex.from_flags` reads the ladder's, `jobfile.request`
    the region, image and web access (`into`), `resources` the machine and scheduling."""

    region: str | None = option("the cloud region, by default the infra outputs'",
                                needs=capabilities.REGION, into="cloud")
    image: str | None = option("an Artifact Registry image to run, by default these "
                               "sources' content-hash tag, built first if missing",
                               needs=capabilities.IMAGE, into="cloud")
    machine_type: str | None = option("e.g. n1-standard-8, g2-standard-8, a3-highgpu-8g",
                                      section=EVAL, needs=capabilities.MACHINE_TYPE,
                                      into=None)
    tpu_topology: str | None = option("e.g. 2x2, 4x4, with a TPU --machine-type",
                                      section=EVAL, needs=capabilities.TPU, into=None)
    reduction_servers: int = option("Reduction Server replicas beside GPU workers", default=0,
                                    tasks=TRAINING, bound=REPLICAS,
                                    needs=capabilities.REDUCTION_SERVERS, into=None)
    max_wait_hours: float | None = option("--flex-start: hours to queue, 0 for no limit, "
                                          "default 24", section=EVAL, bound=WAIT_HOURS,
                                          needs=capabilities.FLEX_START, into=None)
    reservation: str | None = option("consume a Compute Engine reservation: any, ZONE/NAME "
                                     "or its path", section=EVAL,
                                     needs=capabilities.RESERVATION, into=None)
    persistent_resource: str | None = option("run on this Vertex AI persistent resource, by "
                                             "its ID", section=EVAL,
                                             needs=capabilities.RESERVATION, into=None)
    web_access: bool = option("an interactive shell into each replica while it runs: "
                              "`invoke jobs.status` prints the links", default=False,
                              section=EVAL, needs=capabilities.WEB_ACCESS, into=None)
    timeout_hours: float = option("job timeout", default=24.0, section=EVAL, bound=HOURS,
                                  needs=capabilities.TIMEOUT, into=None)
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

    def resources(self, needs: neutral.Resources) -> Resources:
        """The job's Vertex AI worker pools: the neutral `needs` (accelerator or TPU,
        workers, kind of capacity) on this machine type and topology, with these Reduction
        Server replicas and scheduling; checked (a TPU job is one slice, a reservation's
        form, the timeout's bounds...)."""
        scheduling = Scheduling.from_flags(
            spot=needs.capacity == "SPOT", flex_start=needs.capacity == "FLEX_START",
            timeout_hours=self.timeout_hours, max_wait_hours=self.max_wait_hours,
            reservation=self.reservation, persistent_resource=self.persistent_resource)
        return Resources(self.machine_type or None, needs.accelerator, needs.tpu,
                         self.tpu_topology or None, workers=needs.workers,
                         reduction_servers=number("--reduction-servers",
                                                  self.reduction_servers, int, REPLICAS),
                         scheduling=scheduling)

    def check(self, needs: neutral.Resources) -> None:
        """Vertex AI's checks of a request, when it is made (before anything is sent)."""
        self.resources(needs)


def options_of(request: Any) -> VertexOptions:
    """A request's Vertex AI options, or the defaults (a request made for another target
    carries none of Vertex AI's)."""
    own = request.target_options
    return own if isinstance(own, VertexOptions) else VertexOptions()


def resources_of(request: Any) -> Resources:
    """A request's Vertex AI worker pools: the neutral needs with its own options."""
    return options_of(request).resources(request.resources)
