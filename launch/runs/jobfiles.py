"""The job file each run stores beside its checkpoints: what `--rerun` repeats, and where
`invoke eval` finds the run's own data directory. A local run keeps it in its model
directory; a Vertex AI run at gs://BUCKET/runs/RUN_ID/job.yaml."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from google.api_core.exceptions import GoogleAPIError
from google.auth.exceptions import DefaultCredentialsError, GoogleAuthError

from launch import jobfile
from launch.cloud import Cloud, run_paths, stamp
from launch.errors import InputError, MissingError, UserError, reason
from launch.gcs.mirror import GcsPath, is_gcs
from launch.gcs.upload import read_bytes, read_json
from launch.places import RunIdError
from trainer.errors import JsonError
from trainer.files import JOB_FILE, MAX_RUN_JSON_BYTES, RUN_FILE
from trainer.model_dir import recorded_experiment

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


def rerun(cloud: Cloud, run: str) -> tuple[str, dict]:
    """`--rerun RUN`: the run's job file as a new run's (where it came from, its mapping):
    a fresh run id, and a local run's model directory beside the original."""
    text, where = stored_job(cloud, run)
    source = f"--rerun {run} ({where})"
    file = jobfile.parse(text, source)
    file.pop("run-id", None)
    file.pop("model-dir", None)
    if Path(run, JOB_FILE).is_file():
        file["model-dir"] = f"{run.rstrip('/')}-rerun-{stamp()}"
    return source, file


def _read_bucket(storage_client, bucket: str, url: str) -> bytes | None:
    """Up to one byte past MAX_BYTES: a larger file is told from one at the limit."""
    return read_bytes(storage_client, bucket, url.removeprefix(f"gs://{bucket}/"), MAX_BYTES)


def _read_local(path: Path) -> bytes:
    with path.open("rb") as file:
        return file.read(MAX_BYTES + 1)


def _text(data: bytes, shown: str | None = None) -> str | None:
    """A stored job file's text; one larger than MAX_BYTES is refused (`shown`: the flag
    and file to name) or None, never cut short (a cut YAML can parse, as less)."""
    if len(data) <= MAX_BYTES:
        return data.decode("utf-8", "replace")
    if shown is None:
        return None
    raise InputError(f"{shown} is larger than {MAX_BYTES >> 10} KiB; a job file is a page of "
                     "settings")


def recorded_data_dir(text: str | None) -> str | None:
    """The data directory a stored job file names (None: none recorded, or unreadable)."""
    try:
        data = jobfile.parse(text, JOB_FILE) if text else None
    except InputError:
        return None
    value = data.get("data-dir") if isinstance(data, dict) else None
    return value if isinstance(value, str) and value else None


def local_run_data_dir(model_dir: str) -> str | None:
    """The data directory the local run in `model_dir` trained on, if it recorded one."""
    if is_gcs(model_dir):
        return None
    path = Path(model_dir, JOB_FILE)
    return recorded_data_dir(_text(_read_local(path))) if path.is_file() else None


def bucket_run_data_dir(cloud: Cloud, run_id: str) -> str | None:
    """The data directory the Vertex AI run `run_id` trained on, if it recorded one."""
    paths = run_paths(cloud, run_id)
    data = _read_bucket(cloud.storage(), paths.bucket, f"{paths.root}/{JOB_FILE}")
    return recorded_data_dir(_text(data)) if data is not None else None


def recorded_run(job: jobfile.JobFile, model_dir: str, cloud: Callable[[], Cloud]
                 ) -> jobfile.Run | None:
    """The run `job` would continue or evaluate, if it exists: a local job's model directory
    (`model_dir`, here or gs://), a Vertex AI job's --run-id (a new run id is new: nothing
    to read); with the experiment its run.json names (jobfile.resolve takes it from there).
    A bucket that cannot be read is a note (no credentials: none, the launch says so): the
    trainer refuses another experiment too."""
    if job.target == "local":
        where, place = model_dir.rstrip("/") or model_dir, "--model-dir"
        shown = f"{place} {where}"
    elif job.run_id:
        where, place = None, "--run-id"
        shown = f"{place} {job.run_id}"
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
        raise InputError(f"{shown[:200]}: {reason(error)}; choose another {place}") from None
    except InputError:
        raise
    except DefaultCredentialsError:  # the launch says so itself (a dry run: with a note)
        return None
    except (GoogleAPIError, GoogleAuthError, UserError) as error:
        print(f"note: the experiment of {shown[:200]} is not checked here "
              f"({reason(error)}); the trainer checks it", file=sys.stderr)
        return None
    return jobfile.Run(experiment, where, place) if experiment else None
