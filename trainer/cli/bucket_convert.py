"""`python -m trainer data convert-in-bucket`: what a conversion job on Vertex AI runs, in the
trainer image, next to the data. The raw prefix is staged to local disk (hostile names
skipped and named, sizes capped: trainer/data/objects.py), the usual `data convert` runs on the
staged copy, and its output is published as a named dataset (trainer/data/datasets.py), manifest
last: a job killed at any point leaves no visible dataset.

The converter's flags come through unchanged (`--convert_flag`, repeatable), so a format or
option added to `data convert` needs nothing here; each gs:// path among them must lie below
the raw prefix and becomes the staged copy's path.
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from trainer import args as trainer_args
from trainer.common.errors import SettingsError
from trainer.data import datasets, formats, objects


def passed_flags(convert: trainer_args.ConvertArgs) -> tuple[str, ...]:
    """The converter's flags a conversion job passes through (its output is the job's):
    checked here, before a job is built, as `staged_args` will read them. A path on this
    machine cannot be read by the job and is refused; so is a source that is not in the
    bucket."""
    raw_url = "gs://{}/{}".format(*objects.split_url(str(convert.data_dir), "--data-dir"))

    def check(item: str, flag: str) -> str:
        if item.startswith("gs://"):
            _below(item, raw_url, flag)
        elif Path(item).exists() or flag == SOURCE_FLAG:
            raise SettingsError(f"{flag} {item[:200]} is not in the bucket; a conversion "
                                f"job reads only below --data-dir {raw_url}: copy it there "
                                "and pass its gs:// path")
        return item

    _paths(convert, check)
    flags = tuple(arg for arg in convert.to_argv()[len(convert.COMMAND):]
                  if not arg.startswith("--output_dir="))
    # what the job would refuse after staging, refused before it is surveyed or built
    staged_args(_container_args(flags), raw_url, Path("raw"), Path("records")).check()
    return flags


SOURCE_FLAG = trainer_args.shown(trainer_args.ConvertArgs, "sources")


def _paths(convert: trainer_args.ConvertArgs, change: Callable[[str, str], str]
           ) -> dict[str, object]:
    """Every path among the converter's values (each `--source`'s own paths too) passed
    through `change(path, flag)`: the changed values by field name."""
    changed: dict[str, object] = {}
    for field in dataclasses.fields(convert):
        value, flag = getattr(convert, field.name), trainer_args.shown(type(convert),
                                                                       field.name)
        if field.name in ("data_dir", "output_dir", "split") or field.metadata["choices"]:
            continue  # not a path: its own, or a fraction (--split 0.7,0.2)
        if field.name == "sources":
            changed[field.name] = tuple(_source(text, flag, change) for text in value)
        elif isinstance(value, str):
            changed[field.name] = change(value, flag)
    return changed


def _source(text: str, flag: str, change: Callable[[str, str], str]) -> str:
    name, paths = formats.source_parts(text)
    return ":".join((name, *(change(path, flag) for path in paths)))


def _below(value: str, raw_url: str, flag: str) -> str:
    """`value`'s path relative to `raw_url` ('' for the prefix itself), or a refusal."""
    if value.rstrip("/") == raw_url:
        return ""
    relative = value.removeprefix(f"{raw_url}/").rstrip("/")
    if not value.startswith(f"{raw_url}/") or objects.unsafe_reason(relative):
        raise SettingsError(f"{flag} {value[:200]}: a conversion job reads only below "
                            f"--data-dir {raw_url}; put it there")
    return relative


def staged_args(convert: trainer_args.ConvertArgs, raw_url: str, raw_dir: Path,
                output_dir: Path) -> trainer_args.ConvertArgs:
    """`convert` reading the staged copy and writing to `output_dir`: every gs:// value
    below `raw_url` becomes its local path; one elsewhere is refused."""
    def local(value: str, flag: str) -> str:
        if not value.startswith("gs://"):
            return value
        relative = _below(value, raw_url, flag)
        return str(raw_dir / relative) if relative else str(raw_dir)

    # sources name their own paths below the raw prefix, which is then no dataset itself
    data_dir = local(convert.data_dir, "--data-dir") if convert.data_dir and \
        not convert.sources else None
    return dataclasses.replace(convert, **_paths(convert, local), data_dir=data_dir,
                               output_dir=str(output_dir))


def _container_args(flags: Sequence[str]) -> trainer_args.ConvertArgs:
    """The converter's arguments as the job parses its `--convert_flag`s."""
    convert = trainer_args.parse(["data", "convert", *flags, "--output_dir=unset"])
    if not isinstance(convert, trainer_args.ConvertArgs):
        raise SettingsError("--convert_flag: flags of `data convert` only")
    return convert


def convert_in_bucket(job: trainer_args.BucketConvertArgs,
                      convert_staged: Callable[[trainer_args.ConvertArgs], object],
                      client=None) -> int:
    """Stages the raw prefix, runs `convert_staged` (the `data convert` runner) on the
    staged copy and publishes its output as the named dataset."""
    datasets.check_name(job.dataset)
    raw_url = "gs://{}/{}".format(*objects.split_url(job.raw, "--data-dir"))
    convert = _container_args(job.convert_flag)
    if client is None:
        from google.cloud import storage

        client = storage.Client()
    with tempfile.TemporaryDirectory(prefix="convert-", dir=job.scratch_dir) as scratch:
        raw_dir, output_dir = Path(scratch) / "raw", Path(scratch) / "records"
        local = staged_args(convert, raw_url, raw_dir, output_dir)
        local.check()  # before anything is staged
        staged = objects.stage_prefix(client, raw_url, raw_dir, objects.Limits(
            job.max_raw_bytes, job.max_raw_objects, job.max_object_bytes), "--data-dir")
        for line in staged.skipped:
            print(f"warning: {line}", file=sys.stderr)
        print(f"staged {staged.fetched} objects ({staged.bytes:,} bytes) of {raw_url}/",
              flush=True)
        convert_staged(local)
        manifest, deleted = datasets.publish(client, job.bucket, job.dataset, output_dir,
                                             convert.format)
    print(f"published dataset {job.dataset}: {manifest.url(job.bucket)} "
          f"({len(manifest.objects)} objects, {manifest.size:,} bytes; "
          f"{len(deleted)} objects of older versions deleted)", flush=True)
    return 0
