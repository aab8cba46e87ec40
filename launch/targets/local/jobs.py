"""The local target's jobs table, so a job started here has a life after the command that
started it: every job `run_job` runs (and every `--detach` run, launch/targets/local/
background.py) is one small JSON file in work/jobs/, beside its log, and `invoke jobs.list|
status|logs|cancel|wait --target local` read them (`LocalJobs`, the target's `base.Jobs`).

A record holds the job's id, name, command (an argument list, never a shell string), each
replica's own variables, its log, when it started, its process group with the group leader's
start time, and at the end its exit status or its cancellation. Its state is read, not kept:
CANCELLED once cancelled, SUCCEEDED or FAILED once its exit status is recorded, otherwise
RUNNING while its process group lives (its leader known by pid and start time, so a reused
pid is not taken for it) and FAILED once the group is gone without a word (kill -9, a machine
that went down). An id names a file only after it matches `JOB_ID`."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import datetime
import json
import os
import re
import secrets
import shlex
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from launch.errors import InputError, MissingError, StepFailed
from launch.targets import triage
from launch.targets.base import JobLine
from launch.text import say
from trainer.common.locks import taking_turns

JOBS_DIR = "work/jobs"  # the table, below the current directory as the local runs (work/)
JOBS_DIR_VARIABLE = "PETS_JOBS_DIR"  # moves it (as PETS_CACHE_DIR moves the mirrors)
JOB_ID = re.compile(r"local-\d{8}-\d{6}-[0-9a-f]{6}")  # local-20261202-143005-3fa2c1
SHAPE = "local-YYYYMMDD-HHMMSS-XXXXXX"
LOCK = ".table.lock"  # writers of a record take turns on it
MAX_RECORD_BYTES = 1 << 20
NEWEST = 20  # jobs.list's rows, as Vertex AI's
START_SECONDS = 60.0  # a job with no process group this long after its record never started
GRACE_SECONDS = 10.0  # jobs.cancel: SIGTERM, then SIGKILL if the group still runs after this
ACTIVE = ("PENDING", "RUNNING")
PROC = Path("/proc")


def checked_id(job: str) -> str:
    """`job` if it is a local job's id; else one line naming --job and the fix. Nothing
    else names a file of the table."""
    if not JOB_ID.fullmatch(job):
        raise InputError(f"--job {job[:80]!r} is not a local job id ({SHAPE}): use one "
                         "`invoke jobs.list --target local` shows")
    return job


@dataclasses.dataclass(frozen=True)
class LocalJob:
    """A local job's record (the JSON file's fields)."""

    id: str
    name: str
    argv: tuple[str, ...]  # each replica's command
    replicas: tuple[Mapping[str, str], ...]  # each replica's own variables (CLUSTER_SPEC)
    log: str
    created: float  # seconds since the epoch
    group: int | None = None  # the process group: its leader's pid
    leader: str | None = None  # when the leader started (`Process.started`)
    exit_code: int | None = None  # a negative one: the signal that ended it
    cancelled: bool = False

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1) + "\n"

    @classmethod
    def from_mapping(cls, data: Any) -> LocalJob:
        """A record as read from its file (anything: it may have been edited or cut short);
        ValueError saying what is wrong."""
        kinds: dict[str, tuple[type, ...]] = {
            "id": (str,), "name": (str,), "argv": (list,), "replicas": (list,), "log": (str,),
            "created": (int, float), "group": (int, type(None)), "leader": (str, type(None)),
            "exit_code": (int, type(None)), "cancelled": (bool,)}
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        for name, kind in kinds.items():
            value = data.get(name)
            if not isinstance(value, kind) or (isinstance(value, bool) and bool not in kind):
                raise ValueError(f"{name} is {value!r}"[:120])
        if not JOB_ID.fullmatch(data["id"]) or not all(isinstance(a, str) for a in data["argv"]):
            raise ValueError("its id or its command is not one a job has")
        if not all(isinstance(r, dict) and all(isinstance(v, str) for v in r.values())
                   for r in data["replicas"]):
            raise ValueError("its replicas' variables are not texts")
        if data["group"] is not None and data["group"] < 2:  # 0, -1 or 1: not one job's
            raise ValueError(f"its process group is {data['group']}")
        return cls(**{**{name: data[name] for name in kinds}, "argv": tuple(data["argv"]),
                      "replicas": tuple(data["replicas"])})


@dataclasses.dataclass(frozen=True)
class Process:
    """One process of this machine, as much as liveness needs."""

    pid: int
    group: int
    started: str  # when it started, as the system counts (compared, never read)
    zombie: bool  # ended, not yet reaped by its parent: not running


def processes(pid: int | None = None) -> list[Process]:
    """This machine's processes (`pid`'s alone, if given): Linux's /proc, else `ps`."""
    if PROC.is_dir():
        folders = [PROC / str(pid)] if pid else [p for p in PROC.iterdir() if p.name.isdigit()]
        return [found for folder in folders if (found := _proc(folder))]
    asked = ["-p", str(pid)] if pid else ["-A"]
    shown = subprocess.run(["ps", *asked, "-o", "pid=,pgid=,stat=,lstart="],
                           capture_output=True, text=True, check=False).stdout
    rows = [line.split(None, 3) for line in shown.splitlines()]
    return [Process(int(row[0]), int(row[1]), row[3].strip(), row[2].startswith("Z"))
            for row in rows if len(row) == 4]


def _proc(folder: Path) -> Process | None:
    try:
        fields = (folder / "stat").read_text().rpartition(")")[2].split()
    except OSError:  # it ended meanwhile
        return None
    return Process(int(folder.name), int(fields[2]), fields[19], fields[0] == "Z")


def running(job: LocalJob) -> bool:
    """Whether the job's process group still runs: it has a member that is not a zombie,
    and the process with its id (the leader), if any, is the one recorded."""
    if job.group is None:
        return False
    try:
        os.killpg(job.group, 0)
    except (ProcessLookupError, PermissionError):
        return False
    leader = next(iter(processes(job.group)), None)
    if leader and job.leader and leader.started != job.leader:
        return False  # the pid is another process's now
    if leader and leader.group == job.group and not leader.zombie:
        return True
    return any(p.group == job.group and not p.zombie for p in processes())  # it left members


def state(job: LocalJob, alive: Callable[[LocalJob], bool] = running) -> str:
    """What becomes of a job, from its record (and its processes, while they may run)."""
    if job.cancelled:
        return "CANCELLED"
    if job.exit_code is not None:
        return "SUCCEEDED" if job.exit_code == 0 else "FAILED"
    if job.group is None:
        return "PENDING" if time.time() - job.created < START_SECONDS else "FAILED"
    return "RUNNING" if alive(job) else "FAILED"


def detail(job: LocalJob, found: str) -> str:
    """The DETAIL column of a local job: how it ended, or its process group."""
    if found == "CANCELLED":
        return "cancelled"
    if job.exit_code is not None:
        return f"exit status {job.exit_code}"
    if found == "FAILED":
        return "ended without an exit status (killed?)"
    return f"process group {job.group}" if job.group else "starting"


def line_of(job: LocalJob, found: str, notes: tuple[str, ...] = ()) -> JobLine:
    return JobLine(job.id, found, datetime.datetime.fromtimestamp(job.created, datetime.UTC),
                   job.name, detail(job, found), notes)


def tail(path: Path, lines: int) -> tuple[list[str], int]:
    """The newest `lines` lines of a log, and where it ends (for the lines after them)."""
    if not path.is_file():  # not written yet, or deleted
        return [], 0
    with open(path, "rb") as log:
        newest = collections.deque(log, maxlen=lines)
        return [line.decode(errors="replace").rstrip("\n") for line in newest], log.tell()


def new_lines(path: Path, offset: int, whole: bool = False) -> tuple[list[str], int]:
    """The log's lines after `offset` (complete ones, unless `whole`: the job has ended)."""
    if not path.is_file():
        return [], offset
    with open(path, "rb") as log:
        log.seek(offset)
        text = log.read()
    if not whole:
        text = text[:text.rfind(b"\n") + 1]
    return text.decode(errors="replace").splitlines(), offset + len(text)


@dataclasses.dataclass(frozen=True)
class JobTable:
    """The records in `root` (work/jobs): `ID.json` and `ID.log` for each job."""

    root: Path = dataclasses.field(
        default_factory=lambda: Path(os.environ.get(JOBS_DIR_VARIABLE) or JOBS_DIR))

    def record(self, job: str) -> Path:
        return self.root / f"{checked_id(job)}.json"

    def log(self, job: str) -> Path:
        return self.root / f"{checked_id(job)}.log"

    def create(self, name: str, argv: Sequence[str],
               replicas: Sequence[Mapping[str, str]]) -> LocalJob:
        """A new job's record, before its processes start, and its empty log."""
        self.root.mkdir(parents=True, exist_ok=True)
        while True:
            now = time.time()
            stamp = datetime.datetime.fromtimestamp(now, datetime.UTC).strftime("%Y%m%d-%H%M%S")
            job_id = f"local-{stamp}-{secrets.token_hex(3)}"
            job = LocalJob(job_id, name, tuple(argv), tuple(dict(r) for r in replicas),
                           str(self.log(job_id).resolve()), now)
            try:
                with open(self.record(job_id), "x") as file:
                    file.write(job.to_json())
            except FileExistsError:
                continue
            self.log(job_id).touch()
            return job

    def read(self, job: str) -> LocalJob:
        path = self.record(job)
        try:
            if path.stat().st_size > MAX_RECORD_BYTES:
                raise ValueError(f"over {MAX_RECORD_BYTES} bytes")
            found = LocalJob.from_mapping(json.loads(path.read_text()))
            if found.id != job:
                raise ValueError(f"it names {found.id}")
            return found
        except FileNotFoundError:
            raise MissingError(f"--job {job}: no local job has this id (in {self.root}); "
                               "`invoke jobs.list --target local` lists them") from None
        except (ValueError, OSError) as error:
            raise InputError(f"{path}: not a local job's record ({error}); delete it") from None

    def update(self, job: str, **changes: Any) -> LocalJob:
        """The record with `changes`, written whole (its writers take turns)."""
        with taking_turns(str(self.root), LOCK):
            changed = dataclasses.replace(self.read(job), **changes)
            written = self.record(job).with_suffix(".json.new")
            written.write_text(changed.to_json())
            os.replace(written, self.record(job))
        return changed

    def started(self, job: str, group: int) -> LocalJob:
        """Its processes run in process group `group`, led by the process of that pid."""
        leader = next(iter(processes(group)), None)
        return self.update(job, group=group, leader=leader and leader.started)

    def newest(self, count: int = NEWEST) -> list[LocalJob | tuple[str, str]]:
        """The newest `count` records, each a job, or its id and what is wrong with it: one
        damaged file is a line, the others are listed."""
        found: list[tuple[float, LocalJob | tuple[str, str]]] = []
        for path in self.root.glob("local-*.json"):
            if not JOB_ID.fullmatch(path.stem):
                continue
            try:
                job = self.read(path.stem)
                found.append((job.created, job))
            except (InputError, MissingError) as error:
                made = datetime.datetime.strptime(path.stem[6:21], "%Y%m%d-%H%M%S")
                found.append((made.replace(tzinfo=datetime.UTC).timestamp(),
                              (path.stem, str(error))))
        return [job for _, job in sorted(found, key=lambda pair: pair[0], reverse=True)][:count]


@dataclasses.dataclass(frozen=True)
class LocalJobs:
    """This machine's jobs (`base.Jobs`): the table's records and their processes."""

    table: JobTable = dataclasses.field(default_factory=JobTable)
    grace_seconds: float = GRACE_SECONDS
    poll_seconds: ClassVar[float] = 1.0

    def holds(self, job: str) -> bool:
        return bool(JOB_ID.fullmatch(job)) and self.table.record(job).is_file()

    def list(self) -> list[JobLine]:
        return [line_of(found, state(found)) if isinstance(found, LocalJob) else
                JobLine(found[0], "UNKNOWN", None, "-", found[1])
                for found in self.table.newest()]

    def status(self, job: str) -> JobLine:
        found = self.table.read(job)
        now = state(found)
        notes = (f"command: {shlex.join(found.argv)}", f"log: {self.table.log(job).resolve()}",
                 *([self._why(found)] if now == "FAILED" else []))
        return line_of(found, now, notes)

    def logs(self, job: str, lines: int, follow: bool, poll: float) -> str:
        self.table.read(job)  # it is a job
        path = self.table.log(job)
        shown, offset = tail(path, lines)
        if not follow:
            return "\n".join(shown) or f"no log lines yet for {job}"
        for line in shown:
            say(line)
        while True:
            found = self.table.read(job)  # its state first: every line before its end shows
            ended = state(found) not in ACTIVE
            more, offset = new_lines(path, offset, whole=ended)
            for line in more:
                say(line)
            if ended:
                return self._ended(found)
            time.sleep(poll)

    def cancel(self, job: str) -> str:
        found = self.table.read(job)
        if (now := state(found)) not in ACTIVE:
            raise InputError(f"--job {job} has ended ({now}): there is nothing to cancel")
        found = self.table.update(job, cancelled=True)
        return f"cancelled {job}: {stop(found, self.grace_seconds)}"

    def wait(self, job: str, poll: float, on_state: Callable[[str], None],
             notify: bool = False) -> str:
        if notify:
            raise InputError("--notify publishes how a Vertex AI job ended to the stack's "
                             "job-events topic; a local job has none: drop --notify")
        last = None
        while True:
            found = self.table.read(job)
            if (now := state(found)) != last:
                on_state(f"{job}: {now}")
                last = now
            if now not in ACTIVE:
                return self._ended(found)
            time.sleep(poll)

    def _ended(self, job: LocalJob) -> str:
        """An ended job: its line if it succeeded; else a failure saying why, as Vertex AI's
        (`jobs.wait` and `jobs.logs --follow` exit 1)."""
        found = line_of(job, state(job))
        if found.state == "SUCCEEDED":
            return found.line()
        why = "stopped by `invoke jobs.cancel` or Ctrl-C" if found.state == "CANCELLED" \
            else self._why(job)
        raise StepFailed(f"{found.line().strip()}: {why}")

    def _why(self, job: LocalJob) -> str:
        """Why a failed job failed, from its log's newest lines (launch/targets/triage.py)."""
        lines, _ = tail(self.table.log(job.id), triage.LINES)
        ended = triage.exit_lines(job.exit_code) if job.exit_code is not None else []
        return triage.classify([*lines, *ended]).text()


def stop(job: LocalJob, grace: float) -> str:
    """SIGTERM to the job's process group, then SIGKILL if it still runs after `grace`
    seconds; each only while the group is the job's (`running`)."""
    deadline = time.monotonic() + grace
    _signal(job, signal.SIGTERM)
    while running(job):
        if time.monotonic() > deadline:
            _signal(job, signal.SIGKILL)
            _gone(job, deadline=time.monotonic() + 5)
            return f"process group {job.group} killed (SIGKILL) {grace:g} s after SIGTERM"
        time.sleep(0.1)
    return f"process group {job.group} stopped (SIGTERM)"


def _signal(job: LocalJob, sent: signal.Signals) -> None:
    if job.group and running(job):
        with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
            os.killpg(job.group, sent)


def _gone(job: LocalJob, deadline: float) -> None:
    while running(job) and time.monotonic() < deadline:
        time.sleep(0.1)
