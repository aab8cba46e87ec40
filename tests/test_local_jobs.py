"""Local jobs have a life after the command that started them (issue 55): each job `run_job`
or `--detach` starts is a record in work/jobs, and `invoke jobs.list|status|logs|cancel|wait`
reach it as they reach Vertex AI's, in the same rows. The jobs here run a small Python script
in the trainer's place (it starts in milliseconds, as the trainer's TensorFlow does not); one
test runs the real trainer through `invoke train --detach`, which fails at once without
records. Every job a test starts is killed when it ends, if it still runs."""

from __future__ import annotations

import os
import re
import shlex
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from google.cloud import aiplatform_v1

from launch.context.cloud import Cloud
from launch.errors import InputError, StepFailed
from launch.features.jobs import job_command
from launch.targets.local import background
from launch.targets.local.jobs import (
    JOBS_DIR_VARIABLE,
    JobTable,
    LocalJob,
    LocalJobs,
    processes,
    running,
    state,
)
from launch.targets.local.processes import LocalExecutor, run_job
from launch.targets.vertex import client as vertex_client
from launch.values.jobs import TrainerJob
from tests.cli import invoke, refused

CLOUD = Cloud()  # the local target asks it nothing
ROW = re.compile(r" *(?P<id>\S+)  (?P<state>[A-Z]+) *  (?P<created>\d{4}-\d\d-\d\d \d\d:\d\d)  "
                 r"(?P<name>\S+)  (?P<detail>.+)")
TRAINER = """#!{python}
import os, signal, sys, time
command, *rest = sys.argv[3:]  # python -m trainer COMMAND ...
print("started", os.getpid(), flush=True)
if command == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if command == "exit":
    print("pets-trainer: error: the toy trainer fails" if rest[0] != "0" else "done",
          flush=True)
    sys.exit(int(rest[0]))
for tick in range(600):  # at most a minute, whatever happens to the test
    print("tick", tick, flush=True)
    time.sleep(0.1)
"""


@pytest.fixture
def here(tmp_path, monkeypatch) -> Path:
    """A researcher's directory (the table is its work/jobs); any job still running at the
    end is killed."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(JOBS_DIR_VARIABLE)  # the table's default place (the tests': conftest)
    yield tmp_path
    for found in JobTable().newest(1000):
        if isinstance(found, LocalJob) and running(found):
            os.killpg(found.group, signal.SIGKILL)


@pytest.fixture
def trainer(tmp_path) -> LocalExecutor:
    """An executor whose `python -m trainer COMMAND` is the script above."""
    script = tmp_path / "python"
    script.write_text(TRAINER.format(python=sys.executable))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return LocalExecutor(python=str(script))


def start(executor: LocalExecutor, *command: str) -> LocalJob:
    return background.start(JobTable(), TrainerJob("train-toy", command), executor)


def until(condition: Callable[[], object], seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def log(job: LocalJob) -> str:
    return Path(job.log).read_text()


def gone(pid: int) -> bool:
    """The process ended (a zombie its parent has not reaped has ended too)."""
    return not [p for p in processes(pid) if not p.zombie]


def test_a_background_job_is_listed_shows_its_log_is_waited_for_and_cancelled(
        here, trainer, capsys):
    job = start(trainer, "sleep")
    until(lambda: "tick 3" in log(job))
    (row,) = job_command(CLOUD, "list", target="local").splitlines()
    assert ROW.fullmatch(row).groupdict() == {
        "id": job.id, "state": "RUNNING", "created": ROW.fullmatch(row)["created"],
        "name": "train-toy", "detail": f"process group {job.group}"}
    assert job_command(CLOUD, "status", job.id).splitlines() == [  # the id finds its target
        row, f"command: {shlex.join(job.argv)}", f"log: {job.log}"]
    newest = job_command(CLOUD, "logs", job.id, lines=2).splitlines()
    assert len(newest) == 2 and all(line.startswith("tick ") for line in newest)
    replica = int(log(job).split()[1])  # "started PID"

    waited: list[StepFailed] = []

    def wait() -> None:
        with pytest.raises(StepFailed) as ended:
            job_command(CLOUD, "wait", job.id, poll_seconds=0.05)
        waited.append(ended.value)

    waiting = threading.Thread(target=wait)
    waiting.start()
    until(lambda: f"{job.id}: RUNNING" in capsys.readouterr().out)
    begun = time.monotonic()
    said = job_command(CLOUD, "cancel", job.id)
    assert said == f"cancelled {job.id}: process group {job.group} stopped (SIGTERM)"
    assert time.monotonic() - begun < 10
    assert gone(replica) and not running(job)
    waiting.join(timeout=10)
    assert str(waited[0]).endswith("train-toy  cancelled: stopped by `invoke jobs.cancel` or "
                                   "Ctrl-C")
    (row,) = job_command(CLOUD, "list", target="local").splitlines()
    assert ROW.fullmatch(row)["state"] == "CANCELLED"
    with pytest.raises(InputError, match=rf"^--job {job.id} has ended \(CANCELLED\)"):
        job_command(CLOUD, "cancel", job.id)


def test_a_job_that_ignores_sigterm_is_killed_after_the_grace_period(here, trainer):
    job = start(trainer, "stubborn")
    until(lambda: "tick 1" in log(job))
    said = LocalJobs(grace_seconds=0.5).cancel(job.id)
    assert said == f"cancelled {job.id}: process group {job.group} killed (SIGKILL) 0.5 s " \
                   "after SIGTERM"
    assert gone(int(log(job).split()[1])) and state(JobTable().read(job.id)) == "CANCELLED"


@pytest.mark.parametrize(("code", "ended"), [(0, "SUCCEEDED"), (3, "FAILED")])
def test_a_finished_job_says_how_it_ended_with_its_exit_status(here, trainer, capsys, code,
                                                              ended):
    job = start(trainer, "exit", str(code))
    if code == 0:
        said = job_command(CLOUD, "wait", job.id, poll_seconds=0.05)
    else:
        with pytest.raises(StepFailed) as failed:
            job_command(CLOUD, "wait", job.id, poll_seconds=0.05)
        said, why = str(failed.value).split(": ", 1)
        assert why.startswith("the trainer refused to go on: the toy trainer fails")  # triage
    assert ROW.fullmatch(said)["state"] == ended
    assert ROW.fullmatch(said)["detail"] == f"exit status {code}"
    assert capsys.readouterr().out.splitlines()[-1] == f"{job.id}: {ended}"
    if code == 0:  # --follow: every line, then the job's row
        assert job_command(CLOUD, "logs", job.id, follow=True, poll_seconds=0) == said
        assert capsys.readouterr().out.split()[0] == "started"


def test_a_foreground_run_is_recorded_with_its_log_and_exit_status(here, trainer):
    run_job(TrainerJob("sample", ("exit", "0")), executor=trainer)
    with pytest.raises(StepFailed, match="failed with exit status 3"):
        run_job(TrainerJob("sample", ("exit", "3")), executor=trainer)
    rows = [ROW.fullmatch(row) for row in
            job_command(CLOUD, "list", target="local").splitlines()]
    assert [(row["state"], row["detail"]) for row in rows] == [
        ("FAILED", "exit status 3"), ("SUCCEEDED", "exit status 0")]  # the newest first
    assert job_command(CLOUD, "logs", rows[1]["id"]).splitlines()[1] == "done"


def test_a_job_killed_by_kill_9_is_not_running(here, trainer):
    job = start(trainer, "sleep")
    until(lambda: "tick 1" in log(job))
    os.killpg(job.group, signal.SIGKILL)  # the job's processes, as a machine going down
    until(lambda: state(JobTable().read(job.id)) != "RUNNING", 10)
    row = ROW.fullmatch(job_command(CLOUD, "status", job.id).splitlines()[0])
    assert (row["state"], row["detail"]) == ("FAILED", "ended without an exit status (killed?)")


def test_a_reused_pid_is_not_taken_for_the_job(here):
    """The record keeps its group leader's start time: another process with that pid is
    not the job."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                             start_new_session=True)
    try:
        table = JobTable()
        job = table.started(table.create("train-toy", ["python"], [{}]).id, other.pid)
        assert state(job) == "RUNNING"
        assert state(table.update(job.id, leader="1")) == "FAILED"  # started at another time
    finally:
        other.kill()
        other.wait(timeout=10)


@pytest.mark.parametrize("job", ["../../etc/passwd", "local-20261202-143005-3fa2c1/../x",
                                 "/etc/passwd", "local-20261202-143005-3FA2C1", "x" * 100_000])
def test_a_hostile_job_id_is_refused_in_one_line_before_it_names_a_file(here, job):
    for command in ("status", "logs", "cancel", "wait"):
        line = refused(invoke(f"jobs.{command}", f"--job={job}", "--target=local", cwd=here))
        assert line.startswith("error: --job ") and \
            line.endswith("use one `invoke jobs.list --target local` shows")
        assert len(line) < 200
    line = refused(invoke("jobs.status", f"--job={job}", cwd=here))  # no target holds it
    assert line.startswith("error: --job ") and "`invoke jobs.list --target NAME`" in line
    assert not (here / "work").exists()


def test_a_damaged_record_is_one_row_and_one_refusal(here, trainer):
    run_job(TrainerJob("sample", ("exit", "0")), executor=trainer)
    damaged = here / "work" / "jobs" / "local-20200101-000000-3fa2c1.json"  # older
    damaged.write_text('{"id": "local-20200101-000000-3fa2c1", "argv": "rm -rf /"')
    rows = job_command(CLOUD, "list", target="local").splitlines()
    assert "SUCCEEDED" in rows[0] and rows[1].startswith(
        "local-20200101-000000-3fa2c1  UNKNOWN     -  -  ")
    with pytest.raises(InputError, match=r"not a local job's record \(.*\); delete it$"):
        job_command(CLOUD, "status", damaged.stem)


def test_invoke_train_detach_runs_the_trainer_in_the_background(here):
    """The whole way, in this process: flags, job file, the local target, the real trainer
    (which refuses at once: there are no records), then jobs.* as a researcher types them."""
    (here / "work" / "records").mkdir(parents=True)
    dry = invoke("train", "--detach", "--dry-run", cwd=here)
    assert dry.returncode == 0 and "runs here in the background: " in dry.stderr
    assert refused(invoke("train", "--target=vertex", "--detach", "--dry-run", cwd=here)) == \
        "error: --detach: the vertex target cannot run a job in this machine's background: " \
        "add --target local, or drop --detach"
    assert not (here / "work" / "jobs").exists()  # a dry run starts nothing

    ran = invoke("train", "--detach", "--steps=1", cwd=here)
    assert ran.returncode == 0, ran.stderr
    job = re.search(r"runs in the background: local job (local-\S+),", ran.stdout)[1]
    waited = invoke("jobs.wait", f"--job={job}", "--poll=0.1", cwd=here)
    assert waited.returncode == 1 and waited.stdout.splitlines()[-1] == f"{job}: FAILED"
    assert "train-pets_retinanet_mobilenet  exit status 2: " in waited.stderr
    assert "no files match --train-input" in waited.stderr
    listed = invoke("jobs.list", "--target=local", cwd=here).stdout.splitlines()
    assert [ROW.fullmatch(row)["id"] for row in listed] == [job]
    assert "--model_dir=work/model" in invoke("jobs.status", f"--job={job}", cwd=here).stdout


def test_both_targets_list_their_jobs_in_the_same_rows(here, trainer, services):
    """Vertex AI's row is what it was (`client.describe`, then the cost so far)."""
    cloud = services.cloud()
    where = cloud.fields(("project", "region"))
    vertex_client.submit(services.vertex.client(), where["project"], where["region"],
                         aiplatform_v1.CustomJob(display_name="train-toy"))
    run_job(TrainerJob("train-toy", ("exit", "0")), executor=trainer)
    (vertex,) = job_command(cloud, "list").splitlines()
    assert vertex == f"{'1':>20}  {'QUEUED':<10}  2026-11-22 00:00  train-toy  0.00 USD so far"
    (local,) = job_command(cloud, "list", target="local").splitlines()
    shapes = [ROW.fullmatch(row) for row in (vertex, local)]
    assert [(row["name"], row["detail"]) for row in shapes] == [
        ("train-toy", "0.00 USD so far"), ("train-toy", "exit status 0")]
    (status,) = job_command(cloud, "status", "1").splitlines()  # a number: Vertex AI's
    assert ROW.fullmatch(status)["id"] == "1"  # (the fake's job has moved on: PENDING)
    with pytest.raises(InputError, match="a local job has none: drop --notify"):
        job_command(cloud, "wait", ROW.fullmatch(local)["id"], notify=True)
