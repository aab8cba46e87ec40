"""One option schema and one number reader (trainer/common/options.py): a value typed on the
trainer's command line, as a flag of `invoke train`, as a key of a job file or as a flag of a
task without a job file means the same number, and each check is written once, on the value
that owns it, so both the launcher's request building and the trainer's parsing refuse in the
same one line."""

from __future__ import annotations

import pytest

from launch.errors import InputError
from launch.features.workflow import export
from launch.targets.vertex.hardware import machine_for
from launch.targets.vertex.resources import Resources, Scheduling
from launch.values import jobfile
from launch.values.jobs import TrainerDirs
from launch.values.resources import optional_number
from trainer import args as trainer_args
from trainer.cli import bucket_convert
from trainer.cli import main as cli
from trainer.common.errors import SettingsError

# text as typed -> the whole number every reader takes it for (None: refused, quoted)
WHOLE_NUMBERS = {"12": 12, " 5": 5, "1_000": 1000, "1e1": 10, "2.0": 2, "1e15": 10**15,
                 "1.5": None, "nan": None, "inf": None, "-inf": None, "1e400": None,
                 "1e16": None, "0x10": None, "ten": None, "9" * 5000: None}


def _trainer_steps(text: str) -> int:
    return trainer_args.parse([f"--train_steps={text}"]).train_steps


def _job_flag_steps(text: str) -> int:
    return jobfile.resolve("train", {"steps": text}).steps


def _job_key_steps(text: str) -> int:
    return jobfile.resolve("train", {}, {"steps": text}, "job.yaml").steps


def _task_flag_steps(text: str) -> int:
    return optional_number("--steps", text, int)


READERS = {"trainer": _trainer_steps, "invoke train --steps": _job_flag_steps,
           "job file steps:": _job_key_steps, "a task's number flag": _task_flag_steps}


@pytest.mark.parametrize("reader", READERS, ids=list(READERS))
def test_every_reader_gives_one_answer_for_each_text(reader):
    for text, expected in WHOLE_NUMBERS.items():
        if expected is not None:
            assert READERS[reader](text) == expected, text
            continue
        with pytest.raises((SettingsError, InputError)) as refused:
            READERS[reader](text)
        message = str(refused.value)
        assert message.startswith("--steps ") and "must be a whole number, got '" in message
        assert "\n" not in message and len(message) < 200, text


def _trainer(argv: list[str]) -> str:
    with pytest.raises(SettingsError) as refused:
        trainer_args.parse(argv)
    return str(refused.value)


def _job(task: str, flags: dict, file: dict | None = None) -> str:
    with pytest.raises(InputError) as refused:
        jobfile.request(jobfile.resolve(task, flags, file, "job.yaml"), task)
    return str(refused.value)


@pytest.mark.parametrize(("argv", "task", "flags", "message"), [
    (["--train_steps=0"], "train", {"steps": "0"}, "--steps must be at least 1, got '0'"),
    (["--mode=continuous_eval", "--train_steps=-5"], "eval", {"steps": "-5"},
     "--steps must be at least 1, got '-5'"),
    (["--mode=continuous_eval", "--eval_idle_timeout=0"], "eval", {"idle_timeout": "0"},
     "--idle-timeout must be more than 0, got '0'"),
    (["--mode=continuous_eval", "--eval_idle_timeout=nan"], "eval", {"idle_timeout": "nan"},
     "--idle-timeout must be a number, got 'nan'"),
], ids=["steps", "eval steps", "idle timeout", "idle timeout nan"])
def test_a_trainer_value_is_refused_alike_by_the_trainer_and_the_launcher(argv, task, flags,
                                                                         message):
    """TrainArgs' bounds, from `python -m trainer` and from `invoke train|eval` (a flag and a
    job file's key)."""
    assert _trainer(argv) == message
    assert _job(task, flags) == message
    file = {name.replace("_", "-"): value for name, value in flags.items()}
    if task == "eval":
        file = {"eval": file} if "idle_timeout" in flags else file
    assert _job(task, {}, file) == message.replace(" must", " (in job.yaml) must", 1)


@pytest.mark.parametrize(("flags", "direct", "message"), [
    ({"workers": "-1"}, lambda: Resources.from_flags(workers="-1"),
     "--workers must be at least 0, got '-1'"),
    ({"workers": "1", "reduction_servers": "-2"},
     lambda: Resources.from_flags(workers="1", reduction_servers="-2"),
     "--reduction-servers must be at least 0, got '-2'"),
    ({"timeout_hours": "0"}, lambda: Scheduling.from_flags(timeout_hours="0"),
     "--timeout-hours must be at least 1 minute (0.0167 h), got '0'"),
    ({"timeout_hours": "1e5"}, lambda: Scheduling(timeout_hours=1e5),
     "--timeout-hours must be at most 87600, got "),
    ({"flex_start": True, "max_wait_hours": "-1"},
     lambda: Scheduling.from_flags(flex_start=True, max_wait_hours="-1"),
     "--max-wait-hours must be 0 (no limit) or at least 1 minute (0.0167 h), got '-1'"),
    ({"target": "vertex", "tpu": "v5litepod-4", "workers": "2"},
     lambda: Resources(tpu="v5litepod-4", workers=2),
     "a TPU job is one slice (every host of a multi-host slice runs the trainer): drop "
     "--workers and --reduction-servers"),
], ids=["workers", "reduction servers", "timeout", "timeout at most", "max wait", "tpu slice"])
def test_a_machine_value_is_refused_alike_by_the_job_file_and_resources(flags, direct,
                                                                      message):
    """Resources' checks, from a job (`invoke train`) and from a value built without a job
    file (a conversion or prediction job's resources, a test's)."""
    assert _job("train", flags).startswith(message)
    with pytest.raises(InputError) as refused:
        direct()
    assert str(refused.value).startswith(message)


def test_a_tpu_machine_type_with_workers_is_the_same_one_check():
    """The catalogue knows ct5lp-hightpu-4t is a TPU: the same check, called with that."""
    with pytest.raises(InputError) as refused:
        machine_for(Resources(machine_type="ct5lp-hightpu-4t", workers=1), "us-central1")
    assert str(refused.value) == str(_refused(lambda: Resources(tpu="v5litepod-4", workers=1)))


def _refused(action) -> Exception:
    with pytest.raises(InputError) as refused:
        action()
    return refused.value


@pytest.mark.parametrize(("flags", "message"), [
    ({"quantize": "int8"}, "--quantize applies to --format tflite"),
    ({"format": "tflite", "default_signature": "bytes"},
     "--default-signature applies to SavedModels; a .tflite, .onnx or OpenVINO model takes "
     "decoded pixels"),
    ({"format": "onnx,tensorrt"},
     "--format must be one of saved_model, tflite, onnx, openvino, got 'tensorrt'"),
    ({"format": " , "}, "--format takes one or more of saved_model, tflite, onnx, openvino"),
    ({"format": "onnx", "quantize": "int8"}, "--quantize applies to --format tflite"),
    ({"format": "saved_model,tflite", "force": "a demo"},
     "--force applies to --quantize int8 (a file that lost more than --max-int8-drop) and to "
     "--format onnx or openvino (a file that answers unlike the SavedModel)"),
    ({"format": "openvino", "force": " "}, "--force takes the reason, recorded in export.json"),
    ({"quantize": "int4", "format": "tflite"}, "--quantize must be one of float16, int8, got "
                                               "'int4'"),
])
def test_export_options_are_refused_alike_by_the_trainer_and_invoke_export(flags, message,
                                                                          tmp_path, capsys):
    """ExportArgs.check, from `python -m trainer export` (its entrypoint, in-process) and from
    `invoke export` (before a checkpoint is staged or a job runs)."""
    argv = ["export", f"--model_dir={tmp_path / 'm'}", f"--export_dir={tmp_path / 'e'}",
            *(f"--{name}={value}" for name, value in flags.items())]
    assert cli.main(argv) == cli.EXIT_USAGE
    assert capsys.readouterr().err == f"{cli.ERROR_PREFIX}{message}\n"
    refused = _refused(lambda: export(trainer_args.ExportArgs(
        str(tmp_path / "m"), str(tmp_path / "e"), **flags)))
    assert str(refused) == message
    assert not (tmp_path / "e").exists()


def test_export_formats_are_written_savedmodel_first_once_each():
    """The others are checked against the SavedModel, so it is written first, whatever the
    order typed."""
    args = trainer_args.ExportArgs("m", "e", format="openvino, onnx,saved_model,onnx")
    assert args.formats() == ("saved_model", "onnx", "openvino")
    trainer_args.ExportArgs("m", "e", format="onnx", force="a reason").check()  # accepted


def test_a_job_files_values_land_on_the_trainers_fields_with_their_checks():
    """`lands`: a JobFile field names the trainer field it becomes in the request's args
    and takes that field's bound and choices, so the launcher cannot drift from the
    trainer."""
    for name, (command, landing) in {
            "steps": (trainer_args.TrainArgs, "train_steps"),
            "idle_timeout": (trainer_args.TrainArgs, "eval_idle_timeout"),
            "early_stop_patience": (trainer_args.TrainArgs, "early_stop_patience"),
            "early_stop_min_delta": (trainer_args.TrainArgs, "early_stop_min_delta"),
            "early_stop_evaluator": (trainer_args.TrainArgs, "early_stop_evaluator"),
            "split": (trainer_args.TrainArgs, "eval_split"),
            "seed": (trainer_args.TrainArgs, "seed")}.items():
        theirs = trainer_args.field_of(command, landing).metadata
        ours = jobfile.FIELDS[name].metadata
        assert (ours["bound"], ours["choices"]) == (theirs["bound"], theirs["choices"]), name
    job = jobfile.resolve("train", {"steps": "1e3", "early_stop_patience": "2"})
    args = jobfile.request(job, "train").trainer_job(TrainerDirs("m", "d")).args
    assert "--train_steps=1000" in args and "--early_stop_patience=2" in args
    assert "--mode=train" in args  # --evaluate: the training evaluates its checkpoints itself
    evaluating = jobfile.request(jobfile.resolve("train", {"evaluate": True}), "train")
    assert evaluating.args.mode == "train_and_eval"
    testing = jobfile.request(jobfile.resolve("train", {"test": True}), "train")
    assert "--test_after" in testing.trainer_job(TrainerDirs("m", "d")).args  # --test
    listed = testing.reading("gs://b/datasets/pets/v1", data_files=(
        "train.record-00000-of-00001", "val.record-00000-of-00001",
        "test.record-00000-of-00001"))  # a named dataset's version: its listed files
    assert "--test_input=gs://b/datasets/pets/v1/test.record-00000-of-00001" in \
        listed.trainer_job(TrainerDirs("m", "d")).args
    with pytest.raises(InputError, match=r"^--test: the named dataset lists no test split"):
        listed.reading("gs://b/x", data_files=("train.record-0",)).trainer_job(
            TrainerDirs("m", "d"))
    tuning = jobfile.request(jobfile.resolve("tune", {}), "tune")
    assert tuning.args.mode == "train"
    assert {name: field.metadata["lands"] for name, field in jobfile.FIELDS.items()
            if field.metadata["lands"]} == {
        "experiment": "experiment", "data_dir": "data_dir", "steps": "train_steps",
        "config_file": "config_files", "early_stop_patience": "early_stop_patience",
        "early_stop_min_delta": "early_stop_min_delta",
        "early_stop_evaluator": "early_stop_evaluator", "idle_timeout": "eval_idle_timeout",
        "split": "eval_split", "seed": "seed", "test": "test_after"}
    evaluation = jobfile.request(jobfile.resolve("eval", {
        "idle_timeout": "30", "once": True, "data_dir": "d", "config_file": ["c.yaml"],
        "steps": "7"}), "eval")
    assert evaluation.args == trainer_args.TrainArgs(
        mode="eval", data_dir="d", config_files=("c.yaml",), train_steps=7,
        eval_idle_timeout=30.0)  # no directories: the target fills them
    on_test = jobfile.request(jobfile.resolve("eval", {"split": "test"}), "eval")
    assert (on_test.args.mode, on_test.args.eval_split) == ("eval", "test")  # once, --once or not


@pytest.mark.parametrize(("flags", "message"), [
    ({"split": "1.5"}, "--split is the train fraction, between 0 and 1 (0.8: 80% train), got "
                       "1.5"),
    ({"num_shards": "0"}, "--num-shards must be at least 1, got 0"),
    ({"format": "voc", "dense_ids": True}, "--annotations, --val-annotations, "
                                           "--test-annotations, --images and --dense-ids are "
                                           "for --format coco"),
], ids=["split", "shards", "coco only"])
def test_conversion_flags_are_refused_alike_by_the_trainer_and_a_conversion_job(flags, message,
                                                                              capsys):
    """ConvertArgs.check, from `python -m trainer data convert` (in-process) and from the
    launcher's building of a conversion job (bucket_convert.passed_flags, before any survey)."""
    argv = ["data", "convert", "--data_dir=gs://b/raw", "--output_dir=o",
            *(f"--{k}" if v is True else f"--{k}={v}" for k, v in flags.items())]
    assert cli.main(argv) == cli.EXIT_USAGE
    assert capsys.readouterr().err == f"{cli.ERROR_PREFIX}{message}\n"
    typed = trainer_args.parse(argv)  # the values as a launcher holds them
    with pytest.raises(SettingsError) as refused:
        bucket_convert.passed_flags(typed)
    assert str(refused.value) == message


@pytest.mark.parametrize("float_ap50, int8_ap50, force, refused", [
    (0.994, 0.994, None, False), (0.90, 0.86, None, False), (0.90, 0.84, None, True),
    (0.994, 0.0, None, True), (0.994, 0.0, "a phone that runs int8 only", False),
    (0.80, 0.85, None, False),  # int8 better: nothing lost
])
def test_the_int8_gate_refuses_past_its_margin_unless_a_reason_forces_it(
        float_ap50, int8_ap50, force, refused):
    """Issue 41 item 7, the decision alone (the measurement: tests/test_edge_export.py):
    both figures in the refusal and the fixes; a forced file records why."""
    from trainer.export.tflite import Int8Gate, judge

    gate = Int8Gate(0.05, force)
    if refused:
        with pytest.raises(SettingsError, match=rf"int8 loses too much: AP50 {int8_ap50:.3f} "
                           rf"against the float file's {float_ap50:.3f} on 98 validation "
                           r"images .*more than --max-int8-drop 0\.05\); nothing written"):
            judge(float_ap50, int8_ap50, 98, gate)
        return
    checked = judge(float_ap50, int8_ap50, 98, gate)
    assert checked.record() == {"float_ap50": float_ap50, "int8_ap50": int8_ap50,
                                "drop": pytest.approx(float_ap50 - int8_ap50),
                                "max_drop": 0.05, "images": 98, "forced": force}
    assert checked.line().endswith(f"; forced: {force}") == bool(force)
    assert "(drop 0.000," in checked.line() or checked.drop > 0
