"""One way to read JSON from files we did not write: numbers and whole numbers checked once
(integers stay integers, so 64-bit ids keep their identity; anything non-finite or out of
range is None, for the caller to name), and deep or huge documents refused in one line.
TensorFlow-free: the launcher reads metrics with it too."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from trainer.common.errors import JsonError
from trainer.common.io import open_regular

MAX_WHOLE = 1 << 63  # a 64-bit id; larger integers are out of range
MAX_NUMBER = 1e300  # beyond this a float loses all meaning as a pixel or a metric


def loads(data: bytes | str, max_bytes: int, where: str) -> object:
    """The document, or JsonError naming `where` (too large, too deeply nested, not JSON).
    `data` may be the first max_bytes + 1 bytes of something larger: it is refused too."""
    if len(data) > max_bytes:
        raise JsonError(f"{where} is more than {max_bytes:,} bytes")
    try:
        return json.loads(data)
    except RecursionError:
        raise JsonError(f"{where} is nested too deeply to read") from None
    except (ValueError, UnicodeDecodeError) as error:
        raise JsonError(f"{where} is not JSON: {str(error)[:200]}") from None


def read_file(path: str | Path, max_bytes: int) -> object:
    """A local JSON file, of which no more than `max_bytes` + 1 bytes are ever read: a larger
    file is refused by its size. JsonError names the file, for a missing one too."""
    return loads(read_bytes(path, max_bytes), max_bytes, str(path))


def read_bytes(path: str | Path, max_bytes: int) -> bytes:
    """A local file's bytes, as `read_file` reads them: no more than `max_bytes` + 1."""
    try:
        with open_regular(path) as stream:
            size = os.fstat(stream.fileno()).st_size
            if size > max_bytes:
                raise JsonError(f"{path} is {size:,} bytes, more than {max_bytes:,}")
            return stream.read(size + 1)  # read(n) allocates n bytes first: ask no more
    except OSError as error:
        raise JsonError(f"{path}: {error.strerror or error}") from None


def number(value: object) -> float | None:
    """A finite number within ±MAX_NUMBER as a float; None for anything else (bools too)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, int):
        return float(value) if -MAX_WHOLE < value < MAX_WHOLE else None
    return value if math.isfinite(value) and abs(value) <= MAX_NUMBER else None


def whole(value: object) -> int | None:
    """A whole number within ±2^63 as an exact int (never through a float, so 2^53 + 1
    stays itself); a float only when it is whole; None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if -MAX_WHOLE < value < MAX_WHOLE else None
    found = number(value)
    return int(found) if found is not None and found.is_integer() and \
        abs(found) < MAX_WHOLE else None
