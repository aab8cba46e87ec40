"""The data checks before a training run (trainer/data/checks.py) on the records it will
read: a local records directory, or the records in the bucket. Refusals stop the run before
anything starts or is built, unless --force; warnings are printed."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from launch.errors import InputError
from launch.text import printable
from trainer.common import jsonnum
from trainer.common.errors import LabelMapError
from trainer.common.files import (
    CONVERSION_REPORT_FILE,
    DATA_LABEL_MAP_FILE,
    DATA_LABEL_MAP_FILES,
    RECORDS_PREFIX,
    data_label_map,
)
from trainer.data import checks
from trainer.data.label_map import parse_label_map
from trainer.model.experiments import fields

MAX_REPORT_BYTES = 64 << 20  # reports list 100 examples a reason; older ones list them all


class DataRefused(InputError):
    """Records that a training run would learn nothing right from."""


def _parsed(report_text: str) -> dict:
    report = jsonnum.loads(report_text, MAX_REPORT_BYTES, CONVERSION_REPORT_FILE)
    return report if isinstance(report, dict) else {}


def evaluate(report_text: str | None, label_map_text: str | None, where: str
             ) -> list[checks.Finding]:
    """The findings on the records' metadata (refusals first). The readers pass at most
    MAX_REPORT_BYTES + 1 characters, so a larger report is named as such."""
    if report_text is None or label_map_text is None:
        missing = CONVERSION_REPORT_FILE if report_text is None else DATA_LABEL_MAP_FILE
        return [checks.Finding(False, f"{where} has no {missing}: the data checks were "
                                      "skipped")]
    if len(report_text) > MAX_REPORT_BYTES:
        return [checks.Finding(False, f"{where}'s {CONVERSION_REPORT_FILE} is more than "
                                      f"{MAX_REPORT_BYTES:,} bytes, too large to read: the "
                                      "data checks were skipped")]
    try:
        report = _parsed(report_text)
        label_map = parse_label_map(label_map_text)
    except (ValueError, LabelMapError) as error:
        return [checks.Finding(True, f"unreadable {CONVERSION_REPORT_FILE} or "
                                     f"{DATA_LABEL_MAP_FILE}: {str(error)[:200]}")]
    return checks.findings(report, label_map)


def require_masks(report_text: str | None, where: str, experiment: str | None) -> None:
    """Refuses to train a mask experiment on records whose report says they have no masks,
    --force or not: it could not read them. Other reports leave it to the trainer's check."""
    if experiment is None or not fields.trains_masks(experiment) or report_text is None or \
            len(report_text) > MAX_REPORT_BYTES:
        return
    try:
        report = _parsed(report_text)
    except ValueError:
        return  # named by the findings
    if checks.lacks_masks(report):
        raise DataRefused(checks.masks_missing(experiment, where))


def check(found: list[checks.Finding], where: str, force: bool = False) -> list[str]:
    """Raises DataRefused on a refusal (unless `force`); returns the warnings, printed."""
    refusals = [f.text for f in found if f.refuse]
    if refusals and not force:
        raise DataRefused(f"the data in {where} would train badly: {'; '.join(refusals)}. "
                          "`invoke data.inspect` shows the data; --force trains anyway")
    return _warn([f"{'refusal overridden by --force: ' if f.refuse else ''}{f.text}"
                  for f in found])


def _warn(lines: list[str]) -> list[str]:
    for line in lines:
        print(f"warning: data: {printable(line)}", file=sys.stderr)  # names come from data
    return lines


def _read(path: Path) -> str | None:
    try:
        with path.open(encoding="utf-8") as stream:
            return stream.read(MAX_REPORT_BYTES + 1)
    except (OSError, UnicodeDecodeError):
        return None


def _local_texts(data_dir: str) -> tuple[str | None, str | None]:
    """The conversion report and the label map of a local records directory."""
    root = Path(data_dir)
    return _read(root / CONVERSION_REPORT_FILE), _read(Path(data_label_map(
        str(root), os.path.exists)))


def local_findings(data_dir: str) -> list[checks.Finding]:
    return evaluate(*_local_texts(data_dir), data_dir)


def check_local(data_dir: str, force: bool = False, experiment: str | None = None
                ) -> list[str]:
    """`experiment`: the one the run trains, whose need for masks the records must meet."""
    report_text, label_map_text = _local_texts(data_dir)
    require_masks(report_text, data_dir, experiment)
    return check(evaluate(report_text, label_map_text, data_dir), data_dir, force)


def bucket_where(bucket: str, prefix: str = RECORDS_PREFIX) -> str:
    return f"gs://{bucket}/{prefix}/"


def _bucket_texts(storage_client, bucket: str, prefix: str) -> tuple[str | None, str | None]:
    """The conversion report and the label map of the records in the bucket."""
    from launch.stores.gcs.upload import read_text

    def read(name: str) -> str | None:
        return read_text(storage_client, bucket, f"{prefix}/{name}", MAX_REPORT_BYTES)

    return read(CONVERSION_REPORT_FILE), next(
        (text for name in DATA_LABEL_MAP_FILES if (text := read(name)) is not None), None)


def bucket_findings(storage_client, bucket: str, prefix: str = RECORDS_PREFIX
                    ) -> list[checks.Finding]:
    return evaluate(*_bucket_texts(storage_client, bucket, prefix), bucket_where(bucket, prefix))


def check_bucket(storage_client, bucket: str, force: bool = False,
                 prefix: str = RECORDS_PREFIX, experiment: str | None = None) -> list[str]:
    """`experiment`: the one the run trains, whose need for masks the records must meet."""
    report_text, label_map_text = _bucket_texts(storage_client, bucket, prefix)
    where = bucket_where(bucket, prefix)
    require_masks(report_text, where, experiment)
    return check(evaluate(report_text, label_map_text, where), where, force)
