"""A tuning trial's side of the contract: the values Vertex AI appends as --ID=VALUE reach
the config, and the final metrics are written the way its tuning service reads them."""

from __future__ import annotations

import json

import pytest

from trainer.args import TrainArgs, parse
from trainer.common.errors import SettingsError
from trainer.model import hparams
from trainer.model.experiments import EXPERIMENTS


def test_vertex_trial_flags_become_hparams_and_round_trip():
    args = parse(["--experiment=pets_retinanet_mobilenet", "--model_dir=m",
                  "--learning_rate=0.003", "--task__model__head__num_convs=3",
                  "--batch_size=16"])
    assert isinstance(args, TrainArgs)
    assert args.hparams == ("learning_rate=0.003", "task__model__head__num_convs=3",
                            "batch_size=16")
    assert parse(args.to_argv()) == args


def test_a_flag_that_is_no_parameter_is_still_an_error():
    with pytest.raises(SettingsError, match="unrecognized arguments: --trian_steps=5"):
        parse(["--model_dir=m", "--trian_steps=5"])


def test_trial_values_make_one_override_with_typed_values():
    assert hparams.trial_override(["learning_rate=0.003", "input_size=256",
                                   "task__model__head__num_convs=3",
                                   "task.model.backbone.type=mobilenet"]) == {
        "trainer": {"optimizer_config": {"learning_rate": {"cosine": {
            "initial_learning_rate": 0.003}}}},
        "task": {"model": {"input_size": [256, 256, 3], "head": {"num_convs": 3},
                           "backbone": {"type": "mobilenet"}}}}
    with pytest.raises(SettingsError, match="not a finite number"):
        hparams.trial_override(["learning_rate=.nan"])
    with pytest.raises(SettingsError, match="not a tunable parameter"):
        hparams.trial_override(["lr=0.1"])


def test_trial_values_apply_last_and_unknown_paths_are_named(train_records, tmp_path):
    from trainer.training.params import build_params
    from trainer.training.settings import settings_from_args

    def params(*flags):
        return build_params(settings_from_args(parse([
            f"--data_dir={train_records}", f"--model_dir={tmp_path}", *flags])), "float32")

    built = params("--params_override=task.train_data.global_batch_size=4",
                   "--batch_size=2", "--learning_rate=0.02")
    assert built.task.train_data.global_batch_size == 2
    # Vertex AI passes a DISCRETE value as a double; an integer field still gets an integer
    doubled = params("--batch_size=16.0", "--learning_rate=1.0")
    assert type(doubled.task.train_data.global_batch_size) is int
    assert type(doubled.trainer.optimizer_config.learning_rate.cosine.initial_learning_rate) \
        is float
    assert built.trainer.optimizer_config.learning_rate.cosine.initial_learning_rate == 0.02
    with pytest.raises(SettingsError, match="do not fit the experiment's config"):
        params("--task__model__no_such_field=1")


def test_metrics_are_reported_as_cloudml_hypertune_writes_them(tmp_path):
    path = tmp_path / "hypertune" / "output.metrics"
    env = {"CLOUD_ML_TRIAL_ID": "7", "CLOUD_ML_HP_METRIC_FILE": str(path)}
    metrics = {"AP": 0.5, "AP50": 0.75}
    assert not hparams.is_trial({}) and hparams.is_trial(env)
    assert hparams.report(metrics, 300, env) == str(path)
    (line,) = path.read_text().splitlines()
    row = json.loads(line)
    assert row.pop("timestamp") > 0
    assert row == {"trial": "7", "global_step": "300", "AP": "0.5", "AP50": "0.75"}
    hparams.report(metrics, 400, {**env, "CLOUD_ML_HP_METRIC_TAG": "AP50"})
    (line,) = path.read_text().splitlines()  # rewritten, as the library does
    assert {k: v for k, v in json.loads(line).items() if k != "timestamp"} == {
        "trial": "7", "global_step": "400", "AP50": "0.75"}


@pytest.mark.parametrize("experiment", sorted(EXPERIMENTS))
def test_every_friendly_parameter_reaches_every_shipped_experiment(experiment, train_records,
                                                                     tmp_path):
    from trainer.training.params import build_params
    from trainer.training.settings import settings_from_args

    built = build_params(settings_from_args(parse([
        f"--experiment={experiment}", f"--data_dir={train_records}", f"--model_dir={tmp_path}",
        "--learning_rate=0.0123", "--warmup_steps=7", "--batch_size=4", "--input_size=256"])),
        "float32")
    optimizer = built.trainer.optimizer_config
    assert optimizer.learning_rate.cosine.initial_learning_rate == 0.0123
    assert optimizer.warmup.linear.warmup_steps == 7
    assert built.task.train_data.global_batch_size == 4
    assert list(built.task.model.input_size) == [256, 256, 3]
