"""Targets: where jobs run, one package each behind `base.Executor`, chosen by name from
`TARGETS` and imported only when chosen (as trainer/data/formats registers formats): a new
target is one module and one line here."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from launch.errors import InputError

if TYPE_CHECKING:
    from launch.targets.base import Executor, Target

# --target NAME -> "module:class"; the first is the default
TARGETS: dict[str, str] = {
    "local": "launch.targets.local.executor:Local",
    "vertex": "launch.targets.vertex.executor:Vertex",
}


def executor_for(name: str, target: Target) -> Executor:
    """The executor of the target named `name` (--target), for what the flags say."""
    if name not in TARGETS:
        raise InputError(f"--target {name!r} is not available; use one of "
                         f"{', '.join(TARGETS)}")
    module, _, cls = TARGETS[name].partition(":")
    return getattr(importlib.import_module(module), cls).from_target(target)
