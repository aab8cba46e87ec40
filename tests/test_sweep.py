"""A sweep as data: parsed from YAML or --param flags, and refused before anything is built
when it cannot run."""

from __future__ import annotations

import pytest

from launch.values.sweep import Param, Sweep, SweepError, load, parse_flag

FILE = """
metric: AP50
goal: maximize
trials: 12
parallel: 3
algorithm: bayesian
params:
  learning_rate: {low: 1e-4, high: 1e-2, log: true}
  batch_size: [8, 16, 32]
  task.model.head.num_convs: {low: 1, high: 4}
"""


def test_a_sweep_file_reads_into_typed_parameters():
    sweep = Sweep.from_yaml(FILE)
    assert (sweep.metric, sweep.goal, sweep.trials, sweep.parallel) == ("AP50", "maximize",
                                                                        12, 3)
    lr, batch, convs = sweep.params
    assert (lr.low, lr.high, lr.log, lr.integer) == (1e-4, 1e-2, True, False)
    assert lr.config_path == \
        "trainer.optimizer_config.learning_rate.cosine.initial_learning_rate"
    assert batch.values == (8, 16, 32)
    assert (convs.low, convs.high, convs.integer) == (1, 4, True)
    assert convs.parameter_id == "task__model__head__num_convs"
    assert convs.override(3) == {"task": {"model": {"head": {"num_convs": 3}}}}
    assert Param("input_size", values=(128, 256)).override(256) == \
        {"task": {"model": {"input_size": [256, 256, 3]}}}


def test_flags_add_to_or_replace_the_files_parameters_and_fields(tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text(FILE)
    sweep = load(str(path), ["batch_size=4,8", "warmup_steps=10:100",
                             "task.losses.focal_loss_gamma=1.0:3.0"], trials=20, metric=None)
    assert (sweep.trials, sweep.metric) == (20, "AP50")
    assert Sweep.from_mapping(sweep.as_mapping()) == sweep
    by_name = {p.name: p for p in sweep.params}
    assert by_name["batch_size"].values == (4, 8)
    assert (by_name["warmup_steps"].low, by_name["warmup_steps"].integer) == (10, True)
    assert by_name["task.losses.focal_loss_gamma"].high == 3.0
    assert parse_flag("learning_rate=0.0001:0.1:log").log
    assert parse_flag("task.model.backbone.type=mobilenet,resnet").values == ("mobilenet",
                                                                               "resnet")


@pytest.mark.parametrize("change, message", [
    ({"metric": "accuracy"}, "not one the evaluator writes"),
    ({"goal": "up"}, "use maximize or minimize"),
    ({"trials": 0}, "trials must be a whole number from 1"),
    ({"trials": 2, "parallel": 3}, r"parallel \(3\) is more than trials"),
    ({"trials": True}, "trials must be a whole number"),
    ({"algorithm": "annealing"}, "algorithm 'annealing'"),
    ({"params": {"lr": {"low": 0.1, "high": 1}}}, "parameter 'lr' is neither"),
    ({"params": {"learning_rate": {"low": 0.1, "high": 0.1}}}, "is empty"),
    ({"params": {"learning_rate": {"low": 0, "high": 1, "log": True}}}, "needs low > 0"),
    ({"params": {"learning_rate": {"low": "nan", "high": 1}}},
     "learning_rate: low must be a number, got 'nan'"),
    ({"params": {"learning_rate": {"low": float("-inf"), "high": 1}}},
     "learning_rate: low must be a number, got -inf"),
    ({"params": {"learning_rate": {"low": 0.1, "high": True}}},
     "learning_rate: high must be a whole number, got True"),
    ({"params": {"learning_rate": {"low": "x", "high": 1}}},
     "learning_rate: low must be a number, got 'x'"),
    ({"params": {"batch_size": [8, 8]}}, "repeat"),
    ({"params": {"batch_size": []}}, "give low and high"),
    ({"params": {}}, "at least one parameter"),
    ({"params": {"../etc": [1]}}, "neither"),
    ({"algorithm": "grid"}, "a grid needs values or integer ranges; learning_rate"),
    ({"extra": 1}, "unknown sweep fields: extra"),
])
def test_sweeps_that_cannot_run_are_refused_naming_the_field(change, message):
    import yaml

    data = {**yaml.safe_load(FILE), **change}
    with pytest.raises(SweepError, match=message):
        Sweep.from_mapping(data)


@pytest.mark.parametrize("flag, message", [
    ("learning_rate", "use NAME=LOW:HIGH"),
    ("learning_rate=1:2:3", "LOW:HIGH or LOW:HIGH:log"),
    ("learning_rate=nan,0.1", "not a number or a word"),
    ("learning_rate=2:1", "is empty"),
])
def test_bad_param_flags_are_named(flag, message):
    with pytest.raises(SweepError, match=message):
        parse_flag(flag)


def test_a_sweep_file_that_is_not_yaml_or_not_a_mapping_is_named():
    with pytest.raises(SweepError, match="not YAML"):
        Sweep.from_yaml("params: [unclosed")
    with pytest.raises(SweepError, match="is a mapping"):
        Sweep.from_yaml("- a\n- b\n")


def test_a_missing_or_broken_sweep_file_is_named(tmp_path):
    with pytest.raises(SweepError, match=r"^--sweep .*nope\.yaml: cannot read it"):
        load(str(tmp_path / "nope.yaml"))
    (tmp_path / "bad.yaml").write_text("params: [\n")
    with pytest.raises(SweepError, match="not YAML"):
        load(str(tmp_path / "bad.yaml"))
    with pytest.raises(SweepError, match="at least one parameter"):
        load(None)


def test_the_guides_sweep_file_is_a_valid_sweep():
    from tests.conftest import REPO

    page = (REPO / "docs" / "guides" / "tuning.md").read_text()
    block = page.split("```yaml\n# sweep.yaml\n", 1)[1].split("```", 1)[0]
    sweep = Sweep.from_yaml(block)
    assert (sweep.metric, sweep.trials, sweep.parallel) == ("AP50", 12, 3)
    assert {p.name for p in sweep.params} >= {"learning_rate", "batch_size"}
