"""The targets' registry, `--target NAME` -> its `TargetSpec` (capabilities.py), declared in
its package and imported only when asked: the one list of targets, in the job values' layer
so the job file's `--target` choices, its target sections and flags, and the launcher's
registry (`launch.targets`, which imports a target's executor only when it is chosen) are
the same list. A spec imports no SDK. A new target is one line here (and what
docs/design/layers.md lists besides)."""

from __future__ import annotations

from launch.errors import InputError
from launch.values.capabilities import TargetSpec
from trainer.common.registry import Registry

# the first is the default
TARGETS: Registry[TargetSpec] = Registry("--target", InputError)
TARGETS.register_lazy("local", "launch.targets.local:LOCAL")
TARGETS.register_lazy("vertex", "launch.targets.vertex:VERTEX")
