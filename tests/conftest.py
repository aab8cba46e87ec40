"""Shared fixtures: one synthetic dataset, its conversion, and one trained model per session."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def run_trainer(*args: str, env: dict | None = None, timeout: float = 600,
                check: bool = True) -> subprocess.CompletedProcess:
    """`python -m trainer ...` exactly as the container runs it."""
    result = subprocess.run([sys.executable, "-m", "trainer", *args], cwd=REPO, text=True,
                            capture_output=True, timeout=timeout,
                            env={**os.environ, **(env or {})})
    if check and result.returncode != 0:
        raise AssertionError(f"trainer {args} exited {result.returncode}:\n"
                             f"{result.stdout[-3000:]}\n{result.stderr[-5000:]}")
    return result


@pytest.fixture(scope="session")
def sample_dir(tmp_path_factory) -> Path:
    from trainer.data.sample import write_sample

    return write_sample(tmp_path_factory.mktemp("pets"), num_images=60, bad_inputs=True)


@pytest.fixture(scope="session")
def records_dir(sample_dir, tmp_path_factory) -> Path:
    from trainer.data.convert import convert_directory

    out = tmp_path_factory.mktemp("records")
    convert_directory(sample_dir, out, num_shards=3, processes=2, progress=False)
    return out


@pytest.fixture(scope="session")
def train_records(tmp_path_factory) -> Path:
    """A clean sample big enough to learn from, converted once for all training tests."""
    from trainer.data.convert import convert_directory
    from trainer.data.sample import write_sample

    data = write_sample(tmp_path_factory.mktemp("train-pets"))  # the demo's sample
    out = tmp_path_factory.mktemp("train-records")
    convert_directory(data, out, num_shards=2, progress=False)
    return out
