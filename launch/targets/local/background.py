"""A local job in the background (`invoke train|eval --detach`): `start` records it in the
jobs table and starts this module in a session of its own, `python -m launch.targets.local.
background JOB_ID JOBS_DIR`, so the command that started it may end. Its process group is the
job's: it runs the job's replicas with their output in the job's log, and records their exit
status. A SIGTERM (`invoke jobs.cancel`'s) stops the replicas first."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from launch.targets.local.jobs import JobTable, LocalJob
from launch.targets.local.processes import (
    LocalExecutor,
    environments,
    labelled,
    replica_variables,
)
from launch.values.jobs import TrainerJob


def start(table: JobTable, job: TrainerJob, executor: LocalExecutor | None = None
          ) -> LocalJob:
    """Starts `job` in the background; its record, with its process group."""
    executor = executor or LocalExecutor()
    record = table.create(job.name, executor.command(job), replica_variables(job))
    with open(record.log, "ab") as log:  # the job's own process writes it from now on
        process = subprocess.Popen(
            [sys.executable, "-m", __name__, record.id, str(table.root.resolve())],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            cwd=executor.cwd, start_new_session=True)
    return table.started(record.id, process.pid)


def run(table: JobTable, job_id: str) -> int:
    """The job's replicas, run to their end in this process's group; their exit status,
    recorded."""
    record = table.read(job_id)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    executor = LocalExecutor(cancel=stopping,
                             on_line=lambda replica, line: print(labelled(replica, line),
                                                                 flush=True))
    code = executor.run_replicas(record.argv, environments(os.environ, record.replicas))
    table.update(job_id, exit_code=code)
    return code


if __name__ == "__main__":
    sys.exit(0 if run(JobTable(Path(sys.argv[2])), sys.argv[1]) == 0 else 1)
