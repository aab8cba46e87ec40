"""The trainer's process contract where no trained model is needed: what `python -m trainer`
says and exits with when there is nothing it can use."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import HANG, REPO, data_flags, run_trainer


def test_eval_without_new_checkpoints_gives_up_with_a_message(train_records, tmp_path):
    result = run_trainer(*data_flags(train_records, tmp_path), "--mode=continuous_eval",
                         "--eval_idle_timeout=3", "--eval_poll_interval=1", check=False)
    assert result.returncode == 3
    assert "no new checkpoint" in result.stderr and "Traceback" not in result.stderr


def test_a_file_that_is_not_a_tflite_model_is_named(tmp_path):
    (tmp_path / "model.tflite").write_bytes(b"not a flatbuffer")
    (tmp_path / "cat.jpg").write_bytes(b"")
    failed = run_trainer("predict", f"--model={tmp_path / 'model.tflite'}",
                         f"--images={tmp_path}/*.jpg", f"--output_dir={tmp_path / 'out'}",
                         check=False)
    assert failed.returncode == 2  # not a model: the user's to fix
    assert "is not a readable TFLite detector" in failed.stderr
    assert "Traceback" not in failed.stderr


def test_a_second_writer_of_a_model_directory_exits_at_once(train_records, tmp_path):
    """Case 12 of issue 27: this process holds the model directory as a training chief
    would; a second training run on it exits 2 naming the directory and the holder."""
    import os

    from trainer.common import locks

    held = locks.hold_model_dir(str(tmp_path))
    try:
        trainer = run_trainer(*data_flags(train_records, tmp_path), "--mode=train",
                              "--train_steps=5", check=False, timeout=HANG)
        launcher = subprocess.run(  # `invoke train` refuses before replacing the job file
            [sys.executable, "-m", "invoke", "train", f"--model-dir={tmp_path}",
             f"--data-dir={train_records}", "--steps=5"], cwd=REPO, text=True,
            capture_output=True, timeout=HANG)
    finally:
        held.close()
    busy = f"model directory {tmp_path} is in use by process {os.getpid()};"
    for result in (trainer, launcher):
        assert result.returncode == 2, result.stderr[-3000:]
        assert busy in result.stderr and "Traceback" not in result.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == [".writer.lock"]
