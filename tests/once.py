"""Builds made once for a whole test session, however many pytest-xdist workers ask: the
first worker to ask builds while the others wait on a file lock, then every worker reads the
same result. A failed build is recorded too, so no other worker repeats minutes of work
that already failed."""

from __future__ import annotations

import fcntl
import json
import os
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest


def session_root(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """A directory every worker of this session shares: the parent of the workers' own
    temporary directories under xdist (`pytest-N/`), the session's own without it."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if worker_id != "master" else base


def once(root: Path, name: str, build: Callable[[Path], dict]) -> dict:
    """`build(root / name)`'s JSON-able result, built by the first worker to ask."""
    done = root / f"{name}.json"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when a building worker is done
        if not done.exists():
            try:
                outcome = {"value": build(root / name)}
            except BaseException:
                outcome = {"error": traceback.format_exc()}
                _write(done, outcome)
                raise
            _write(done, outcome)
    outcome = json.loads(done.read_text())
    if "error" in outcome:
        pytest.fail(f"{name} failed in another worker:\n{outcome['error'][-5000:]}")
    return outcome["value"]


def _write(path: Path, outcome: dict) -> None:
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(outcome))
    os.replace(temporary, path)
