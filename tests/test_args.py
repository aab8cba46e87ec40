"""The trainer's command line is declared once (trainer/args.py): what a launcher writes is
what the trainer reads, for every command."""

from __future__ import annotations

import dataclasses

import pytest

from trainer import args
from trainer.args import (
    ConvertArgs,
    DownloadArgs,
    ExportArgs,
    PredictArgs,
    SampleArgs,
    TrainArgs,
)
from trainer.common.errors import SettingsError
from trainer.training.settings import parse

EVERY_COMMAND = [
    TrainArgs(),
    TrainArgs(experiment="pets_retinanet_resnetfpn", mode="continuous_eval",
              model_dir="gs://b/runs/r1/checkpoints", data_dir="gs://b/records",
              config_files=("a.yaml", "b=c.yaml"), train_steps=5000,
              init_checkpoint="gs://b/ckpt-1", init_checkpoint_type="detector",
              params_override=("task.model.num_classes=38", "trainer.optimizer_config.x=1"),
              export_dir="/e", eval_idle_timeout=0.25, tpu="local", train_input="/t/*",
              eval_input="/v/*", label_map="/l.pbtxt", strategy="mirrored", num_gpus=2,
              tensorboard_dir="/tb", eval_poll_interval=2.5),
    TrainArgs(mode="eval", eval_split="test"),
    SampleArgs("/s"),
    SampleArgs("/s with space", num_images=12, seed=3, bad_inputs=True),
    DownloadArgs("/d", base_url="http://127.0.0.1:9/pets"),
    ConvertArgs("/in", "/out"),
    ConvertArgs("/in", "/out", num_shards=3, masks=True, format="voc", label_map="/l.pbtxt",
                processes=1, max_pixels=1000, max_objects=7),
    ConvertArgs(None, "/out", format="coco", annotations="/a.json", val_annotations="/v.json",
                images="/img", dense_ids=True, masks=True, test_annotations="/t.json"),
    ConvertArgs(None, "/out", sources=("yolo:/y/data.yaml", "coco:/a.json:/img"),
                classes="/c.yaml", split="0.8", seed=7),
    ConvertArgs("/in", "/out", split="0.7,0.2"),
    SampleArgs("/s", format="labelme"),
    ExportArgs("/m", "/e", checkpoint="ckpt-5"),
    PredictArgs("/model", "/images/*.jpg", "/out", score_threshold=0.05),
]


@pytest.mark.parametrize("command", EVERY_COMMAND, ids=lambda c: type(c).__name__)
def test_every_command_round_trips_through_its_argv(command):
    assert args.parse(command.to_argv()) == command


def test_every_command_has_its_runner_registered_beside_it():
    """The CLI runs a command by its name (trainer/cli/main.py's `@runs`): a command added
    without a runner, or a runner of no command, fails here rather than in a container."""
    from trainer.cli import main as cli

    assert list(cli.RUNNERS) == list(args.COMMANDS) == [
        "train", "data sample", "data download", "data convert", "data convert-in-bucket",
        "export", "predict"]


def test_the_argv_is_the_command_then_the_options_that_differ_from_their_defaults():
    assert TrainArgs(model_dir="/m", train_steps=40, eval_idle_timeout=30.0).to_argv() == [
        "--experiment=pets_retinanet_mobilenet", "--mode=train", "--model_dir=/m",
        "--train_steps=40", "--eval_idle_timeout=30"]  # what runs, always said
    assert ConvertArgs("/in", "/out", format="voc").to_argv() == [
        "data", "convert", "--data_dir=/in", "--output_dir=/out", "--format=voc"]
    assert ExportArgs("/m", "/e").to_argv() == ["export", "--model_dir=/m", "--export_dir=/e"]
    every_field = {f.name for c in args.COMMANDS.values() for f in dataclasses.fields(c)}
    assert "config_files" in every_field  # repeated as --config_file, as Model Garden spells it


def test_params_override_repeats_and_a_single_one_reads_as_model_gardens():
    """Model Garden's one `--params_override=a=1,b=2` is one override; each repeat is applied
    after the one before (a launcher appends its own after the user's)."""
    assert args.parse(["--params_override=a=1,b=2"]).params_override == ("a=1,b=2",)
    assert args.parse(["--params_override=a", "--params-override=b"]).params_override == (
        "a", "b")
    assert TrainArgs().params_override == ()


@pytest.mark.parametrize("bad,message", [
    (["--mode=fly"], "--mode must be one of train, eval, train_and_eval, continuous_eval, "
                     "got 'fly'"),
    (["--train_steps=ten"], "--steps must be a whole number, got 'ten'"),  # invoke's name
    (["--eval_idle_timeout=soon"], "--idle-timeout must be a number, got 'soon'"),
    (["export", "--model_dir=/m"], "--output-dir is required"),  # invoke export's name
    (["data", "convert", "--data_dir=/a"], "--output-dir is required"),
    (["data", "convert", "--output-dir=/o", "--format=yolov8"],
     "--format must be one of pets, voc, coco, yolo, labelme, cvat, labelstudio, got "
     "'yolov8'"),
    (["data", "convert", "--output-dir=/o", "--colour"], "unrecognized arguments: --colour"),
])
def test_bad_flags_are_one_line_naming_the_flag_as_invoke_spells_it(bad, message, capsys):
    """No usage block: the CLI prints the SettingsError as one line and exits 2."""
    with pytest.raises(SettingsError) as error:
        args.parse(bad)
    assert str(error.value) == message
    assert capsys.readouterr() == ("", "")


def test_hyphenated_spellings_are_accepted(capsys):
    assert args.parse(["data", "convert", "--data-dir=/a", "--output-dir=/b",
                       "--num-shards=2"]) == ConvertArgs("/a", "/b", num_shards=2)
    with pytest.raises(SettingsError, match="data sample is a tool, not a training run"):
        parse(["data", "sample", "--output_dir=/s"], {})


@pytest.mark.parametrize("options,message", [
    ({"max_detections": 0}, "--max-detections must be 1 to 1000, got 0"),
    ({"max_detections": 10**9}, "--max-detections must be 1 to 1000"),
    ({"min_score": float("nan")}, "--min-score must be at least 0 and below 1, got nan"),
    ({"min_score": 1.0}, "--min-score must be at least 0 and below 1"),
    ({"min_score": -0.1}, "--min-score must be at least 0 and below 1"),
])
def test_export_options_out_of_range_are_refused(options, message):
    from trainer.common.errors import SettingsError
    from trainer.export.saved_model import ExportOptions

    with pytest.raises(SettingsError, match=message):
        ExportOptions(**options)
    assert ExportOptions(max_detections=20, min_score=0.3).overrides() == {"task": {"model": {
        "detection_generator": {"max_num_detections": 20, "pre_nms_score_threshold": 0.3}}}}


# `python -m trainer ARGS` in a child that reports whether TensorFlow was imported
WITHOUT_TENSORFLOW = """
import runpy, sys
sys.argv = ["trainer", *sys.argv[1:]]
try:
    runpy.run_module("trainer", run_name="__main__")
except SystemExit as exit:
    print("exit", exit.code, "tensorflow" in sys.modules)
"""


@pytest.mark.parametrize("argv,code,message", [
    (["--help"], 0, "usage: python -m trainer"),
    (["data", "convert", "--help"], 0, "usage: python -m trainer data convert"),
    (["--model_dir=m", "--train_steps=0"], 2, "--steps must be at least 1"),
    (["--model_dir=m", "--data_dir=/nonexistent"], 2, "no files match --train-input"),
    (["--model_dir=m", "--mode=eval", "--data_dir=/nonexistent"], 2,
     "no files match --eval-input"),
    # a test split the data lacks, and the test split read by anything but one evaluation
    (["--model_dir=m", "--mode=eval", "--eval_split=test", "--data_dir=."], 2,
     "--split test: the data has no test split (./test.record-* matches no file); convert "
     "it with one"),
    (["--model_dir=m", "--mode=continuous_eval", "--eval-split=test", "--data_dir=."], 2,
     "--split test evaluates one checkpoint once: use --mode eval"),
    # tested after training: on a test split there, by a command that trains
    (["--model_dir=m", "--data_dir=.", "--test_after"], 2,
     "--test: the data has no test split (./test.record-* matches no file); convert it with "
     "one (`invoke data.convert --split` with two fractions, or the format's own test list), "
     "or drop --test"),
    (["--model_dir=m", "--mode=eval", "--data_dir=.", "--test_after"], 2,
     "--test tests what training chose: --mode eval trains nothing"),
    (["--model_dir=m", "--train_input=x", "--test_after"], 2,
     "--test reads the test split: give --data_dir (or --test_input)"),
    (["--model_dir=m", "--data_dir=.", "--init_checkpoint=/no/ckpt-1"], 2,
     "--init-from /no/ckpt-1 not found"),
    (["data", "convert", "--data_dir=/nonexistent", "--output_dir=o"], 2,
     "/nonexistent/annotations/trainval.txt not found"),
    (["export", "--model_dir=m", "--export_dir=e", "--max_detections=0"], 2,
     "--max-detections must be 1 to 1000"),
    (["predict", "--model=m", "--images=/nonexistent/*.jpg", "--output_dir=o"], 2,
     "no image matches /nonexistent/*.jpg"),
])
def test_help_and_bad_flags_are_answered_before_tensorflow_loads(argv, code, message,
                                                                 tmp_path):
    """Start-up costs seconds only where the work needs TensorFlow: help and the mistakes
    one can see from the flags and the file system are answered at once."""
    import subprocess
    import sys
    import time

    from tests.conftest import HANG, REPO

    (tmp_path / "train.record-00000-of-00001").write_bytes(b"")  # for --data_dir=.
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", WITHOUT_TENSORFLOW, *argv], cwd=tmp_path,
                            capture_output=True, text=True, timeout=HANG,
                            env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    print(f"{' '.join(argv)}: {time.perf_counter() - started:.2f} s")
    assert result.stdout.splitlines()[-1] == f"exit {code} False", result.stderr[-2000:]
    assert message in result.stdout + result.stderr
    if code:
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
