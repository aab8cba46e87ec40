"""The job file each run stores beside its checkpoints: what `--rerun` repeats, and where
`invoke eval` finds the run's own data (a directory, or the named dataset's version,
NAME@VERSION). A local run keeps it in its model directory; a Vertex AI run at
gs://BUCKET/runs/RUN_ID/job.yaml."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Collection, Mapping
from pathlib import Path

from google.api_core.exceptions import GoogleAPIError
from google.auth.exceptions import DefaultCredentialsError, GoogleAuthError

from launch.context.cloud import Cloud, run_paths, stamp
from launch.context.places import RunIdError
from launch.errors import InputError, MissingError, UserError, reason
from launch.stores.gcs.mirror import GcsPath, is_gcs
from launch.stores.gcs.upload import read_bytes, read_json
from launch.stores.runs import configs
from launch.values import jobfile, pretrained
from trainer.common.errors import JsonError, SettingsError
from trainer.common.files import JOB_FILE, MAX_RUN_JSON_BYTES, RUN_FILE
from trainer.common.io import read_regular
from trainer.data import datasets
from trainer.model.model_dir import recorded_experiment

MAX_BYTES = 1 << 20


def store_local(model_dir: str, text: str) -> None:
    path = Path(model_dir)
    path.mkdir(parents=True, exist_ok=True)
    (path / JOB_FILE).write_text(text)


def store_in_bucket(cloud: Cloud, run_id: str, text: str) -> str:
    """Writes the run's job file; its gs:// URL."""
    paths = run_paths(cloud, run_id)
    url = f"{paths.root}/{JOB_FILE}"
    cloud.storage().bucket(paths.bucket).blob(url.removeprefix(f"gs://{paths.bucket}/")) \
        .upload_from_string(text, content_type="application/yaml", timeout=60)
    return url


def stored_job(cloud: Cloud, run: str) -> tuple[str, str]:
    """The job file of `run`: a local model directory holding one, else a run id in the
    bucket; (its text, where it was read)."""
    local = Path(run, JOB_FILE)
    if local.is_file():
        return _text(_read_local(local), f"--rerun {run}: {local}"), str(local)
    if "/" in run or run.startswith("."):
        raise MissingError(f"--rerun {run[:100]}: no {JOB_FILE} there (a run started by "
                           "`invoke train` stores one in its model directory)")
    try:
        paths = run_paths(cloud, run)
    except RunIdError:
        raise RunIdError(f"--rerun {run[:80]!r} is neither a local model directory with a "
                         f"{JOB_FILE} nor a run id (lowercase letters, digits, '_', '-')"
                         ) from None
    data = _read_bucket(cloud.storage(), paths.bucket, f"{paths.root}/{JOB_FILE}")
    if data is None:
        raise MissingError(f"--rerun {run}: no {JOB_FILE} in {paths.root} (runs launched "
                           "before job files were stored cannot be rerun this way)")
    return _text(data, f"--rerun {run}: {paths.root}/{JOB_FILE}"), f"{paths.root}/{JOB_FILE}"


def rerun(cloud: Cloud, run: str, given: Collection[str] = ()) -> tuple[str, dict]:
    """`--rerun RUN`: the run's job file as a new run's (where it came from, its mapping):
    a fresh run id, and a local run's model directory beside the original. Only what a
    launch records is replayed (`replayable`); `given`: the fields the command line sets.
    The same data unless the command line names other (--dataset or --data-dir): a named
    dataset's recorded version, and a dataset recorded without one is refused."""
    text, where = stored_job(cloud, run)
    source = f"--rerun {run} ({where})"
    file = jobfile.parse(text, source)
    if not {"dataset", "data_dir"} & set(given):
        unversioned(file.get("dataset"), source, "rerun it")
    local = Path(run, JOB_FILE).is_file()
    file.pop("run-id", None)
    file.pop("model-dir", None)
    replayable(file, source, run if local else run_paths(cloud, run).root, local, given)
    if local:
        file["model-dir"] = f"{run.rstrip('/')}-rerun-{stamp()}"
    return source, file


# A rerun from the bucket reads a file every researcher and the trainer's own account can
# write: it may set what a launch writes, and nothing else. Longer than Vertex AI's default
# timeout ("The maximum job running time. The default is 7 days.", Scheduling.timeout,
# https://cloud.google.com/vertex-ai/docs/reference/rest/v1/CustomJobSpec, read 2026-11-26)
# is taken only from the command line.
REPLAY_MAX_HOURS = 7 * 24.0


def replayable(file: Mapping, source: str, run_root: str, local: bool,
               given: Collection[str] = ()) -> None:
    """Refuses, in one line, a stored job file its launch could not have written: a key a
    training launch does not write, another target than the one that stores files there, a
    path on this machine in a run from the bucket, a config file that is not the run's own
    copy, or a timeout over REPLAY_MAX_HOURS the command line does not give."""
    fix = "a rerun replays only what its launch recorded (review the file, then pass it to --job)"
    for name in file:
        if name not in jobfile.written_keys(jobfile.TRAIN):
            raise InputError(f"{source}: {str(name)[:80]!r} is not a key a training launch "
                             f"writes; {fix}")
    target = "local" if local else "vertex"
    if file.get("target") != target:
        raise InputError(f"{source}: target {str(file.get('target'))[:40]!r}, but a run stored "
                         f"{'in a model directory' if local else 'in the bucket'} was launched "
                         f"with target {target}; {fix}")
    for field in jobfile.FIELDS.values():
        values = file.get(jobfile.key(field))
        if not field.metadata["path"] or values is None:
            continue
        for value in values if isinstance(values, list) else [values]:
            shown = f"{source}: {jobfile.key(field)} {str(value)[:100]!r}"
            if field.name == "config_file":
                if not isinstance(value, str) or not configs.is_copy(value, run_root, local):
                    raise InputError(f"{shown} is not the run's copy "
                                     f"({run_root.rstrip('/')}/config-N.yaml); {fix}")
            elif not local and not (isinstance(value, str) and (
                    value.startswith(("gs://", "https://")) or
                    (field.name == "init_from" and not pretrained.is_path(value)))):
                raise InputError(f"{shown} is a path on this machine, which a launch on Vertex "
                                 f"AI never records; {fix}")
    vertex = file.get("vertex")  # `file` is in this version's layout (jobfile.parse)
    hours = vertex.get("timeout-hours") if isinstance(vertex, Mapping) else None
    if "timeout_hours" in given or hours is None:
        return
    try:
        hours = jobfile.flag_value("timeout_hours", hours)  # `"87600"` is a number too
    except InputError as error:
        raise InputError(f"{source}: {error}") from None
    if hours > REPLAY_MAX_HOURS:
        raise InputError(f"{source}: vertex: timeout-hours {hours:g} is more than "
                         f"{REPLAY_MAX_HOURS:g} (7 days, Vertex AI's default); give "
                         "--timeout-hours on the command line to run that long")


def _read_bucket(storage_client, bucket: str, url: str) -> bytes | None:
    """Up to one byte past MAX_BYTES: a larger file is told from one at the limit."""
    return read_bytes(storage_client, bucket, url.removeprefix(f"gs://{bucket}/"), MAX_BYTES)


def _read_local(path: Path) -> bytes:
    return read_regular(path, MAX_BYTES)


def _text(data: bytes, shown: str | None = None) -> str | None:
    """A stored job file's text; one larger than MAX_BYTES is refused (`shown`: the flag
    and file to name) or None, never cut short (a cut YAML can parse, as less)."""
    if len(data) <= MAX_BYTES:
        return data.decode("utf-8", "replace")
    if shown is None:
        return None
    raise InputError(f"{shown} is larger than {MAX_BYTES >> 10} KiB; a job file is a page of "
                     "settings")


@dataclasses.dataclass(frozen=True)
class RecordedData:
    """The data a stored job file says its run read: a directory, or a named dataset's
    version (NAME@VERSION); neither when it recorded none."""

    data_dir: str | None = None
    dataset: str | None = None
    where: str = JOB_FILE


def unversioned(dataset: object, where: str, action: str) -> None:
    """Refuses a stored job naming a dataset without the version its run read (stored
    before job files recorded it): any version chosen now could be other data."""
    if dataset is None or (isinstance(dataset, str) and "@" in dataset):
        return
    if not isinstance(dataset, str):  # `dataset: 2026` would be read as the name "2026"
        raise InputError(f"{where}: dataset {str(dataset)[:80]!r} is not a dataset "
                         "reference (NAME@VERSION, text); say which data: --dataset "
                         "NAME@VERSION (`invoke data.list`) or --data-dir")
    raise InputError(f"{where} names dataset {dataset[:80]!r} without the version the run "
                     f"read; to {action}, say which data: --dataset {dataset[:80]}@VERSION "
                     "(`invoke data.list`) or --data-dir")


def recorded_data(text: str | None, where: str = JOB_FILE) -> RecordedData:
    """The data a stored job file names. An unreadable file records none; a dataset
    without its version, or not a dataset reference, is refused (an evaluation would read
    other data)."""
    try:
        data = jobfile.parse(text, where) if text else None
    except InputError:
        return RecordedData(where=where)
    if not isinstance(data, dict):
        return RecordedData(where=where)
    dataset, data_dir = data.get("dataset"), data.get("data-dir")
    if dataset is not None:
        unversioned(dataset, where, "evaluate it")
        try:
            datasets.split_reference(dataset, f"dataset (in {where})")
        except SettingsError as error:
            raise InputError(str(error)) from None
        return RecordedData(dataset=dataset, where=where)
    return RecordedData(data_dir if isinstance(data_dir, str) and data_dir else None,
                        where=where)


def local_run_data(model_dir: str) -> RecordedData:
    """The data the local run in `model_dir` trained on, as its job file records it."""
    path = Path(model_dir, JOB_FILE)
    if is_gcs(model_dir) or not path.is_file():
        return RecordedData()
    return recorded_data(_text(_read_local(path)), str(path))


def bucket_run_data(cloud: Cloud, run_id: str) -> RecordedData:
    """The data the Vertex AI run `run_id` trained on, as its job file records it."""
    paths = run_paths(cloud, run_id)
    url = f"{paths.root}/{JOB_FILE}"
    data = _read_bucket(cloud.storage(), paths.bucket, url)
    return recorded_data(_text(data), url) if data is not None else RecordedData()


def recorded_run(job: jobfile.JobFile, model_dir: str, cloud: Callable[[], Cloud],
                 in_bucket: bool = False) -> jobfile.Run | None:
    """The run `job` would continue or evaluate, if it exists: its model directory
    (`model_dir`, here or gs://), or where the target keeps runs in the bucket (`in_bucket`,
    the target's `runs_in_bucket`) the run --run-id names (a new run id is new: nothing to
    read); with the experiment its run.json names (jobfile.resolve takes it from there).
    A bucket that cannot be read is a note (no credentials: none, the launch says so): the
    trainer refuses another experiment too."""
    if not in_bucket:
        where, flag = model_dir.rstrip("/") or model_dir, "--model-dir"
        shown = f"{flag} {where}"
    elif job.run_id:
        where, flag = None, "--run-id"
        shown = f"{flag} {job.run_id}"
    else:
        return None
    try:
        if where is None:
            paths = run_paths(cloud(), job.run_id)
            where, url = paths.root, f"{paths.checkpoints}/{RUN_FILE}"
        else:
            url = f"{where}/{RUN_FILE}"
        if is_gcs(url):
            location = GcsPath.parse(url)
            found = read_json(cloud().storage(), location.bucket, location.prefix,
                              MAX_RUN_JSON_BYTES)
            experiment = found.get("experiment") if isinstance(found, dict) else None
            if found is not None and not isinstance(experiment, str):
                raise JsonError(f"{url} is not a run file: it names no experiment")
        else:
            experiment = recorded_experiment(where)
    except (ValueError, OSError) as error:  # JsonError, a file that is not text
        raise InputError(f"{shown[:200]}: {reason(error)}; choose another {flag}") from None
    except InputError:
        raise
    except DefaultCredentialsError:  # the launch says so itself (a dry run: with a note)
        return None
    except (GoogleAPIError, GoogleAuthError, UserError) as error:
        print(f"note: the experiment of {shown[:200]} is not checked here "
              f"({reason(error)}); the trainer checks it", file=sys.stderr)
        return None
    return jobfile.Run(experiment, where, flag) if experiment else None
