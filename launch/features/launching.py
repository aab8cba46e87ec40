"""A job task's way from its flags to its target's executor, for `invoke train`, `eval` and
`tune` and for the continuous-training pipeline's steps alike: the job file (`--job`, or the
one the run `--rerun` names), the flags over it, each value checked, a named dataset pinned
to one version, then the request of the task's kind and the executor of the job's target.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from launch.context.cloud import Cloud
from launch.errors import InputError
from launch.values import jobfile, jobs
from launch.values.jobs import TrainerDirs

More = Callable[[dict, Mapping, str], Mapping[str, Any]]  # a task's own flags -> job fields


class CloudFor(Protocol):
    """The task's Cloud, with the job's region and image over its flags'."""

    def __call__(self, job_region: str | None = None, job_image: str | None = None
                 ) -> Cloud: ...


def job_source(flags: Mapping[str, Any], cloud_for: CloudFor) -> tuple[str, dict]:
    """The file a job starts from: --job's, the stored one of the run --rerun names (as a
    new run: its run id and model directory are not reused), or none."""
    if flags.get("job") and flags.get("rerun"):
        raise InputError("--job and --rerun both give the job: choose one")
    if flags.get("job"):
        return f"--job {flags['job']}", jobfile.read(flags["job"])
    if not flags.get("rerun"):
        return "", {}
    from launch.stores.runs.jobfiles import rerun

    return rerun(cloud_for(), flags["rerun"], jobfile.given(flags))


def prepare(task: str, flags: dict, cloud_for: CloudFor, local_root: str, records_dir: str,
            more: More | None = None, source: tuple[str, dict] | None = None):
    """(the request, the executor it goes to); nothing is built, sent or run yet.
    `local_root`: where local runs go by default (each kind in its own folder);
    `records_dir`: the data a local job reads by default; `source`: the job file's
    (name, contents) when the caller has it, else --job's or --rerun's."""
    from launch.stores.runs.jobfiles import recorded_run
    from launch.targets import executor_class, executor_for
    from launch.targets.base import Handover, LaunchFlags

    shown, file = source if source is not None else job_source(flags, cloud_for)
    if more:
        flags.update(more(flags, file, shown))
    local_dir = f"{local_root}/{jobs.KINDS[task].local_dir}"
    job = jobfile.resolve(task, flags, file, shown, lambda found: recorded_run(
        found, found.model_dir or local_dir, cloud_for,
        executor_class(found.target).runs_in_bucket))
    request = jobfile.request(job, task)
    into_cloud = jobfile.into(job, "cloud")  # the target's options over the Cloud's settings
    cloud = cloud_for(into_cloud.get("region"), into_cloud.get("image"))
    if job.dataset:
        from launch.stores.gcs import datasets

        request = datasets.pinned(cloud, request, job.dataset)
    dirs = TrainerDirs(job.model_dir or local_dir, job.data_dir or records_dir)
    handover = Handover(bool(flags.get("dry_run")),
                        jobfile.check_save_path(flags.get("save_job")) or None, job.max_cost)
    launch_flags = LaunchFlags(dirs, cloud, handover, bool(flags.get("force")),
                               bool(flags.get("local_docker")), bool(flags.get("follow")), job,
                               request.resources.capacity)
    return request, executor_for(job.target, launch_flags)
