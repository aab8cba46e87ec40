"""Targets: where jobs run, one package each behind `base.Executor`, chosen by name from
`TARGETS` (launch/values/target_names.py, where the job file's --target reads the names too)
and imported only when chosen (as trainer/data/formats registers formats): a new target is
a module (or a package, as local/ and vertex/ are) and one line there, plus what its own
flags and settings touch (docs/design/layers.md lists it). Its package declares what it can
do and its own job options (a `TargetSpec`, which the job file reads: a value it cannot take
is refused there, in `jobfile.resolve`); what else it offers features (`base.Offer`: tools,
tuning jobs, serving, ...) they ask of it here (`offered`), never by importing its package."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from launch.errors import InputError
from launch.values.target_names import TARGETS

if TYPE_CHECKING:
    from launch.context.cloud import Cloud
    from launch.targets.base import Executor, Jobs, LaunchFlags, Offer

T = TypeVar("T")


def executor_class(name: str) -> type[Executor]:
    """The executor class of the target named `name` (--target), its module imported now."""
    return TARGETS[name].executor_class()


def executor_for(name: str, flags: LaunchFlags) -> Executor:
    """The executor of the target named `name` (--target), for what the flags say."""
    return executor_class(name).from_flags(flags)


def jobs_of(name: str, cloud: Cloud) -> Jobs:
    """The jobs of the target named `name` (--target): what `invoke jobs.*` asks of it."""
    return executor_class(name).jobs(cloud)


def jobs_holding(job: str, cloud: Cloud) -> Jobs:
    """The jobs of the target `job` is an id of (jobs.* without --target): the first target,
    in the registry's order, that holds it (a local job's id is in the local table); none
    does: one line naming --job and the fix."""
    for name in TARGETS:
        if (found := jobs_of(name, cloud)).holds(job):
            return found
    raise InputError(f"--job {job[:80]!r} is no job's id here: use one `invoke jobs.list "
                     f"--target NAME` shows ({', '.join(TARGETS)}), or give its --target")


def offers(name: str, offer: Offer) -> bool:
    """Whether the target named `name` offers `offer` (its executor class has it)."""
    return hasattr(executor_class(name), offer.name)


def offering(offer: Offer) -> str:
    """The first target, in the registry's order, that offers `offer`: the one a task
    without --target asks (tune.status, model.upload, doctor)."""
    return _offering(offer)[0]


def first(offer: Offer[T], cloud: Cloud) -> T:
    """The `offer` of the first target that has it (`offering`): what a task without
    --target asks (`first(SERVING, cloud).upload(...)`)."""
    return offered(offering(offer), offer, cloud)


def offered(name: str, offer: Offer[T], cloud: Cloud) -> T:
    """The `offer` of the target named `name` (--target); a target without it: one line
    naming --target and the targets that offer it."""
    if not offers(name, offer):
        others = _offering(offer)
        where = " or ".join(executor_class(other).title for other in others)
        raise InputError(f"--target {name}: {offer.words} on {where} only: add "
                         f"--target {others[0]}")
    return getattr(executor_class(name), offer.name)(cloud)


def _offering(offer: Offer) -> list[str]:
    found = [name for name in TARGETS if offers(name, offer)]
    if not found:
        raise InputError(f"{offer.words} on no target")
    return found
