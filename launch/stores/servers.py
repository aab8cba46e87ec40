"""What the labelling tools' adapters (Label Studio, CVAT) share about reaching a server
as one user: its address, checked before anything is sent, and a token read from a file."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

from launch.errors import InputError

MAX_TOKEN_BYTES = 4096


def check_url(url: str, tool: str) -> str:
    """The server's base URL: http(s), a host, no credentials, no query."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.username or \
            parts.password or parts.query or parts.fragment:
        raise InputError(f"--url {url[:200]!r} must be {tool}'s address, e.g. "
                         "http://localhost:8080 (no user, password or query in it)")
    return url.rstrip("/")


def token_from_file(token_file: str) -> str:
    """The first line of `--token-file`, which holds a token and nothing large."""
    path = Path(token_file)
    if not path.is_file():
        raise InputError(f"--token-file {token_file} is not a file")
    with path.open("rb") as file:
        data = file.read(MAX_TOKEN_BYTES + 1)
    lines = data.decode("utf-8", "replace").strip().splitlines()
    token = lines[0].strip() if lines else ""
    if not token or len(data) > MAX_TOKEN_BYTES:
        raise InputError(f"--token-file {token_file} holds no token on its first line")
    return token
