"""`invoke runs.list`, `runs.compare` and `runs.show`: runs here or in the bucket, side by
side, and where each serving model came from.

A run is named by its model directory here (`work/model`, `work/sweep/trial-003`), a gs://
model directory, or its id in the bucket: `RUN` (gs://BUCKET/runs/RUN/checkpoints) or
`SWEEP/TRIAL` (a Vertex AI tuning trial: gs://BUCKET/runs/SWEEP/TRIAL/checkpoints). Runs in
the bucket are read from a mirror of their small files (never their checkpoints); their cost
comes from their jobs, as the target that keeps runs there prices them (`base.RUNS`,
through the registry: Vertex AI's), when those can be read.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from launch import targets
from launch.context.cloud import Cloud
from launch.context.places import RUN_ID
from launch.errors import InputError, MissingError
from launch.features.runs.record import LOGS_DIR, RunRecord, find_runs, load_run
from launch.features.runs.report import Report, table, write_report
from launch.stores.gcs import mirror
from launch.stores.gcs.upload import list_blobs
from launch.targets.base import RUNS, SERVING
from trainer.common.files import (
    BEST_DIR,
    BEST_FILE,
    METRICS_DIR,
    METRICS_FILE,
    RUN_FILE,
    RUNS_PREFIX,
    TEST_METRICS_DIR,
    TRAINING_SUMMARY_FILE,
    WORST_IMAGE_FILE,
)
from trainer.model.best.choice import BEST, DEFAULT_CHOICE, Choice

CHECKPOINTS = "checkpoints"
EVENTS = re.compile(r"train/events\.out\.tfevents\.[^/]+")
RECORD_FILE = re.compile("|".join([
    re.escape(RUN_FILE), re.escape(TRAINING_SUMMARY_FILE), re.escape(f"{BEST_DIR}/{BEST_FILE}"),
    *(f"{METRICS_DIR}/{name.pattern}" for name in (METRICS_FILE, WORST_IMAGE_FILE)),
    f"{TEST_METRICS_DIR}/{METRICS_FILE.pattern}",  # the test split's evaluations
    EVENTS.pattern]))
BUCKET_RUNS = 50  # runs.list reads the newest this many runs in the bucket


def is_record_file(name: str) -> bool:
    return RECORD_FILE.fullmatch(name) is not None


def _stage(client, url: str, cache_dir: Path) -> Path:
    """The run's record files mirrored (and its Vertex log directory's loss events)."""
    local = mirror.stage_directory(client, url, cache_dir, keep=is_record_file)
    if url.endswith(f"/{CHECKPOINTS}"):  # Vertex AI's AIP_TENSORBOARD_LOG_DIR beside it
        # no TensorBoard attached: the loss is under the checkpoints (or nowhere)
        with contextlib.suppress(MissingError):
            mirror.stage_directory(client, f"{url.removesuffix(CHECKPOINTS)}{LOGS_DIR}",
                                   cache_dir, keep=EVENTS.fullmatch)
    return local


def run_id_parts(ref: str) -> list[str]:
    """`RUN` or `SWEEP/TRIAL`, each part a run id; InputError otherwise."""
    parts = ref.split("/")
    if len(parts) > 2 or not all(RUN_ID.fullmatch(part) for part in parts):
        shown = ref if len(ref) <= 80 else f"{ref[:80]}..."
        raise InputError(f"{shown!r} is neither a directory here nor a run id in the bucket "
                         "(RUN or SWEEP/TRIAL, each 1-63 lowercase letters, digits, '_' or "
                         "'-'); `invoke runs.list` shows the runs")
    return parts


def load(cloud: Callable[[], Cloud], ref: str, cache_dir: Path = mirror.CACHE_DIR,
         choice: Choice = DEFAULT_CHOICE) -> RunRecord:
    """One run, however it is named, showing the evaluation `choice` names."""
    if Path(ref).is_dir():
        if not (Path(ref) / RUN_FILE).exists():
            raise MissingError(f"{ref} is not a run's model directory (it has no {RUN_FILE})")
        return load_run(Path(ref), ref, choice=choice)
    if mirror.is_gcs(ref):
        return load_run(_stage(cloud().storage(), ref.rstrip("/"), cache_dir), ref,
                        choice=choice)
    parts = run_id_parts(ref)
    settings = cloud()
    bucket = settings.fields(("bucket",))["bucket"]
    url = f"gs://{bucket}/{RUNS_PREFIX}/{'/'.join(parts)}/{CHECKPOINTS}"
    try:
        local = _stage(settings.storage(), url, cache_dir)
    except MissingError:
        raise MissingError(f"no run {ref!r}: not a directory here, and nothing at {url}; "
                           "`invoke runs.list` shows the runs") from None
    cost = targets.first(RUNS, settings).cost(parts)
    return load_run(local, ref, cost, choice)


def compare(cloud: Callable[[], Cloud], refs: Sequence[str], out: Path,
            cache_dir: Path = mirror.CACHE_DIR, checkpoint: Choice = DEFAULT_CHOICE
            ) -> str:
    if not refs:
        raise InputError("name the runs to compare: model directories, gs:// paths or run "
                         "ids (`invoke runs.list` shows them)")
    refs = [run for ref in refs for run in expand(ref)]
    if len(set(refs)) != len(refs):
        raise InputError("a run is named twice")
    records = [load(cloud, ref, cache_dir, checkpoint) for ref in refs]
    report: Report = write_report(records, out)
    for record in records:
        if not record.evaluations:
            print(f"note: {record.name} has no evaluation yet (eval/ckpt-N.json)",
                  file=sys.stderr)
        elif record.shown is None:
            print(f"note: {record.name} has no evaluation of {checkpoint}", file=sys.stderr)
        elif checkpoint.kind == BEST and record.shown.step != record.best_step:
            print(f"note: {record.name} keeps no best checkpoint (best/best.json): its newest "
                  "evaluation is shown", file=sys.stderr)
    return report.summary()


def expand(ref: str) -> list[str]:
    """A local directory of runs (a sweep's) stands for the runs in it."""
    path = Path(ref)
    if path.is_dir() and not (path / RUN_FILE).exists():
        return [str(run) for run in find_runs(path)] or [ref]
    return [ref]


def bucket_runs(cloud: Cloud) -> list[str]:
    """Run ids (and SWEEP/TRIAL ids) in the bucket that have a run.json, newest names first."""
    bucket = cloud.fields(("bucket",))["bucket"]
    suffix = f"/{CHECKPOINTS}/{RUN_FILE}"
    ids = []
    for blob in list_blobs(cloud.storage(), bucket, RUNS_PREFIX):
        name = blob.name.removeprefix(f"{RUNS_PREFIX}/")
        if name.endswith(suffix):
            try:
                ids.append("/".join(run_id_parts(name.removesuffix(suffix))))
            except InputError:
                continue  # an object name that is no run id is not listed (nor followed)
    return sorted(ids, reverse=True)[:BUCKET_RUNS]


def list_runs(root: Path, cloud: Callable[[], Cloud] | None = None,
              cache_dir: Path = mirror.CACHE_DIR) -> str:
    """The runs below `root` here, or (with `cloud`) the runs in the bucket."""
    if cloud is not None:
        refs = bucket_runs(cloud())
        if not refs:
            return "no runs in the bucket yet"
        return table([load(cloud, ref, cache_dir) for ref in refs])
    if not root.is_dir():
        raise MissingError(f"{root} is not a directory")
    records = [load_run(path, str(path)) for path in find_runs(root, skip=(cache_dir,))]
    return table(records) if records else f"no runs below {root} (a run has {RUN_FILE})"


def show(target: str, cloud: Callable[[], Cloud], state: str) -> str:
    """`invoke runs.show`: where each serving model came from (its dataset version, run and
    checkpoint): what the target serves (`base.SERVING`, through the registry), or, for a
    target that serves none, the local pipeline's versions in its states below `state`."""
    if targets.offers(target, SERVING):
        return targets.offered(target, SERVING, cloud()).origins()
    from launch.features.pipeline.steps import origins

    return origins(state)
