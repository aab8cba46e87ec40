"""Tests that describe a Vertex AI job's hardware as one Vertex-shaped value
(launch/targets/vertex/resources.py) put it on a request as the request carries it: the
neutral needs plus Vertex AI's own options (the way `jobfile.request` builds one)."""

from __future__ import annotations

import dataclasses
from typing import Any

from launch.targets.vertex.options import VertexOptions
from launch.targets.vertex.resources import Resources
from launch.values import resources as neutral


def on_vertex(resources: Resources) -> dict[str, Any]:
    """A request's `resources` and `target_options` for these Vertex AI resources."""
    scheduling = resources.scheduling
    return {"resources": neutral.Resources(resources.accelerator, resources.tpu,
                                           resources.workers, scheduling.strategy),
            "target_options": VertexOptions(
                machine_type=resources.machine_type, tpu_topology=resources.tpu_topology,
                reduction_servers=resources.reduction_servers,
                max_wait_hours=scheduling.max_wait_hours, reservation=scheduling.reservation,
                persistent_resource=scheduling.persistent_resource,
                timeout_hours=scheduling.timeout_hours)}


def with_vertex(request: Any, resources: Resources) -> Any:
    """`request` on these Vertex AI resources instead."""
    return dataclasses.replace(request, **on_vertex(resources))
