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


TRAIN_STEPS = 1000  # the demo's schedule: AP50 climbs late (0.1 at step 550)
AP50_BOUND = 0.9  # the demo reaches 1.0; the issue asks 0.9


def trainer_process(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "trainer", *args], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})


def data_flags(records: Path, model_dir: Path) -> list[str]:
    return [f"--data_dir={records}", f"--model_dir={model_dir}"]


@pytest.fixture(scope="session")
def trained(train_records, tmp_path_factory):
    """Trains while a continuous-eval process evaluates checkpoints beside it."""
    model_dir = tmp_path_factory.mktemp("model")
    flags = data_flags(train_records, model_dir)
    evaluator = trainer_process(*flags, "--mode=continuous_eval", "--eval_poll_interval=2",
                                "--eval_idle_timeout=600", f"--train_steps={TRAIN_STEPS}")
    training = trainer_process(*flags, "--mode=train", f"--train_steps={TRAIN_STEPS}",
                               "--params_override=trainer.checkpoint_interval=250",
                               env={"PETS_HARDWARE": "this CPU x 1"})
    train_out, _ = training.communicate(timeout=1500)
    assert training.returncode == 0, train_out[-5000:]
    eval_out, _ = evaluator.communicate(timeout=600)  # must exit by itself
    assert evaluator.returncode == 0, eval_out[-5000:]
    return model_dir, train_records, eval_out


@pytest.fixture(scope="session")
def exported(trained, tmp_path_factory) -> Path:
    """The trained model exported once as a SavedModel, for the tests that only read it."""
    export_dir = tmp_path_factory.mktemp("exported") / "saved_model"
    run_trainer("export", f"--model_dir={trained[0]}", f"--export_dir={export_dir}")
    return export_dir


SERVED_MAX_DETECTIONS, SERVED_MIN_SCORE = 20, 0.1


@pytest.fixture(scope="session")
def served(trained, tmp_path_factory) -> Path:
    """The trained model exported as Vertex AI serves it: encoded files by default, fewer
    detections from a higher score (a response that stays small)."""
    export_dir = tmp_path_factory.mktemp("served") / "model"
    run_trainer("export", f"--model_dir={trained[0]}", f"--export_dir={export_dir}",
                "--default_signature=bytes", f"--max_detections={SERVED_MAX_DETECTIONS}",
                f"--min_score={SERVED_MIN_SCORE}")
    return export_dir
