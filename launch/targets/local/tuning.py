"""A sweep on this machine: an Optuna study whose trials are local training runs.

The sweep directory (`--model-dir`) holds everything: `sweep.json` (what it sweeps),
`study.journal` (Optuna's study, appended as trials start and end) and one run directory a
trial (`trial-000/`, ...), laid out like any run, so `invoke runs.compare` reads them. Each
trial is the training job `invoke train` runs, given its values as `--hparam ID=VALUE`, and
it reports its metric as on Vertex AI (the cloudml-hypertune file, here in its directory).

Running the same command again resumes: finished trials stay, a trial that was running when
the sweep stopped trains on from its own checkpoints with the same values, and the sweep
goes on until it has `trials` results. Raising `trials` extends a finished sweep.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import itertools
import json
import math
import threading
from collections.abc import Callable
from pathlib import Path

from launch.errors import InputError, StepFailed
from launch.targets import triage
from launch.targets.local.processes import STEP_LINE, LocalExecutor
from launch.values.jobs import Request, TrainerDirs, TrainerJob
from launch.values.sweep import Sweep
from trainer.common import jsonnum, locks
from trainer.common.errors import DirectoryBusy
from trainer.common.files import HYPERTUNE_METRIC_FILE
from trainer.model import hparams

SWEEP_FILE, STUDY_FILE, LOCK_FILE = "sweep.json", "study.journal", ".sweep.lock"
MAX_SWEEP_BYTES = 1 << 20  # a sweep's identity is a few hundred bytes
LOG_FILE = "trainer.log"


class SweepBusy(InputError):
    """Another process is running this sweep."""


def grid(sweep: Sweep) -> dict[str, list]:
    """Every value of each parameter (a grid has lists and integer ranges only)."""
    return {p.name: list(p.values) if p.values else list(range(int(p.low), int(p.high) + 1))
            for p in sweep.params}


def wanted_trials(sweep: Sweep) -> int:
    """`trials`, but no more than a grid has points (each is tried once)."""
    if sweep.algorithm != "grid":
        return sweep.trials
    return min(sweep.trials, math.prod(len(values) for values in grid(sweep).values()))


def sampler(sweep: Sweep, seed: int = 0):
    """A grid's points are queued as trials (`open_study`), each once; Optuna's GridSampler
    would stop the study itself, which only `study.optimize` allows."""
    import optuna

    if sweep.algorithm in ("grid", "random"):
        return optuna.samplers.RandomSampler(seed=seed)
    # TPE needs a few random trials to model anything: at most a third of a short sweep
    return optuna.samplers.TPESampler(seed=seed,
                                      n_startup_trials=max(1, min(10, sweep.trials // 3)))


def suggest(trial, sweep: Sweep) -> dict:
    values = {}
    for p in sweep.params:
        if p.values:
            values[p.name] = trial.suggest_categorical(p.name, list(p.values))
        elif p.integer:
            values[p.name] = trial.suggest_int(p.name, int(p.low), int(p.high), log=p.log)
        else:
            values[p.name] = trial.suggest_float(p.name, p.low, p.high, log=p.log)
    return values


def trial_job(request: Request, dirs: TrainerDirs, sweep: Sweep, run_dir: Path, number: int,
              values: dict) -> TrainerJob:
    """`invoke train`'s job in the trial's directory, with the trial's values and the
    environment Vertex AI gives a tuning trial (its id, the metric's tag, the metric file)."""
    flags = [f"{hparams.parameter_id(name)}={value}" for name, value in values.items()]
    trial = dataclasses.replace(request, args=dataclasses.replace(request.args,
                                                                  hparams=tuple(flags)))
    job = trial.trainer_job(TrainerDirs(str(run_dir), dirs.data_dir))
    return dataclasses.replace(job, name=f"trial-{number}", env={
        **job.env, hparams.TRIAL_ENV: str(number), hparams.METRIC_TAG_ENV: sweep.metric,
        hparams.METRIC_FILE_ENV: str(run_dir / HYPERTUNE_METRIC_FILE)})


def identity(sweep: Sweep, request: Request, dirs: TrainerDirs) -> dict:
    """What must not change when a sweep resumes (trials and parallel may)."""
    fixed = {k: v for k, v in sweep.as_mapping().items() if k not in ("trials", "parallel")}
    return {"sweep": fixed, "experiment": request.experiment,
            "steps": request.args.train_steps,
            "data_dir": request.data_dir or dirs.data_dir}


def _claim(root: Path, wanted: dict):
    """Locks the sweep directory for this process and checks it holds this sweep."""
    try:
        lock = locks.hold(root, LOCK_FILE, "sweep directory")
    except DirectoryBusy as error:
        raise SweepBusy(str(error)) from None
    recorded = root / SWEEP_FILE
    if recorded.exists():
        try:
            found = jsonnum.read_file(recorded, MAX_SWEEP_BYTES)
        except jsonnum.JsonError:
            found = None
        if found != wanted:
            lock.close()
            raise InputError(f"{root} holds a different sweep (see {recorded}); run the same "
                             "sweep to resume it (only trials and parallel may change), or "
                             "choose another --model-dir")
    else:
        recorded.write_text(json.dumps(wanted, indent=2, sort_keys=True) + "\n")
    return lock


def open_study(root: Path, sweep: Sweep):
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = JournalStorage(JournalFileBackend(str(root / STUDY_FILE)))
    study = optuna.create_study(study_name="sweep", storage=storage, load_if_exists=True,
                                sampler=sampler(sweep), direction=sweep.goal)
    if sweep.algorithm == "grid":
        points = grid(sweep)
        for values in itertools.product(*points.values()):
            study.enqueue_trial(dict(zip(points, values, strict=True)), skip_if_exists=True)
    return study


def requeue_interrupted(study) -> list[int]:
    """Trials left running by a sweep that stopped: closed as interrupted, and their values
    queued again with their directory, so the next trial trains on from their checkpoints."""
    from optuna.trial import TrialState

    requeued = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        study.tell(trial.number, state=TrialState.FAIL)  # without a "failed" reason
        study.enqueue_trial(trial.params, user_attrs={"run_dir": trial.user_attrs["run_dir"]})
        requeued.append(trial.number)
    return requeued


def counted(study) -> int:
    """Trials that have a result: finished, or failed on their own (with a reason; an
    interrupted trial has none and runs again)."""
    from optuna.trial import TrialState

    return sum(1 for t in study.get_trials(deepcopy=False)
               if t.state == TrialState.COMPLETE or
               (t.state == TrialState.FAIL and "failed" in t.user_attrs))


@dataclasses.dataclass
class TrialRunner:
    """Runs one trial's job to the end, its output in its log and its steps on a bar."""

    total_steps: int
    progress: object  # rich Progress
    cancel: threading.Event
    executor: LocalExecutor = dataclasses.field(default_factory=LocalExecutor)  # its python

    def __call__(self, job: TrainerJob, run_dir: Path, metric: str) -> float:
        run_dir.mkdir(parents=True, exist_ok=True)
        bar = self.progress.add_task(job.name, total=self.total_steps)
        with open(run_dir / LOG_FILE, "a") as log:
            def on_line(replica: int, line: str) -> None:
                log.write(f"[{replica}] {line}\n" if replica else f"{line}\n")
                if replica == 0 and (step := STEP_LINE.match(line)):
                    self.progress.update(bar, completed=int(step.group(1)))

            code = dataclasses.replace(self.executor, on_line=on_line, cancel=self.cancel).run(job)
        self.progress.remove_task(bar)
        if self.cancel.is_set():
            raise KeyboardInterrupt
        if code != 0:
            with open(run_dir / LOG_FILE) as log:
                why = triage.classify([*collections.deque(log, maxlen=triage.LINES),
                                       *triage.exit_lines(code)]).line
            raise StepFailed(f"{job.name} failed with exit status {code}: {why} (see "
                             f"{run_dir / LOG_FILE})")
        reported = hparams.read_report(str(run_dir / HYPERTUNE_METRIC_FILE), metric)
        if reported is None or not math.isfinite(reported[0]):
            raise StepFailed(f"{job.name} reported no {metric}: see {run_dir / LOG_FILE}")
        return reported[0]


def run_sweep(sweep: Sweep, request: Request, dirs: TrainerDirs,
              say: Callable[[str], None] = print) -> str:
    """Runs the sweep in `dirs.model_dir` until it has `sweep.trials` results, at most
    `sweep.parallel` trials at a time; returns the trials, best first."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    if "://" in dirs.model_dir:
        raise InputError(f"--model-dir {dirs.model_dir}: a local sweep keeps its study and "
                         "trials in a local directory; sweep in the cloud with --target vertex")
    root = Path(dirs.model_dir)
    lock = _claim(root, identity(sweep, request, dirs))
    try:
        study = open_study(root, sweep)
        if requeued := requeue_interrupted(study):
            say(f"resuming interrupted trials {', '.join(map(str, requeued))} from their "
                "checkpoints")
        progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                            MofNCompleteColumn())
        runner = TrialRunner(request.steps,
                             progress, threading.Event())
        with progress, concurrent.futures.ThreadPoolExecutor(sweep.parallel) as pool:
            try:
                _run_trials(study, sweep, request, dirs, runner, pool, progress.console.print)
            except BaseException as error:
                runner.cancel.set()  # the running trials stop; the next run resumes them
                if isinstance(error, KeyboardInterrupt):
                    raise StepFailed(f"interrupted: run the same command to resume the sweep "
                                     f"in {root}") from None
                raise
        return summary(study, sweep, root)
    finally:
        lock.close()


def _run_trials(study, sweep: Sweep, request: Request, dirs: TrainerDirs, runner: TrialRunner,
                pool, say: Callable[[str], None]) -> None:
    from optuna.trial import TrialState

    running: dict = {}
    while True:
        while len(running) < sweep.parallel and \
                counted(study) + len(running) < wanted_trials(sweep):
            trial = study.ask()
            values = suggest(trial, sweep)
            run_dir = trial.user_attrs.get("run_dir") or f"trial-{trial.number:03d}"
            trial.set_user_attr("run_dir", run_dir)
            job = trial_job(request, dirs, sweep, Path(dirs.model_dir) / run_dir,
                            trial.number, values)
            say(f"trial {trial.number}: {_values(values)} -> {Path(dirs.model_dir) / run_dir}")
            running[pool.submit(runner, job, Path(dirs.model_dir) / run_dir,
                                sweep.metric)] = trial
        if not running:
            return
        finished, _ = concurrent.futures.wait(running,
                                              return_when=concurrent.futures.FIRST_COMPLETED)
        for future in finished:
            trial = running.pop(future)
            try:
                value = future.result()
            except StepFailed as error:
                trial.set_user_attr("failed", str(error))
                study.tell(trial, state=TrialState.FAIL)
                say(f"trial {trial.number} failed: {error}")
            else:
                study.tell(trial, value)
                say(f"trial {trial.number}: {sweep.metric} {value:.4f} (best so far: trial "
                    f"{study.best_trial.number}, {study.best_value:.4f})")


def _values(values: dict) -> str:
    return "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                     for k, v in values.items())


def summary(study, sweep: Sweep, root: Path) -> str:
    """The trials with a result, best first, and where the best one is."""
    from optuna.trial import TrialState

    done = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
    done.sort(key=lambda t: t.value, reverse=sweep.goal == "maximize")
    failed = counted(study) - len(done)
    lines = [f"{len(done)} trials finished" + (f", {failed} failed" if failed else "") +
             f"; {sweep.metric} {sweep.goal}d"]
    lines += [f"  trial {t.number:>3}  {sweep.metric} {t.value:.4f}  {_values(t.params)}  "
              f"{root / t.user_attrs['run_dir']}" for t in done]
    if not done:
        raise StepFailed("\n".join([*lines, f"no trial finished: see the trainer.log of each "
                                             f"trial in {root}"]))
    lines.append(f"best: trial {done[0].number} in {root / done[0].user_attrs['run_dir']}")
    return "\n".join(lines)
