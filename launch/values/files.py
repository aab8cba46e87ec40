"""The settings files a researcher names (`--job`, `--sweep`): a page of UTF-8 text from a
regular file, refused in one line naming the flag when it is larger, unreadable or not text."""

from __future__ import annotations

from launch.errors import InputError
from trainer.common.io import read_regular


def read_page(path: str, flag: str, limit: int, error: type[InputError]) -> str:
    """The text of `path`, at most `limit` bytes, or `error` naming `flag` and the fault."""
    try:
        data = read_regular(path, limit)
        if len(data) > limit:
            raise error(f"{flag} {path}: larger than {limit >> 10} KiB; a {flag[2:]} file is a "
                        "page of settings")
        return data.decode()
    except (OSError, UnicodeDecodeError) as fault:
        raise error(f"{flag} {path}: cannot read it "
                    f"({getattr(fault, 'strerror', None) or fault})") from None
