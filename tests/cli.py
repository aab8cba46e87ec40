"""`invoke` as researchers type it, run in this process: the same parser, tasks.py and
invoke.yaml as `python -m invoke`, and what it prints and its exit code, without paying a new
interpreter and Google's client libraries (seconds) for every command."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
from collections.abc import Mapping
from pathlib import Path
from unittest import mock

from invoke.main import program

REPO = Path(__file__).resolve().parent.parent


@dataclasses.dataclass(frozen=True)
class Ran:
    """What a command did, named as `subprocess.CompletedProcess` names it."""

    returncode: int
    stdout: str
    stderr: str


def invoke(*args: str, env: Mapping[str, str] | None = None, cwd: Path = REPO) -> Ran:
    """`invoke ARGS` in `cwd` with `env` over this process's variables (both restored
    after). The tasks are found in this repository wherever `cwd` is, as
    `invoke --search-root` finds them."""
    out, err = io.StringIO(), io.StringIO()
    with mock.patch.dict(os.environ, env or {}), contextlib.chdir(cwd), \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            program.run(["invoke", f"--search-root={REPO}", *args])
            code = 0
        except SystemExit as stopped:  # how invoke ends a refused or failed task
            code = stopped.code or 0
    return Ran(code, out.getvalue(), err.getvalue())


def refused(result: Ran) -> str:
    """The one line a refused command prints (exit 2, no traceback, no usage)."""
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr and "usage" not in result.stderr.lower()
    return lines[0]
