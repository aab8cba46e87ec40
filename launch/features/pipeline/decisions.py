"""The pipeline's decisions that do not depend on where its runs live: its job file as the
steps read it, whether a dataset version is worth training, what the gate's refusals and
the evaluate step's records say in the state's decisions, and one job of the file launched
as `invoke train --job` launches it. The local steps (steps.py) and the steps on a target's
services (on_vertex.py) both build on these; neither on the other's."""

from __future__ import annotations

import dataclasses

from launch import targets
from launch.errors import InputError
from launch.features.pipeline import state as pipeline_state
from launch.features.pipeline.state import run_id_for
from launch.targets import champion
from launch.targets.base import SERVING
from launch.targets.champion import GateError
from launch.values import jobfile
from trainer.data import datasets

SOURCE = "the pipeline's job file"


def job_of(text: str) -> jobfile.JobFile:
    """The pipeline's job file, checked as `invoke train --job` checks it: for a target whose
    runs are directories here (local), data-dir, the directory of the dataset's versions;
    for one whose runs live in the bucket (vertex), dataset, a named dataset, and the target
    serves models (`base.SERVING`) for the steps to upload and deploy them."""
    job = jobfile.resolve(jobfile.TRAIN, {}, jobfile.parse(text, SOURCE), SOURCE)
    bucket = in_bucket(job.target)
    if bucket and not targets.offers(job.target, SERVING):
        able = [name for name in targets.TARGETS
                if not in_bucket(name) or targets.offers(name, SERVING)]
        raise InputError(f"target: {job.target} ({SOURCE}): the pipeline's steps run on "
                         f"{' or '.join(able)}")
    if not bucket and not job.data_dir:
        raise InputError(f"{SOURCE}: give data-dir, the directory of the dataset's versions")
    if bucket and not job.dataset:
        raise InputError(f"{SOURCE}: give dataset, the named dataset whose new versions the "
                         "pipeline trains on (`invoke data.upload`)")
    return job


def in_bucket(target: str) -> bool:
    """Whether the target's runs live in the bucket (`runs_in_bucket`): its steps are
    on_vertex.py's, on the bucket and the target's serving; else the ones here."""
    return targets.executor_class(target).runs_in_bucket


def fresh(found: list[str], trained_on: str | None, refused: dict[str, str]
          ) -> tuple[bool, str, str]:
    """Whether to train: the newest version, when it is newer than the serving one's and
    the gate has not already refused a run on it (`refused`: version -> why)."""
    if not found:
        return False, "", "the dataset has no version yet"
    newest = found[-1]
    if trained_on is not None and newest <= trained_on:
        return False, "", f"no version newer than {trained_on}, the serving model's"
    if newest in refused:
        return False, "", (f"{newest} was tried and refused ({refused[newest]}); the next "
                           "version will be tried")
    return True, newest, (f"{newest} is newer than {trained_on}, the serving model's"
                          if trained_on else f"{newest}: nothing serves yet")


def decided_version(decision, step: str) -> str | None:
    """A decision's dataset version, when it is a decision of `step` naming one (a state
    file is read, not trusted: anything else in it is passed over)."""
    if not isinstance(decision, dict) or decision.get("step") != step:
        return None
    version = decision.get("version")
    return version if isinstance(version, str) and datasets.VERSION.fullmatch(version) \
        else None


def refusals_in(made: list[dict]) -> dict[str, str]:
    """The versions whose run the gate found worse than the serving version -> why."""
    return {version: str(d.get("reason"))[:500] for d in made
            if (version := decided_version(d, "compare")) and d.get("worse") is True}


def launch(job: str, task: str, cloud_for=None, poll_seconds: float | None = None,
           **flags) -> str:
    """One job of the job file, as `invoke train --job` or `invoke eval --job` launches it
    (launch/features/launching.py), with `flags` over the file; what the executor says.
    `cloud_for`: the environment (default: none, the local target's); `poll_seconds`: how
    often a followed Vertex AI job's state is read (its log is not: the pipeline's account
    reads no logs)."""
    from launch.context.cloud import Cloud
    from launch.features import launching

    def local_cloud(job_region=None, job_image=None):  # the local target reads no settings
        return Cloud(overrides={"region": job_region, "image": job_image})

    request, executor = launching.prepare(task, flags, cloud_for or local_cloud, "work",
                                          "work/records",
                                          source=(SOURCE, jobfile.parse(job, SOURCE)))
    if poll_seconds is not None:
        executor = dataclasses.replace(executor, handover=dataclasses.replace(
            executor.handover, poll_seconds=poll_seconds, read_logs=False))
    return request.hand_to(executor)


def evaluated(run_id: str, written: list[champion.Figure], decide_with) -> None:
    """The evaluate step's decision: the sha256 of the test records its jobs wrote, which
    the gate then takes as the pipeline's own (vouched_in), and a rewrite of which it
    refuses."""
    said = "; ".join(f"run {f.run_id} ckpt-{f.step}: {f.value:.3f} on the test split"
                     for f in written)
    decide_with(step="evaluate", go=True, run=run_id, records=[f.sha256 for f in written],
                reason=said)


def vouched_in(made: list[dict]) -> frozenset[str]:
    """The sha256 of every test record the pipeline's evaluate steps wrote (a state file
    is read, not trusted: anything else in it is passed over)."""
    return frozenset(sha for d in made if isinstance(d, dict) and d.get("step") == "evaluate"
                     and isinstance(d.get("records"), list) for sha in d["records"]
                     if isinstance(sha, str) and pipeline_state.SHA256.fullmatch(sha))


def refusal(refused: GateError, run_id: str, version: str, worse: bool, vertex: bool
            ) -> str:
    """The gate's refusal as the compare step records and prints it: what is wrong, then
    what a person can do with the flags the tasks take (not the gate's own advice to pass
    --force: the pipeline takes none, so a schedule forces no run nobody reads). A worse
    run's version is not trained again by this pipeline (refusals_in); any other refusal's
    is tried again by its next run."""
    problem = refused.problem if isinstance(refused, champion.Refused) else str(refused)
    then = (f"this pipeline does not train {version or 'that version'} again; its next run "
            "trains the dataset's next version" if worse
            else f"the next run tries {version or 'that version'} again")
    if vertex:
        return (f"{problem}; {then}; to serve run {run_id} anyway, upload it by hand: "
                f"`invoke model.upload --run-id {run_id} --force REASON`")
    if worse:
        return (f"{problem}; {then} (a new directory in the job file's data-dir), judged "
                "again by --max-drop: `invoke pipeline.run --job FILE --max-drop DROP` "
                "allows a larger drop")
    return f"{problem}; {then}: `invoke pipeline.run --job FILE`"


def version_in(state: str, made: list[dict], run_id: str) -> str:
    """The dataset version `run_id` was trained on, as its run's decision named it."""
    return next((version for d in reversed(made)
                 if (version := decided_version(d, "resolve dataset"))
                 and run_id_for(state, version) == run_id), "")
