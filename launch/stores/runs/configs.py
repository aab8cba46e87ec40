"""A run's Model Garden YAMLs (`--config-file`), kept in its directory. A launch reads each
local file once (a FIFO or a device is refused at once), checks it is a mapping, and a
training launch keeps a copy beside the run's job file (`config-1.yaml`, ...: the run's
model directory, or gs://BUCKET/runs/RUN_ID/). The stored job file names the copies, so a
rerun reads only what its run recorded, never a path on the researcher's machine."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from launch.context.cloud import Cloud, run_paths
from launch.errors import InputError, reason
from launch.stores.gcs.mirror import GcsPath, is_gcs
from launch.stores.gcs.upload import read_bytes
from trainer.common import yamlfile
from trainer.common.io import read_regular

MAX_BYTES = 1 << 20
COPY = re.compile(r"config-[1-9][0-9]{0,2}\.yaml")  # copy_name's names
FLAG = "--config-file"


def copy_name(index: int) -> str:
    """The name of the run's copy of its `index`th config file (in the order applied)."""
    return f"config-{index + 1}.yaml"


def _checked(data: bytes, path: str) -> str:
    """A config file's text, if it is a YAML mapping of at most MAX_BYTES (no aliases)."""
    try:
        text = data.decode()
    except UnicodeDecodeError as error:
        raise InputError(f"{FLAG} {path}: cannot read it as YAML ({reason(error)})") from None
    config = yamlfile.loads(text, f"{FLAG} {path}", InputError) if len(data) <= MAX_BYTES \
        else None
    if not isinstance(config, dict):
        raise InputError(f"{FLAG} {path}: a Model Garden YAML is a mapping of a few kilobytes, "
                         "e.g. `task: {model: {num_classes: 3}}`")
    return text


def read_local(paths: Iterable[str]) -> dict[str, str]:
    """Each local config file's text, read once and checked (gs:// ones are read where the
    trainer runs, and by `keep` on a launch)."""
    texts = {}
    for path in paths:
        if is_gcs(path):
            continue
        try:
            data = read_regular(path, MAX_BYTES)
        except OSError as error:
            raise InputError(f"{FLAG} {path}: cannot read it as YAML "
                             f"({getattr(error, 'strerror', None) or reason(error)})") from None
        texts[path] = _checked(data, path)
    return texts


def _text(cloud: Cloud, path: str, texts: Mapping[str, str]) -> str:
    if path in texts:
        return texts[path]
    where = GcsPath.parse(path)
    data = read_bytes(cloud.storage(), where.bucket, where.prefix, MAX_BYTES)
    if data is None:
        raise InputError(f"{FLAG} {path}: no such object")
    return _checked(data, path)


def keep_in_bucket(cloud: Cloud, run_id: str, paths: Iterable[str],
                   texts: Mapping[str, str]) -> tuple[str, ...]:
    """A Vertex AI run's config files, copied to gs://BUCKET/runs/RUN_ID/: the copies' URLs."""
    run = run_paths(cloud, run_id)
    bucket = cloud.storage().bucket(run.bucket)
    kept = []
    for index, path in enumerate(paths):
        url = f"{run.root}/{copy_name(index)}"
        bucket.blob(url.removeprefix(f"gs://{run.bucket}/")).upload_from_string(
            _text(cloud, path, texts), content_type="application/yaml", timeout=60)
        kept.append(url)
    return tuple(kept)


def keep_local(cloud: Cloud, model_dir: str, paths: Iterable[str],
               texts: Mapping[str, str]) -> tuple[str, ...]:
    """A local run's config files, copied into its model directory: the copies' paths."""
    kept = []
    for index, path in enumerate(paths):
        copy = Path(model_dir, copy_name(index))
        text = _text(cloud, path, texts)
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(text)
        kept.append(str(copy))
    return tuple(kept)


def is_copy(path: str, run_root: str, local: bool) -> bool:
    """Whether a stored `config-file` names a copy its run kept (`run_root`: the run's
    model directory, or its gs:// directory): a copy's name, directly in that directory, and
    locally not a link to anything outside it."""
    if not local:
        return path.startswith(f"{run_root.rstrip('/')}/") and \
            COPY.fullmatch(path[len(run_root.rstrip('/')) + 1:]) is not None
    resolved = Path(path).resolve()
    return COPY.fullmatch(Path(path).name) is not None and \
        resolved.parent == Path(run_root).resolve() and resolved.name == Path(path).name
