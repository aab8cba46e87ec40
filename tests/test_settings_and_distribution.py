"""Flags, Vertex AI environment variables and strategy choice, decided by pure functions."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tests.conftest import trainer_here
from trainer.common.errors import ClusterSpecError, SettingsError
from trainer.training import distribution, settings

VERTEX_CLUSTER_SPEC = {
    "cluster": {"workerpool0": ["cmle-training-workerpool0-ab-0:2222"],
                "workerpool1": ["cmle-training-workerpool1-ab-0:2222",
                                "cmle-training-workerpool1-ab-1:2222"]},
    "environment": "cloud",
    "task": {"type": "workerpool1", "index": 1},
    "job": "{}",
}


def test_cluster_spec_becomes_tf_config():
    env = {"CLUSTER_SPEC": json.dumps(VERTEX_CLUSTER_SPEC)}
    config = json.loads(distribution.cluster_env(env)["TF_CONFIG"])
    assert config == {
        "cluster": {"chief": ["cmle-training-workerpool0-ab-0:2222"],
                    "worker": ["cmle-training-workerpool1-ab-0:2222",
                               "cmle-training-workerpool1-ab-1:2222"]},
        "task": {"type": "worker", "index": 1},
    }
    assert not distribution.is_chief(config) and distribution.num_workers(config) == 3
    assert distribution.cluster_env({**env, "TF_CONFIG": "{}"}) == {}  # Vertex's own wins


def test_malformed_cluster_spec_is_a_clear_error():
    with pytest.raises(ClusterSpecError, match="not JSON"):
        distribution.cluster_env({"CLUSTER_SPEC": "{oops"})
    with pytest.raises(ClusterSpecError, match="Vertex AI's format"):
        distribution.cluster_env({"CLUSTER_SPEC": '{"cluster": 1}'})


@pytest.mark.parametrize("requested,env,gpus,tpu,expected", [
    ("auto", {}, 0, None, "one_device"),
    ("auto", {}, 1, None, "one_device"),
    ("auto", {}, 4, None, "mirrored"),
    ("auto", {}, 0, "local", "tpu"),
    ("auto", {"CLUSTER_SPEC": json.dumps(VERTEX_CLUSTER_SPEC)}, 1, None,
     "multi_worker_mirrored"),
    ("mirrored", {}, 0, None, "mirrored"),
])
def test_strategy_follows_the_environment(requested, env, gpus, tpu, expected):
    assert distribution.choose_strategy(requested, env, gpus, tpu) == expected


def test_every_host_of_a_multi_host_tpu_slice_knows_its_part():
    hosts = {"TPU_WORKER_HOSTNAMES": "t1k-w-0,t1k-w-1,t1k-w-2,t1k-w-3"}
    first, third = (distribution.tpu_slice({**hosts, "TPU_WORKER_ID": i}) for i in "02")
    assert first == distribution.TpuSlice(0, 4) and third == distribution.TpuSlice(2, 4)
    assert distribution.is_chief({}, first) and not distribution.is_chief({}, third)
    # one slice, one TPUStrategy: the resolver finds the slice's hosts itself
    assert distribution.tpu_address("local", first) is None
    single = distribution.tpu_slice({})  # a single-host TPU VM, or no TPU at all
    assert single == distribution.TpuSlice(0, 1) and not single.multi_host
    assert distribution.tpu_address("local", single) == "local"
    for bad in ("4", "-1", "x", "1e9"):
        with pytest.raises(ClusterSpecError, match="TPU_WORKER_ID"):
            distribution.tpu_slice({**hosts, "TPU_WORKER_ID": bad})


@pytest.mark.parametrize("strategy,gpus,expected", [
    ("tpu", 0, "bfloat16"), ("mirrored", 8, "float16"), ("one_device", 1, "float16"),
    ("one_device", 0, "float32"), ("multi_worker_mirrored", 0, "float32")])
def test_precision_follows_the_device(strategy, gpus, expected):
    assert distribution.precision_for(strategy, gpus) == expected


def test_vertex_directories_come_from_aip_variables():
    env = {"AIP_CHECKPOINT_DIR": "gs://b/job/checkpoints/", "AIP_MODEL_DIR": "gs://b/job/model/",
           "AIP_TENSORBOARD_LOG_DIR": "gs://b/job/logs/"}
    s = settings.parse(["--data_dir=gs://b/records/"], env, exists=lambda path: False)
    assert s.model_dir == "gs://b/job/checkpoints"
    assert s.export_dir == "gs://b/job/model/" and s.tensorboard_dir == "gs://b/job/logs/"
    assert s.train_input == "gs://b/records/train.record-*"
    assert s.eval_input == "gs://b/records/val.record-*"
    assert s.label_map == "gs://b/records/label_map.pbtxt"
    # records converted before 2026-11-28 named it after the Pets quick start's file
    older = settings.parse(["--data_dir=gs://b/records/"], env,
                           exists=lambda path: path.endswith("/pet_label_map.pbtxt"))
    assert older.label_map == "gs://b/records/pet_label_map.pbtxt"
    explicit = settings.parse(["--model_dir=/m", "--data_dir=/d", "--train_input=/x/*"], env)
    assert explicit.model_dir == "/m" and explicit.train_input == "/x/*"


def test_settings_are_the_flags_resolved_not_a_copy_of_them():
    """Every training flag is a settings field by inheritance; resolution adds only what the
    environment says (the hardware)."""
    from trainer.args import TrainArgs

    flags = TrainArgs(model_dir="/m", train_steps=7, params_override=("a=1",), hparams=("x=1",))
    s = settings.settings_from_args(flags, {"PETS_HARDWARE": "1 x T4"})
    assert isinstance(s, TrainArgs) and s.hardware == "1 x T4" and s.trains
    assert {f.name for f in dataclasses.fields(s)} == {
        f.name for f in dataclasses.fields(TrainArgs)} | {"hardware"}
    assert (s.train_steps, s.params_override, s.hparams) == (7, ("a=1",), ("x=1",))
    assert s.init_checkpoint_type == "backbone"
    assert not any("hardware" in flag for flag in s.to_argv())  # not a flag


def test_missing_model_dir_is_a_usage_error():
    with pytest.raises(SettingsError, match="--model-dir is required"):
        settings.parse([], {})


def test_params_follow_flags_in_documented_order(train_records, tmp_path):
    from trainer.training.params import build_params

    override = tmp_path / "override.yaml"
    override.write_text("task:\n  train_data:\n    global_batch_size: 4\n")
    (tmp_path / "backbone.index").write_bytes(b"")  # a checkpoint prefix that exists
    s = settings.parse([f"--model_dir={tmp_path}", f"--data_dir={train_records}",
                        f"--config_file={override}", "--train_steps=30",
                        "--params_override=task.train_data.global_batch_size=8",
                        '--params_override={"task": {"train_data": {"global_batch_size": 2}}}',
                        f"--init_checkpoint={tmp_path}/backbone",
                        "--init_checkpoint_type=all", "--seed=7"],
                       {})
    params = build_params(s, "float32")
    assert (params.task.train_data.seed, params.task.train_data.deterministic) == (7, True)
    assert params.task.train_data.global_batch_size == 2  # the last --params_override wins
    # the largest label-map id + background: the COCO sample keeps Pets' ids (up to 28)
    assert params.task.model.num_classes == 29
    assert params.trainer.train_steps == 30
    assert params.trainer.optimizer_config.learning_rate.cosine.decay_steps == 30
    assert params.task.init_checkpoint == f"{tmp_path}/backbone"
    assert params.task.init_checkpoint_modules == "all"
    assert params.task.train_data.input_path == f"{train_records}/train.record-*"
    # what the flags own (the data, the checkpoint) no --params_override changes, in any form
    for swap in ("task.train_data.input_path=gs://evil/train*",
                 '{"task": {"validation_data": {"input_path": "gs://evil/val*"}}}',
                 "task:\n  init_checkpoint: gs://evil/ckpt-1"):
        s = settings.parse([f"--model_dir={tmp_path}", f"--data_dir={train_records}",
                            f"--params_override={swap}"], {})
        with pytest.raises(SettingsError, match=r"^--params-override sets task\.\w+\.?\w*, "
                                                r"which the trainer takes from --"):
            build_params(s, "float32")
    for broken in ("x={a: 1, b: 2}", "task: [unclosed"):  # not YAML: one line, no traceback
        s = settings.parse([f"--model_dir={tmp_path}", f"--data_dir={train_records}",
                            f"--params_override={broken}"], {})
        with pytest.raises(SettingsError, match=r"^--params-override .* does not fit the "
                                                r"experiment's config"):
            build_params(s, "float32")
    # what Orbit would refuse with a traceback once the model is built: refused first
    for loops, said in (("trainer.steps_per_loop=30", r"summary_interval \(50\) must be a "
                         r"multiple of trainer\.steps_per_loop \(30\)"),
                        ("trainer.steps_per_loop=0", r"steps_per_loop must be .* got 0")):
        s = settings.parse([f"--model_dir={tmp_path}", f"--data_dir={train_records}",
                            f"--params_override={loops}"], {})
        with pytest.raises(SettingsError, match=rf"^--params-override: trainer\.{said}"):
            build_params(s, "float32")


@pytest.mark.parametrize("args,message", [
    (["--model_dir=/tmp/m", "--data_dir=/nonexistent"], "no files match --train-input"),
    (["--model_dir=/tmp/m", "--experiment=nope"], "unknown --experiment 'nope'"),
    (["--data_dir=/tmp"], "--model-dir is required"),
    (["--model_dir=/tmp/m", "--seed=-1"], "--seed"),
])
def test_bad_flags_exit_with_a_message_not_a_traceback(args, message, monkeypatch):
    """The container's `main`, in this process (the process's exit status is `main`'s
    return: tests/test_exit_codes.py runs the trainer's process)."""
    monkeypatch.setenv("AIP_CHECKPOINT_DIR", "")
    result = trainer_here(*args, check=False)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("experiment", ["pets_retinanet_mobilenet", "pets_retinanet_resnetfpn",
                                        "pets_fasterrcnn_resnetfpn", "pets_maskrcnn_mobilenet",
                                        "pets_maskrcnn_resnetfpn"])
@pytest.mark.parametrize("precision", ["float32", "float16", "bfloat16"])
def test_every_shipped_experiment_builds_a_valid_config(experiment, precision, train_records,
                                                        tmp_path):
    from trainer.model.experiments import EXPERIMENTS
    from trainer.training.params import build_params

    assert experiment in EXPERIMENTS
    params = build_params(settings.parse([f"--experiment={experiment}",
                                          f"--model_dir={tmp_path}",
                                          f"--data_dir={train_records}"], {}), precision)
    assert params.runtime.mixed_precision_dtype == precision
    assert params.task.train_data.dtype == params.task.validation_data.dtype == precision
    assert params.task.model.num_classes == 29
    assert params.task.annotation_file is None  # ground truth comes from the records
    assert params.task.model.detection_generator.max_num_detections == 100
