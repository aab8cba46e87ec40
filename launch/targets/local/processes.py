"""The local executor: runs every replica of a TrainerJob as a `python -m trainer` process.

Multi-replica jobs get the CLUSTER_SPEC that Vertex AI would set, with addresses on
127.0.0.1, so the trainer's own cluster handling (not a local shortcut) is what runs.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence

from launch.errors import InputError, StepFailed
from launch.targets import triage
from launch.targets.local.jobs import JobTable
from launch.text import console as text_console
from launch.text import printable, say
from launch.values import jobs
from launch.values.jobs import TrainerJob
from trainer.cli.main import ERROR_PREFIX, EXIT_USAGE

# numbers of at most 18 digits: int() of a longer one can raise (Python's digit limit)
STEP_LINE = re.compile(r"^\s*train \| step:\s*(\d{1,18})\b")
ORBIT_OUTPUT = re.compile(r"^\s+[{']")  # the loss dictionary orbit prints after each step line
# TensorFlow start-up lines that say nothing actionable on a CPU-only machine.
NOISE = re.compile(r"failed call to cuInit|Could not find cuda drivers")
TQDM_LINE = re.compile(
    r"^(?P<desc>[\w .-]+):\s+\d+%\|.*?\|\s*(?P<n>\d{1,18})/(?P<total>\d{1,18})\b")


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def cluster_specs(job: TrainerJob) -> list[dict]:
    """Vertex AI's CLUSTER_SPEC for each replica, in replica order (pool 0 first)."""
    ports = iter(free_ports(job.num_replicas))
    cluster = {f"workerpool{i}": [f"127.0.0.1:{next(ports)}" for _ in range(pool.replica_count)]
               for i, pool in enumerate(job.pools)}
    return [{"cluster": cluster, "environment": "cloud",
             "task": {"type": f"workerpool{i}", "index": index}}
            for i, pool in enumerate(job.pools) for index in range(pool.replica_count)]


def replica_variables(job: TrainerJob) -> list[dict[str, str]]:
    """Each replica's own variables (the job's, and its CLUSTER_SPEC when there are several),
    over this machine's: what a local job's record keeps."""
    own = {**job.env, "PYTHONUNBUFFERED": "1"}
    if job.num_replicas == 1:
        return [own]
    return [{**own, "CLUSTER_SPEC": json.dumps(spec)} for spec in cluster_specs(job)]


def environments(base: Mapping[str, str], replicas: Sequence[Mapping[str, str]]
                 ) -> list[dict[str, str]]:
    """Each replica's environment: `base` without a cluster of its own, then its variables."""
    clean = {name: value for name, value in base.items()
             if name not in ("TF_CONFIG", "CLUSTER_SPEC")}
    return [{**clean, **own} for own in replicas]


def replica_environments(job: TrainerJob, base: Mapping[str, str]) -> list[dict[str, str]]:
    return environments(base, replica_variables(job))


def labelled(replica: int, line: str) -> str:
    """A replica's output line as the console and the job's log show it."""
    return line if replica == 0 else f"[replica {replica}] {line}"


@dataclasses.dataclass
class LocalExecutor:
    """Runs jobs here. `on_line(replica, line)` sees every output line (for progress bars)."""

    python: str = sys.executable
    on_line: Callable[[int, str], None] = lambda replica, line: say(line)
    cwd: str | None = None
    cancel: threading.Event | None = None  # set from another thread: stop the replicas
    # given: the replicas run in a process group of their own, led by the first, whose id
    # it is told once they run (a local job's record: `jobs.cancel` signals that group)
    started: Callable[[int], None] | None = None

    def command(self, job: TrainerJob) -> list[str]:
        return [self.python, "-m", "trainer", *job.args]

    def run(self, job: TrainerJob) -> int:
        """Runs all replicas to completion; a failing replica (or `cancel`) stops the
        others."""
        return self.run_replicas(self.command(job), replica_environments(job, os.environ))

    def run_replicas(self, argv: Sequence[str], environments: Sequence[Mapping[str, str]]
                     ) -> int:
        """`run`, of the command `argv` in each of `environments` (one a replica)."""
        processes: list[subprocess.Popen] = []
        for env in environments:
            group = {} if self.started is None else {  # not the terminal's: no stdin
                "process_group": processes[0].pid if processes else 0,
                "stdin": subprocess.DEVNULL}
            processes.append(subprocess.Popen(
                list(argv), env=dict(env), cwd=self.cwd, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True, bufsize=1, **group))
        if self.started:
            self.started(processes[0].pid)
        failed = threading.Event()

        def pump(replica: int, process: subprocess.Popen) -> None:
            assert process.stdout is not None
            for line in process.stdout:
                self.on_line(replica, line.rstrip("\n"))
            if process.wait() != 0:
                failed.set()

        threads = [threading.Thread(target=pump, args=(i, p), daemon=True)
                   for i, p in enumerate(processes)]
        for thread in threads:
            thread.start()
        try:
            while any(t.is_alive() for t in threads):
                if failed.wait(timeout=0.5) or (self.cancel and self.cancel.is_set()):
                    for process in processes:
                        if process.poll() is None:
                            process.terminate()
                    break
            for thread in threads:
                thread.join()
        except KeyboardInterrupt:
            for process in processes:
                process.terminate()
            raise
        codes = [p.wait() for p in processes]
        return next((code for code in codes if code != 0), 0)


def progress_printer(total_steps: int | None, console=None) -> tuple[Callable[[int, str], None],
                                                                      Callable[[], None]]:
    """An `on_line` that turns progress output into rich progress bars; returns (on_line, close).

    The chief's `train | step: N` lines are printed (above a training bar, in a terminal,
    when the total is known) and tqdm lines (conversion, downloads) drive a bar each. Other
    lines pass through, prefixed with the replica number for replicas other than the chief.
    """
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    console = console or text_console()
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeRemainingColumn(), console=console)
    bars: dict[str, int] = {}

    def advance(name: str, completed: int, total: int) -> None:
        if not console.is_terminal:  # a log: no bar drawn at its end, one line when done
            if completed >= total and bars.get(name) != total:
                bars[name] = total
                console.print(f"{name}: {completed}/{total}", markup=False, highlight=False)
            return
        if name not in bars:
            progress.start()
            bars[name] = progress.add_task(name, total=total)
        progress.update(bars[name], completed=completed, total=total)

    def on_line(replica: int, line: str) -> None:
        step, bar = STEP_LINE.match(line), TQDM_LINE.match(line)
        if step:
            if replica == 0:  # the step line itself (its loss), above the bar if there is one
                progress.console.print(printable(line), markup=False, highlight=False)
            if replica == 0 and total_steps and console.is_terminal:
                advance("training", int(step.group(1)), total_steps)
        elif bar:
            advance(bar.group("desc"), int(bar.group("n")), int(bar.group("total")))
        elif line.strip() and not ORBIT_OUTPUT.match(line) and not NOISE.search(line):
            progress.console.print(printable(labelled(replica, line)),
                                   markup=False, highlight=False)

    def close() -> None:
        if bars and console.is_terminal:  # stopping one never started prints an empty line
            progress.stop()

    return on_line, close


class LocalTools:
    """The local target's `base.Tools`: each tool a `run_job`, recorded as every job here is."""

    def run(self, job: jobs.TrainerJob, steps: int | None = None) -> None:
        run_job(job, steps)


def run_job(job: jobs.TrainerJob, total_steps: int | None = None,
            executor: LocalExecutor | None = None, table: JobTable | None = None) -> None:
    """Runs a job locally with a progress bar, recorded in the local jobs table (`table`,
    work/jobs: `invoke jobs.* --target local`) with its output in its log. The trainer's
    `error: ...` line is held back and becomes the error raised: InputError for a usage
    mistake (the trainer's exit 2, as invoke's own), so the user sees that one line once;
    StepFailed for any other failure, with that line, or else the cause and fix its output
    shows (launch/targets/triage.py)."""
    table = table or JobTable()
    printer, close = progress_printer(total_steps)
    reasons: list[str] = []
    output: collections.deque[str] = collections.deque(maxlen=triage.LINES)
    executor = executor or LocalExecutor()
    argv, variables = executor.command(job), replica_variables(job)
    record = table.create(job.name, argv, variables)

    with open(record.log, "a", encoding="utf-8", errors="replace", buffering=1) as log:
        def on_line(replica: int, line: str) -> None:
            log.write(labelled(replica, line) + "\n")
            output.append(line)
            if line.startswith(ERROR_PREFIX):
                reasons.append(line.removeprefix(ERROR_PREFIX))
            else:
                printer(replica, line)

        executor = dataclasses.replace(executor, on_line=on_line,
                                       started=lambda group: table.started(record.id, group))
        try:
            code = executor.run_replicas(argv, environments(os.environ, variables))
        except KeyboardInterrupt:  # the replicas are stopped: the user cancelled the job
            table.update(record.id, cancelled=True)
            raise
        finally:
            close()
    if table.update(record.id, exit_code=code).cancelled:
        raise StepFailed(f"{job.name} was cancelled ({record.id}: invoke jobs.cancel)")
    if code == EXIT_USAGE and reasons:
        raise InputError(reasons[-1])
    output.extend(triage.exit_lines(code))
    if code != 0:
        why = reasons[-1] if reasons else triage.classify(output).text()
        raise StepFailed(f"{job.name} failed with exit status {code}: {why}")
