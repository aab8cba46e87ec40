"""What a training run makes before its first step (trainer/training/train.py)."""

from __future__ import annotations

from trainer.model.experiments import DEFAULT_EXPERIMENT


def test_the_optimizers_slots_exist_before_the_first_step(small_records, tmp_path):
    """Every trainable variable has its optimizer slots once the trainer is built: none is
    made in the first step, which would make `tf.function` trace the training loop twice."""
    import tensorflow as tf
    from official.core import task_factory

    from trainer.training import settings
    from trainer.training.params import build_params
    from trainer.training.train import trainer_with_slots

    parsed = settings.parse([f"--experiment={DEFAULT_EXPERIMENT}", f"--model_dir={tmp_path}",
                             f"--data_dir={small_records}"], {})
    params = build_params(parsed, "float32")
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        task = task_factory.get_task(params.task)
    trainer = trainer_with_slots(strategy, task, params)
    optimizer, variables = trainer.optimizer, trainer.model.trainable_variables
    names = optimizer.get_slot_names()
    assert variables and names  # Adam: m and v
    assert all(optimizer.get_slot(variable, name) is not None
               for variable in variables for name in names)
