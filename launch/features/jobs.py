"""`invoke jobs.list|status|logs|cancel|wait`: a target's jobs after launch, the same
commands and the same rows (`ID  STATE  CREATED  NAME  DETAIL`) for every target. The target
is reached through the registry (`launch.targets.jobs_of`), never by importing its package:
--target names it, or the job's id does (the first target that holds it: a local job's id is
in the local jobs table, work/jobs)."""

from __future__ import annotations

from launch import targets
from launch.context.cloud import Cloud
from launch.errors import InputError
from launch.text import say

LISTED = "vertex"  # jobs.list without --target: Vertex AI's, as before local jobs were kept


def job_command(cloud: Cloud, command: str, job: str | None = None,
                poll_seconds: float | None = None, lines: int = 100, follow: bool = False,
                notify: bool = False, target: str | None = None) -> str:
    """`invoke jobs.list|status|logs|cancel|wait` on the jobs of `target` (None: the one
    `job` names; jobs.list: LISTED). Vertex AI's need only the project and the region;
    `poll_seconds`: wait's and logs --follow's pace (None: the target's own); `notify`
    (wait): publish how the job ended to the stack's job-events topic (Vertex AI)."""
    if command == "list":
        name = target or LISTED
        return "\n".join(found.line() for found in targets.jobs_of(name, cloud).list()) or \
            f"no jobs on {targets.executor_class(name).title}"
    if not job:
        raise InputError(f"jobs.{command} needs --job (the id `invoke jobs.list` shows)")
    for flag, value in (("--lines", lines), ("--poll", poll_seconds or 0)):
        if value < 0:
            raise InputError(f"{flag} {value:g}: give 0 or more")
    life = targets.jobs_of(target, cloud) if target else targets.jobs_holding(job, cloud)
    poll = life.poll_seconds if poll_seconds is None else poll_seconds
    if command == "cancel":
        return life.cancel(job)
    if command == "logs":
        return life.logs(job, lines, follow, poll)
    if command == "wait":
        return life.wait(job, poll, say, notify)
    found = life.status(job)
    return "\n".join([found.line(), *found.notes])
