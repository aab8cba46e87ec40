"""Checkpoints that do not restore and a hostile picture, on the session's trained model: a
foreign checkpoint registered as the newest (issue 27, case 11) with a half-written one
before it (a preempted upload, a full disk), a damaged export, and a PNG bomb sent to the
exported bytes signature (case 10). One copy of the run holds both bad checkpoints, so each
TensorFlow process (export, eval) passes over both at once."""

from __future__ import annotations

import json
import shutil

import pytest
import tensorflow as tf
from PIL import Image

from tests.conftest import TRAIN_STEPS, data_flags, trainer_here
from tests.test_image_bombs import encoded, png_bomb
from trainer.cli.main import EXIT_USAGE, main
from trainer.common.files import EXPORT_INFO_FILE

pytestmark = pytest.mark.slow


@pytest.mark.slow(38)
def test_unrestorable_newest_checkpoints_are_passed_over_and_serving_bytes_refuses_a_bomb(
        trained, tmp_path, capsys):
    """Export and eval use the newest checkpoint that restores and name each newer one they
    skip; training, which resumes before it builds a model to try a checkpoint in, passes
    over the half-written one once the foreign one is gone."""
    model_dir, records, _ = trained
    copy = tmp_path / "model"
    shutil.copytree(model_dir, copy)
    kept = [p.rsplit("/", 1)[-1] for p in
            tf.train.get_checkpoint_state(str(copy)).all_model_checkpoint_paths]
    half_written, previous = kept[-1], kept[-2]
    assert half_written == f"ckpt-{TRAIN_STEPS}"
    (data,) = copy.glob(f"{half_written}.data-*")
    with data.open("r+b") as f:
        f.truncate(data.stat().st_size // 2)
    foreign = f"ckpt-{TRAIN_STEPS + 1}"
    stranger = tf.Module()
    stranger.weights = tf.Variable(tf.ones([3]))
    tf.train.Checkpoint(module=stranger).write(str(copy / foreign))
    tf.compat.v1.train.update_checkpoint_state(str(copy), foreign,
                                               all_model_checkpoint_paths=[*kept, foreign])
    warning = (f"warning: checkpoint {copy}/{foreign} cannot be restored (its variables are "
               "not this model's); trying an older one")
    broken = f"checkpoint {copy}/{half_written} cannot be restored"
    step = previous.rsplit("-", 1)[1]

    export_dir = tmp_path / "export"
    exported = trainer_here("export", f"--model_dir={copy}", f"--export_dir={export_dir}",
                           "--checkpoint=latest")  # the newest that restores, not best/
    assert warning in exported.stderr.splitlines() and broken in exported.stderr
    assert "Traceback" not in exported.stderr
    assert f"exported {copy}/{previous}" in exported.stdout
    assert json.loads((export_dir / EXPORT_INFO_FILE).read_text())["checkpoint"] == previous

    evaluated = trainer_here(*data_flags(records, copy), "--mode=eval")
    assert warning in evaluated.stderr.splitlines() and broken in evaluated.stderr
    assert f"evaluated step {step}:" in evaluated.stdout

    for path in copy.glob(f"{foreign}.*"):  # deleted, as its owner would
        path.unlink()
    tf.compat.v1.train.update_checkpoint_state(str(copy), half_written,
                                               all_model_checkpoint_paths=kept)
    trained_on = trainer_here(*data_flags(records, copy), f"--train_steps={int(step) + 10}",
                             "--params_override=trainer.steps_per_loop=10")
    assert broken in trained_on.stderr
    assert f"resuming from {copy}/{previous} (step {step})" in trained_on.stdout
    assert tf.train.latest_checkpoint(str(copy)).endswith(f"ckpt-{int(step) + 10}")

    as_bytes = tf.saved_model.load(str(export_dir)).signatures["serving_bytes"]
    assert int(as_bytes(tf.constant([encoded("PNG", 64, 48)]))["num_detections"][0]) >= 0
    refused = as_bytes(tf.constant([png_bomb(20_000, 20_000)]))  # 1.2 GB had it been decoded
    assert refused["image_error"].numpy()[0].decode().startswith(
        "image of 400000000 pixels is over the cap of 40,000,000")  # that image alone

    (export_dir / "saved_model.pb").write_bytes(b"\x08\x01garbage")  # a damaged export
    Image.new("RGB", (64, 48)).save(tmp_path / "photo.jpg")
    capsys.readouterr()
    # in this process (TensorFlow is loaded here): an exception would raise here, where the
    # container would print its traceback
    assert main(["predict", f"--model={export_dir}", f"--images={tmp_path}/*.jpg",
                 f"--output_dir={tmp_path / 'p'}"]) == EXIT_USAGE  # the user's to fix
    assert "is not a readable SavedModel" in capsys.readouterr().err
