"""The targets' registry, `--target NAME` -> "module:Class": the one list of targets, in the
job values' layer so the job file's `--target` choices and the launcher's registry
(`launch.targets`, which imports a target's module only when it is chosen) are the same list.
Nothing here imports a target. A new target is one line here (and what docs/design/layers.md
lists besides, for its own flags, settings and job options)."""

from __future__ import annotations

from launch.errors import InputError
from trainer.common.registry import Registry

# an Executor class each (launch/targets/base.py, a layer above); the first is the default
TARGETS: Registry[type] = Registry("--target", InputError)
TARGETS.register_lazy("local", "launch.targets.local.executor:Local")
TARGETS.register_lazy("vertex", "launch.targets.vertex.executor:Vertex")
