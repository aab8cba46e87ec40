"""The local target: this machine's processes, its files, an Optuna study for a sweep."""

from __future__ import annotations

import dataclasses
import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

from launch.context.cloud import Cloud, run_paths
from launch.errors import InputError, MissingError, StepFailed
from launch.stores import datachecks
from launch.stores.gcs import datasets, mirror
from launch.stores.runs import configs, jobfiles
from launch.targets.base import Handover, LaunchFlags, say_job, with_recorded
from launch.targets.local import background
from launch.targets.local import tuning as local_tuning
from launch.targets.local.jobs import JobTable, LocalJobs
from launch.targets.local.processes import LocalExecutor, LocalTools, run_job
from launch.targets.preflight import Configs, Placed, Preflight
from launch.values.jobs import Conversion, Request, TrainerDirs, TrainerJob, tool_job
from launch.values.sweep import Sweep
from trainer.common import locks
from trainer.common.errors import DirectoryBusy


def refuse_busy(model_dir: str) -> None:
    """Refuses a model directory another run is training in before this run's job file
    replaces that run's; the trainer's chief then takes the lock itself, for the run."""
    try:
        lock = locks.hold_model_dir(model_dir)
    except DirectoryBusy as error:
        raise InputError(str(error)) from None
    if lock:
        lock.close()


@dataclasses.dataclass(frozen=True)
class Local(Preflight[TrainerDirs, TrainerJob]):
    """This machine: one `python -m trainer` process a replica, with a progress bar; a
    multi-replica job gets the cluster spec Vertex AI would give it, on 127.0.0.1. A sweep is
    an Optuna study in the sweep directory (--model-dir): its trials are runs beside it."""

    title: ClassVar[str] = "this machine"
    # its runs are model directories (runs.list --root); predict runs the model here
    runs_in_bucket: ClassVar[bool] = False
    dirs: TrainerDirs
    cloud: Cloud  # only for `--run-id`, which names a run in the bucket
    force: bool = False
    handover: Handover = dataclasses.field(default_factory=Handover)
    detach: bool = False  # --detach: run in the background (background.py), recorded

    @classmethod
    def from_flags(cls, flags: LaunchFlags) -> Local:
        return cls(flags.dirs, flags.cloud, flags.force, flags.handover,
                   bool(flags.job and flags.job.target_options.detach))

    @classmethod
    def jobs(cls, cloud: Cloud) -> LocalJobs:
        return LocalJobs()

    @classmethod
    def tools(cls, cloud: Cloud) -> LocalTools:
        """The trainer's tools (export, predict, the demo's steps) run here."""
        return LocalTools()

    def place(self, request: Request, run_id: str | None, config: Configs,
              sweep: Sweep | None) -> Placed[TrainerDirs]:
        # the run's own data: an evaluation's, and a training's that continues a run here
        if (request.reads_run_data or request.of_run) and not request.data_dir:
            request = with_recorded(self.cloud, request,
                                     jobfiles.local_run_data(self.dirs.model_dir))
        data_dir = request.data_dir or self.dirs.data_dir
        return Placed(request, self.dirs, data_dir,
                      {"data_dir": data_dir, "model_dir": self.dirs.model_dir}, config,
                      run_id, sweep)

    def plan(self, placed: Placed[TrainerDirs]) -> TrainerJob:
        return placed.request.trainer_job(self.dirs)

    def check(self, placed: Placed[TrainerDirs], plan: TrainerJob) -> None:
        """The data is there; a training run's passes its checks (a sweep's: when it runs)."""
        if not mirror.is_gcs(placed.data_dir) and not Path(placed.data_dir).is_dir():
            raise MissingError(f"--data-dir {placed.data_dir}: no such directory; convert "
                               "data first (`invoke data.convert`)")
        if placed.request.trains and not placed.sweep:
            datachecks.check_local(placed.data_dir, self.force, placed.request.experiment)

    def say_dry_run(self, placed: Placed[TrainerDirs], plan: TrainerJob, text: str) -> None:
        where = (f"sweep directory {self.dirs.model_dir}" if placed.sweep else
                 f"model directory {self.dirs.model_dir}, data {placed.data_dir}")
        say_job(text, f"runs here{' in the background' if self.detach else ''}: {where}")

    def refuse(self, placed: Placed[TrainerDirs], plan: TrainerJob) -> None:
        if placed.sweep:
            datachecks.check_local(placed.data_dir, self.force, placed.request.experiment)
        elif placed.request.trains:
            refuse_busy(self.dirs.model_dir)

    def show(self, placed: Placed[TrainerDirs], plan: TrainerJob) -> str:
        if placed.sweep:
            return json.dumps(placed.sweep.as_mapping(), indent=2)
        return shlex.join(LocalExecutor().command(plan))

    def keep(self, placed: Placed[TrainerDirs], plan: TrainerJob) -> None:
        kept = configs.keep_local(self.cloud, self.dirs.model_dir, placed.configs.files,
                                  placed.configs.texts)
        jobfiles.store_local(self.dirs.model_dir, placed.text(config_file=kept))

    def run(self, placed: Placed[TrainerDirs], plan: TrainerJob) -> str:
        """The job (or the sweep) here, its named dataset's version pinned while it runs."""
        request, sweep = placed.request, placed.sweep
        pin = datasets.pin(self.cloud, request, Path(self.dirs.model_dir).name or "local",
                           "tune" if sweep else plan.name, datasets.LOCAL_PIN_HOURS)
        if self.detach:  # it outlives this command: its pin lasts until it expires
            job = background.start(JobTable(), plan)
            return (f"{plan.name} runs in the background: local job {job.id}, its log "
                    f"{job.log}\n(`invoke jobs.logs --job {job.id} --follow`, `invoke "
                    f"jobs.cancel --job {job.id}`)")
        try:
            if sweep:
                return local_tuning.run_sweep(sweep, request, self.dirs)
            run_job(plan, request.steps if request.trains else None)  # for the progress bar
        finally:
            datasets.unpin(self.cloud, pin)
        return f"{plan.name} done: {self.dirs.model_dir}"

    def convert(self, conversion: Conversion) -> str:
        """The converter here; a named dataset is then uploaded as `data.upload --dataset`
        would (its name checked before the conversion starts)."""
        if conversion.dataset:
            datasets.check(conversion.dataset)
        if mirror.is_gcs(conversion.args.data_dir):
            raise InputError(f"--data-dir {conversion.args.data_dir[:100]}: a local conversion "
                             "reads this machine's files; convert next to the data with "
                             "--target vertex --dataset NAME")
        run_job(tool_job(conversion.args))
        if not conversion.dataset:
            return f"records in {conversion.args.output_dir}"
        return datasets.upload(self.cloud, conversion.args.output_dir, conversion.dataset)

    def tensorboard(self, run_id: str | None, logdir: str | None, port: int) -> str:
        # --run-id: the whole run in the bucket (training, validation and evaluation jobs)
        logdir = logdir or (run_paths(self.cloud, run_id).root if run_id
                            else self.dirs.model_dir)
        print(f"TensorBoard on http://127.0.0.1:{port} for {logdir}", flush=True)
        # An argument list, never a shell string: --logdir and --run-id are user input.
        status = subprocess.call([sys.executable, "-m", "tensorboard.main", "--logdir", logdir,
                                  "--host", "127.0.0.1", "--port", str(port)])
        if status != 0:
            raise StepFailed(f"TensorBoard exited with status {status}")
        return "TensorBoard stopped"
