"""The output directory, replaced whole: the records are written into a staging sibling and
swapped in only when complete, so an error, Ctrl-C or a killed run leaves the previous output
as it was. Its own module because it is the converter's only file-system protocol.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
from pathlib import Path

from trainer.common import files
from trainer.common.errors import SettingsError

OUTPUT_FILE = re.compile(r"^(?:\w+\.record-.*|" + "|".join(map(re.escape, (
    *files.DATA_LABEL_MAP_FILES, files.CONVERSION_REPORT_FILE))) + ")$")
STAGING = re.compile(r"\.partial-(?P<pid>\d+)-")
AT_FDCWD, RENAME_EXCHANGE = -100, 2


def check_replaceable(output_dir: Path) -> None:
    """The output directory is replaced whole: refuse one holding files we did not write."""
    if output_dir.exists() and not output_dir.is_dir():
        raise SettingsError(f"--output-dir {output_dir} is a file, not a directory")
    foreign = sorted(p.name for p in output_dir.iterdir() if not OUTPUT_FILE.match(p.name)) \
        if output_dir.is_dir() else []
    if foreign:
        raise SettingsError(
            f"--output-dir {output_dir} holds files a conversion does not write "
            f"({', '.join(foreign[:5])}{', ...' if len(foreign) > 5 else ''}); the directory is "
            "replaced whole, so convert into an empty or new directory, or move them away")


def remove_abandoned(output_dir: Path) -> None:
    """Staging directories of runs that were killed (their process is gone)."""
    for staging in output_dir.parent.glob(f".{output_dir.name}.partial-*"):
        match = STAGING.search(staging.name)
        if match is None:
            continue
        try:
            os.kill(int(match["pid"]), 0)
        except ProcessLookupError:
            shutil.rmtree(staging, ignore_errors=True)
        except (PermissionError, OverflowError):
            pass  # alive, and someone else's


def _exchange(a: Path, b: Path) -> bool:
    """Swaps two directories atomically (Linux renameat2 RENAME_EXCHANGE); False where the
    system or filesystem cannot."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    return renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0


def swap_in(staging: Path, output_dir: Path) -> None:
    """Puts the finished `staging` at `output_dir`; the previous contents end up in
    `staging`, for the caller to remove."""
    if not output_dir.exists():
        staging.rename(output_dir)
        return
    if not _exchange(staging, output_dir):
        previous = staging.with_name(staging.name + "-previous")
        output_dir.rename(previous)
        staging.rename(output_dir)
        previous.rename(staging)

