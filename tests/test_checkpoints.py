"""Half-written checkpoints, on real TensorFlow checkpoints: the newest that restores is
chosen, every broken one is named, and training resumes from it; a checkpoint of another
model given as --init-from is refused in one line."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tests.conftest import data_flags
from trainer.evaluation import evaluate
from trainer.model import model_dir
from trainer.model.eval_record import EvaluationRecord


def save_checkpoints(directory: Path, steps=(100, 200, 300, 400)) -> dict[int, np.ndarray]:
    """Checkpoints like the trainer's (a CheckpointManager, ckpt-N), each with other values."""
    weights = tf.Variable(tf.zeros([64, 64]))
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(weights=weights), str(directory),
                                         max_to_keep=10)
    values = {}
    for step in steps:
        weights.assign(tf.fill([64, 64], float(step)))
        manager.save(checkpoint_number=step)
        values[step] = weights.numpy()
    return values


def damage(directory: Path, step: int, how: str) -> None:
    data = next(directory.glob(f"ckpt-{step}.data-*"))
    if how == "truncated data":
        with data.open("r+b") as f:
            f.truncate(data.stat().st_size // 2)
    elif how == "missing data":
        data.unlink()
    elif how == "truncated index":
        with (directory / f"ckpt-{step}.index").open("r+b") as f:
            f.truncate(10)


@pytest.mark.parametrize("how", ["truncated data", "missing data", "truncated index"])
def test_the_newest_restorable_checkpoint_is_chosen_and_the_broken_ones_named(tmp_path, how):
    save_checkpoints(tmp_path)
    damage(tmp_path, 400, how)
    damage(tmp_path, 300, "truncated data")
    warnings: list[str] = []
    assert model_dir.newest_restorable(str(tmp_path), warnings.append) == f"{tmp_path}/ckpt-200"
    assert [w.split(" cannot")[0] for w in warnings] == [f"checkpoint {tmp_path}/ckpt-400",
                                                         f"checkpoint {tmp_path}/ckpt-300"]
    assert model_dir.checkpoint_problem(f"{tmp_path}/ckpt-200") is None


def test_none_restorable_is_an_error_and_none_at_all_is_a_fresh_start(tmp_path):
    save_checkpoints(tmp_path, steps=(100,))
    damage(tmp_path, 100, "truncated data")
    with pytest.raises(FileNotFoundError, match=r"no checkpoint in .* can be restored"):
        model_dir.newest_restorable(str(tmp_path), lambda text: None)
    assert model_dir.resume_from_restorable(str(tmp_path / "empty")) is None


def test_training_resumes_from_the_newest_restorable_checkpoint(tmp_path):
    values = save_checkpoints(tmp_path)
    damage(tmp_path, 400, "truncated index")  # tf.train.latest_checkpoint now answers None
    assert model_dir.resume_from_restorable(str(tmp_path), lambda text: None) == \
        f"{tmp_path}/ckpt-300"
    # what Model Garden's checkpoint manager does on start: restores the newest in the state
    weights = tf.Variable(tf.zeros([64, 64]))
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(weights=weights), str(tmp_path),
                                         max_to_keep=10)
    assert manager.restore_or_initialize() == f"{tmp_path}/ckpt-300"
    np.testing.assert_array_equal(weights.numpy(), values[300])
    assert model_dir.list_checkpoints(str(tmp_path)) == [
        f"{tmp_path}/ckpt-{s}" for s in (100, 200, 300)]  # the broken one is not listed again


class RestoringEvaluator:
    """Restores each checkpoint for real, as CheckpointEvaluator does, and scores its value."""

    def __init__(self, directory: Path) -> None:
        self.model_dir = str(directory)
        self.weights = tf.Variable(tf.zeros([64, 64]))

    def evaluate(self, checkpoint: str) -> EvaluationRecord:
        model_dir.restore(tf.train.Checkpoint(weights=self.weights), checkpoint)
        step = model_dir.checkpoint_step(checkpoint)
        path = evaluate.metrics_path(self.model_dir, step)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        Path(path).write_text("{}")
        return EvaluationRecord(step, {"mean": float(self.weights.numpy().mean())}, checkpoint,
                                path=path)


def test_continuous_eval_skips_a_broken_checkpoint_and_says_so(tmp_path, capsys):
    save_checkpoints(tmp_path, steps=(100, 200))
    damage(tmp_path, 200, "truncated data")
    results = evaluate.evaluate_continuously(
        RestoringEvaluator(tmp_path), final_step=lambda: 100, idle_timeout=5, poll_interval=0)
    assert [(r.step, r.metrics["mean"]) for r in results] == [(100, 100.0)]
    assert f"checkpoint {tmp_path}/ckpt-200 cannot be restored" in capsys.readouterr().err


def dense_model(units: int):
    """A Keras model as Model Garden builds them: with tf_keras (`tf.keras` in the trainer)."""
    import tf_keras

    return tf_keras.Sequential([tf_keras.Input([3]), tf_keras.layers.Dense(units)])


@pytest.mark.parametrize("foreign", ["another module", "other shapes"])
def test_a_foreign_newest_checkpoint_is_named_and_the_previous_one_chosen(tmp_path, foreign):
    """Case 11 of issue 27: a valid checkpoint of another model registered as the newest."""
    model = dense_model(4)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), str(tmp_path),
                                         max_to_keep=10)
    for step in (100, 200):
        manager.save(checkpoint_number=step)
    other = tf.Module()
    other.weights = tf.Variable(tf.ones([2]))
    stranger = tf.train.Checkpoint(module=other) if foreign == "another module" else \
        tf.train.Checkpoint(model=dense_model(5))
    manager = tf.train.CheckpointManager(stranger, str(tmp_path), max_to_keep=10)
    manager.save(checkpoint_number=300)  # registered as the newest in the `checkpoint` file
    assert tf.train.latest_checkpoint(str(tmp_path)) == f"{tmp_path}/ckpt-300"
    warnings: list[str] = []
    assert model_dir.newest_restorable(str(tmp_path), warnings.append, model) == \
        f"{tmp_path}/ckpt-200"
    assert warnings == [f"checkpoint {tmp_path}/ckpt-300 cannot be restored (its variables are "
                        "not this model's); trying an older one"]
    with pytest.raises(FileNotFoundError, match=r"ckpt-300 cannot be restored \(its variables"):
        model_dir.export_checkpoint(str(tmp_path), f"{tmp_path}/ckpt-300", model)


def test_continuous_eval_skips_a_foreign_checkpoint_and_says_so(tmp_path, capsys):
    save_checkpoints(tmp_path, steps=(100,))
    stranger = tf.train.Checkpoint(other=tf.Variable(tf.ones([2])))
    tf.train.CheckpointManager(stranger, str(tmp_path), max_to_keep=10).save(
        checkpoint_number=200)
    results = evaluate.evaluate_continuously(
        RestoringEvaluator(tmp_path), final_step=lambda: 100, idle_timeout=5, poll_interval=0)
    assert [(r.step, r.metrics["mean"]) for r in results] == [(100, 100.0)]
    assert capsys.readouterr().err == (
        f"warning: checkpoint {tmp_path}/ckpt-200 cannot be restored (its variables are not "
        "this model's); trying an older one\n")


def test_a_checkpoint_of_another_model_as_init_from_is_one_line_naming_what_did_not_match(
        train_records, tmp_path, capsys):
    """Issue 36, item 16: TensorFlow's AssertionError traceback (exit 1) before. The trainer
    restores --init-from on a fresh start; here a checkpoint of an unrelated module."""
    from trainer.cli.main import ERROR_PREFIX, main

    stranger = tf.Module()
    stranger.weights = tf.Variable(tf.ones([2]))
    init = tf.train.Checkpoint(backbone=stranger).write(str(tmp_path / "other" / "ckpt-1"))
    model = tmp_path / "model"
    code = main([*data_flags(train_records, model), "--train_steps=1",
                 f"--init_checkpoint={init}", "--init_checkpoint_type=all"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith(ERROR_PREFIX)]
    assert (code, len(lines)) == (2, 1), err[-3000:]
    assert "Traceback" not in err
    assert re.fullmatch(
        rf"{ERROR_PREFIX}--init-from {re.escape(init)} is not a checkpoint of "
        r"pets_retinanet_mobilenet's backbone, head and decoder \(--init-type all\): (\d+) of "
        r"the \1 variables it restores are not in the checkpoint \(\w+/\S+, \w+/\S+, "
        r"\w+/\S+, \.\.\.\); the checkpoint holds backbone: give a checkpoint of this "
        r"experiment \(an earlier run\), or restore less: --init-type backbone takes only "
        r"the backbone", lines[0]), lines[0]
    assert tf.train.latest_checkpoint(str(model)) is None  # nothing trained, nothing saved


def test_init_from_variables_of_other_shapes_are_named_with_both_shapes(tmp_path):
    """The same layers, other sizes (a backbone of another width): what the trainer's one
    line says, from the checkpoint's index and the model's variables."""
    from types import SimpleNamespace

    from trainer.training.init_checkpoint import not_this_model

    prefix = tf.train.Checkpoint(backbone=dense_model(5)).write(str(tmp_path / "ckpt-1"))
    line = not_this_model(prefix, "backbone", "pets_x",
                          SimpleNamespace(backbone=dense_model(4)), AssertionError("TF's"))
    assert line == (
        f"--init-from {prefix} is not a checkpoint of pets_x's backbone (--init-type "
        "backbone): 2 of the 2 variables it restores have other shapes "
        "(backbone/layer_with_weights-0/kernel, backbone/layer_with_weights-0/bias; "
        "backbone/layer_with_weights-0/kernel is [3, 5] there and [3, 4] here); the checkpoint "
        "holds backbone: give a checkpoint with "
        "this experiment's backbone (`invoke models.pretrained` lists those that fit)")


def test_a_runs_checkpoint_gives_its_backbone_and_decoder_to_another_experiment(tmp_path):
    """`--init-type detector` (or backbone) from a training run's own checkpoint (its modules
    under `model`, beside the optimizer's slots): a Mask R-CNN starts from a RetinaNet run.
    Modules of other shapes there are named with their keys in the run's checkpoint."""
    from types import SimpleNamespace

    from trainer.training.init_checkpoint import from_run, not_this_model, of_a_run

    trained = SimpleNamespace(backbone=dense_model(4), decoder=dense_model(4))
    run = tf.train.Checkpoint(model=tf.train.Checkpoint(**vars(trained), head=dense_model(2)),
                              step=tf.Variable(7)).save(str(tmp_path / "run" / "ckpt"))
    own = tf.train.Checkpoint(backbone=dense_model(4)).write(str(tmp_path / "own" / "ckpt-1"))
    assert of_a_run(run) and of_a_run(str(tmp_path / "run")) and not of_a_run(own)

    fresh = SimpleNamespace(backbone=dense_model(4), decoder=dense_model(4))
    from_run(fresh, run, "detector")
    for name in ("backbone", "decoder"):
        for mine, theirs in zip(getattr(fresh, name).weights, getattr(trained, name).weights,
                                strict=True):
            np.testing.assert_array_equal(mine.numpy(), theirs.numpy())

    wider = SimpleNamespace(backbone=dense_model(5), decoder=dense_model(4))
    with pytest.raises(ValueError):
        from_run(wider, run, "detector")
    line = not_this_model(run, "backbone", "pets_x", wider, AssertionError("TF's"))
    assert "2 of the 2 variables it restores have other shapes (model/backbone/" in line
    assert "is [3, 4] there and [3, 5] here" in line
    assert "the checkpoint holds model, save_counter, step" in line


def test_a_fresh_start_says_what_it_restored():
    from trainer.training.init_checkpoint import restored_line

    assert restored_line("gs://b/ckpt-5", "detector") == (
        "--init-from: restored the backbone and decoder from gs://b/ckpt-5 (--init-type "
        "detector)")
    assert restored_line("work/run/ckpt-400", "all").startswith(
        "--init-from: restored every layer from work/run/ckpt-400")
