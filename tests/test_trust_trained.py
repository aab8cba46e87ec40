"""Issue 27 on a trained model: a foreign checkpoint registered as the newest (case 11) and a
PNG bomb sent to the exported bytes signature (case 10)."""

from __future__ import annotations

import json
import shutil

import pytest
import tensorflow as tf

from tests.conftest import data_flags, run_trainer
from tests.test_image_bombs import encoded, png_bomb
from trainer.files import EXPORT_INFO_FILE

pytestmark = pytest.mark.slow


def test_a_foreign_newest_checkpoint_is_passed_over_and_serving_bytes_refuses_a_bomb(
        trained, tmp_path):
    model_dir, records, _ = trained
    copy = tmp_path / "model"
    shutil.copytree(model_dir, copy)
    state = tf.train.get_checkpoint_state(str(copy))
    previous = state.model_checkpoint_path.rsplit("/", 1)[-1]
    foreign = f"ckpt-{int(previous.rsplit('-', 1)[1]) + 1}"
    stranger = tf.Module()
    stranger.weights = tf.Variable(tf.ones([3]))
    tf.train.Checkpoint(module=stranger).write(str(copy / foreign))
    tf.compat.v1.train.update_checkpoint_state(str(copy), foreign, all_model_checkpoint_paths=[
        *(p.rsplit("/", 1)[-1] for p in state.all_model_checkpoint_paths), foreign])
    warning = (f"warning: checkpoint {copy}/{foreign} cannot be restored (its variables are "
               "not this model's); trying an older one")

    export_dir = tmp_path / "export"
    exported = run_trainer("export", f"--model_dir={copy}", f"--export_dir={export_dir}",
                           "--checkpoint=latest")  # the newest that restores, not best/
    assert warning in exported.stderr.splitlines()
    assert "Traceback" not in exported.stderr
    assert json.loads((export_dir / EXPORT_INFO_FILE).read_text())["checkpoint"] == previous

    evaluated = run_trainer(*data_flags(records, copy), "--mode=eval")
    assert warning in evaluated.stderr.splitlines()
    assert f"evaluated step {previous.rsplit('-', 1)[1]}:" in evaluated.stdout

    as_bytes = tf.saved_model.load(str(export_dir)).signatures["serving_bytes"]
    assert int(as_bytes(tf.constant([encoded("PNG", 64, 48)]))["num_detections"][0]) >= 0
    with pytest.raises(tf.errors.InvalidArgumentError, match="over the cap of 40,000,000"):
        as_bytes(tf.constant([png_bomb(20_000, 20_000)]))  # 1.2 GB had it been decoded
