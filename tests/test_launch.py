"""Jobs as data, the local executor's cluster environment, and the invoke tasks."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from launch.errors import InputError
from launch.targets.local.processes import (
    LocalExecutor,
    cluster_specs,
    progress_printer,
    replica_environments,
)
from launch.values import jobs
from launch.values.resources import Resources
from tests.cli import REPO, invoke
from tests.conftest import HANG
from trainer.args import ConvertArgs, TrainArgs

ARGS = TrainArgs(train_steps=40, params_override=("a.b=1", '{"a": {"c": 2}}'),
                 init_checkpoint="/ckpt", init_checkpoint_type="backbone",
                 config_files=("x.yaml",))
DIRS = jobs.TrainerDirs(model_dir="/m", data_dir="/d")  # the target's, filled in by the request
EVAL = jobs.Evaluation(dataclasses.replace(ARGS, mode="continuous_eval", eval_idle_timeout=30))


def test_train_job_is_the_trainer_command_line():
    training = jobs.Training(dataclasses.replace(ARGS, export_dir="/e"), Resources(workers=2))
    job = training.trainer_job(DIRS)
    assert job.args == ("--experiment=pets_retinanet_mobilenet", "--mode=train",
                        "--model_dir=/m", "--data_dir=/d", "--config_file=x.yaml",
                        "--train_steps=40", "--init_checkpoint=/ckpt",
                        "--init_checkpoint_type=backbone", "--params_override=a.b=1",
                        '--params_override={"a": {"c": 2}}', "--export_dir=/e")
    assert [p.replica_count for p in job.pools] == [1, 2] and job.num_replicas == 3
    evaluation = EVAL.trainer_job(DIRS)
    assert "--mode=continuous_eval" in evaluation.args and evaluation.name == \
        "eval-pets_retinanet_mobilenet" and job.name == "train-pets_retinanet_mobilenet"
    assert "--eval_idle_timeout=30" in evaluation.args and evaluation.num_replicas == 1


@pytest.mark.parametrize("workers", [-1])
def test_invalid_worker_counts_are_rejected(workers):
    with pytest.raises(InputError, match="--workers"):
        jobs.Training(ARGS, Resources(workers=workers))
    with pytest.raises(InputError, match="at least 1 replica"):
        jobs.WorkerPool(0)


def test_replicas_get_vertex_cluster_specs_on_localhost():
    job = jobs.Training(ARGS, Resources(workers=2)).trainer_job(DIRS)
    specs = cluster_specs(job)
    assert [s["task"] for s in specs] == [{"type": "workerpool0", "index": 0},
                                          {"type": "workerpool1", "index": 0},
                                          {"type": "workerpool1", "index": 1}]
    cluster = specs[0]["cluster"]
    addresses = cluster["workerpool0"] + cluster["workerpool1"]
    assert len(addresses) == 3 == len(set(addresses))
    assert all(a.startswith("127.0.0.1:") for a in addresses)

    envs = replica_environments(job, {"TF_CONFIG": "stale", "HOME": "/root"})
    assert all("TF_CONFIG" not in e and e["HOME"] == "/root" for e in envs)
    assert [json.loads(e["CLUSTER_SPEC"])["task"]["index"] for e in envs] == [0, 0, 1]
    (single,) = replica_environments(EVAL.trainer_job(DIRS), {"CLUSTER_SPEC": "{}"})
    assert "CLUSTER_SPEC" not in single


def test_a_failing_replica_fails_the_job():
    lines = []
    executor = LocalExecutor(on_line=lambda replica, line: lines.append(line))
    code = executor.run(jobs.tool_job(ConvertArgs("/nonexistent", "/tmp/never")))
    # a --data-dir without the layout: the user's to fix (trainer/common/errors.py)
    assert code == 2
    assert any("error: /nonexistent/annotations/trainval.txt not found" in line
               for line in lines)


def test_progress_printer_turns_step_and_tqdm_lines_into_bars(capsys):
    from rich.console import Console

    console = Console(file=sys.stdout, force_terminal=False, width=100)
    on_line, close = progress_printer(100, console)
    on_line(0, "train | step:     50 | steps/sec:    5.0 | output: ")
    on_line(0, "    {'box_loss': np.float32(0.003),")
    on_line(0, "converting:  50%|#####     | 5/10 [00:01<00:01,  5.00img/s]")
    on_line(1, "saved checkpoint to /m/ckpt-50.")
    on_line(0, "failed call to cuInit: INTERNAL: CUDA error")
    on_line(0, "converting: 100%|##########| 10/10 [00:02<00:00,  5.00img/s]")
    on_line(0, "converting: 100%|##########| 10/10 [00:02<00:00,  5.00img/s]")
    on_line(0, "wrote 10 examples: train 7, val 3")
    close()
    out = capsys.readouterr().out
    assert "[replica 1] saved checkpoint" in out
    assert "box_loss" not in out and "cuInit" not in out
    # issue 38 item 8: in a log (no terminal), no bar drawn after the stage's own summary: a
    # finished bar is one line, in its place
    assert out.splitlines()[-2:] == ["converting: 10/10", "wrote 10 examples: train 7, val 3"]
    assert "5/10" not in out and out.count("converting") == 1
    assert out.splitlines()[0].rstrip() == "train | step:     50 | steps/sec:    5.0 | output:"


def test_in_a_terminal_the_step_lines_loss_shows_above_the_bar():
    """A terminal's training bar hid every step line, its loss with it."""
    import io

    from rich.console import Console

    shown = io.StringIO()
    on_line, close = progress_printer(100, Console(file=shown, force_terminal=True, width=200))
    on_line(0, "train | step:     50 | steps/sec:    5.0 | output: total_loss: 1.235 | "
               "learning_rate: 0.01")
    on_line(1, "train | step:     50 | steps/sec:    5.0 | output: total_loss: 1.235")
    close()
    assert shown.getvalue().count("total_loss: 1.235 | learning_rate: 0.01") == 1
    assert "[replica 1]" not in shown.getvalue()


def test_invoke_menu_lists_the_tasks():
    result = invoke("--list")
    assert result.returncode == 0
    for name in ("demo", "train", "eval", "export", "predict", "tensorboard", "data.sample",
                 "data.download", "data.convert", "data.upload", "bench.convert",
                 "bench.input", "jobs.list", "jobs.status", "jobs.cancel", "jobs.wait",
                 "pricing.refresh"):
        assert name in result.stdout


def test_invoke_data_tasks_run_the_trainer(tmp_path):
    assert invoke("data.sample", f"--output-dir={tmp_path / 'pets'}", "--num-images=6",
                  "--bad-inputs").returncode == 0
    result = invoke("data.convert", f"--data-dir={tmp_path / 'pets'}",
                    f"--output-dir={tmp_path / 'records'}", "--num-shards=2")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "skipped 7" in result.stdout
    assert sorted(p.name for p in (tmp_path / "records").glob("*.record-*")) == [
        f"{split}.record-0000{k}-of-00002" for split in ("test", "train", "val")
        for k in (0, 1)]  # the sample's test list is the held-out test split


@pytest.mark.parametrize("flags,message", [
    (["--format=tfds"], "error: --format must be one of pets, voc, coco, yolo, labelme, cvat, "
                        "labelstudio, got 'tfds'"),
    (["--max-pixels=0"], "error: --max-pixels must be at least 1, got 0"),  # the trainer's
])
def test_a_trainer_usage_error_reaches_invoke_as_its_one_line_and_exit_2(flags, message,
                                                                         tmp_path):
    result = invoke("data.convert", f"--data-dir={tmp_path}",
                    f"--output-dir={tmp_path / 'records'}", *flags)
    assert result.returncode == 2
    assert (result.stderr.splitlines(), result.stdout) == ([message], "")  # said once


def test_a_tool_refused_for_its_input_says_why_in_its_error():
    from launch.errors import InputError
    from launch.features.workflow import run_job

    with pytest.raises(InputError, match=r"^/nonexistent/annotations/trainval\.txt not found"):
        run_job(jobs.tool_job(ConvertArgs("/nonexistent", "/tmp/never")))


def test_invoke_reports_unknown_targets_clearly():
    result = invoke("train", "--target=mars")
    assert result.returncode == 2
    assert result.stderr == "error: --target must be one of local, vertex, got 'mars'\n"


def test_run_ids_are_checked_once_before_they_become_labels_or_paths():
    from launch.context.places import RunIdError, RunPaths, check_run_id

    for good in ("gpu1", "a", "r_2-b", "0" * 63):
        assert check_run_id(good) == good == RunPaths("b", good).run_id
    for bad in ("", "Gpu1", "-x", "_x", "a" * 64, "../x", "a/b", "r$(touch x)", "a b", "é",
                "x\n", "r;rm -rf ~"):
        with pytest.raises(RunIdError, match="is not a run id"):
            RunPaths("b", bad)


def hostile_tensorboard(tmp_path, *flags: str) -> tuple[subprocess.CompletedProcess, object]:
    """`invoke tensorboard` with a flag carrying a command substitution; the port is taken so
    that a TensorBoard that does start exits at once."""
    import os
    import socket

    marker = tmp_path / "ran"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = [a.replace("MARKER", str(marker)) for a in flags]
        result = subprocess.run(
            [sys.executable, "-m", "invoke", "tensorboard", f"--port={port}", *args],
            cwd=REPO, text=True, capture_output=True, timeout=HANG,
            env={**os.environ, "PETS_PROJECT": "p", "PETS_BUCKET": "pets-data"})
    return result, marker


def test_tensorboard_flags_never_reach_a_shell(tmp_path):
    result, marker = hostile_tensorboard(tmp_path, "--run-id=r$(touch MARKER)")
    assert result.returncode == 2 and "is not a run id" in result.stderr
    assert "Traceback" not in result.stderr
    result, marker = hostile_tensorboard(tmp_path, f"--logdir={tmp_path}/x$(touch MARKER)")
    assert result.returncode != 0  # the port is taken: TensorBoard itself gave up
    assert not marker.exists()


def test_the_task_guard_turns_user_errors_into_one_line_and_lets_bugs_through():
    """What the user can fix exits 2 (1 for a failed step) with one line; a bug, even a
    built-in ValueError or FileNotFoundError, keeps its traceback."""
    from invoke import Exit

    import tasks
    from launch.errors import MissingError, StepFailed
    from launch.targets.vertex.hardware import HardwareError

    def fails(error: Exception):
        def action():
            raise error
        return action

    for error, code in ((HardwareError("an n1 machine takes T4 in counts 1, 2, 4"), 2),
                        (MissingError("no checkpoint yet"), 2),
                        (StepFailed("train failed with exit status 1"), 1)):
        with pytest.raises(Exit) as exit_info:
            tasks._guarded(fails(error))
        assert exit_info.value.code == code and exit_info.value.message == f"error: {error}"
    for bug in (ValueError("int() of 'abc'"), FileNotFoundError("/tmp/x"), KeyError("k")):
        with pytest.raises(type(bug)):
            tasks._guarded(fails(bug))
