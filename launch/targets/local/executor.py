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
from launch.targets.base import Handover, Target, job_text, save_job, say_job, with_recorded
from launch.targets.local import tuning as local_tuning
from launch.targets.local.processes import LocalExecutor, run_job
from launch.values import jobfile
from launch.values.jobs import Conversion, Places, Request, tool_job
from launch.values.sweep import Sweep
from trainer import locks
from trainer.errors import DirectoryBusy
from trainer.experiments import default_train_steps


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
class Local:
    """This machine: one `python -m trainer` process a replica, with a progress bar; a
    multi-replica job gets the cluster spec Vertex AI would give it, on 127.0.0.1."""

    title: ClassVar[str] = "this machine"
    # Not the cloud's: its region, image, machines, accelerators, capacity and schedule.
    supports: ClassVar[frozenset[str]] = frozenset(jobfile.FIELDS) - {
        "region", "image", "machine_type", "accelerator", "tpu", "tpu_topology",
        "reduction_servers", "spot", "flex_start", "max_wait_hours", "reservation",
        "persistent_resource", "web_access", "timeout_hours", "regions", "fallback",
        "capacity", "max_preemptions"}
    places: Places
    cloud: Cloud  # only for `--run-id`, which names a run in the bucket
    force: bool = False
    submission: Handover = dataclasses.field(default_factory=Handover)

    @classmethod
    def from_target(cls, target: Target) -> Local:
        return cls(target.places, target.cloud, target.force, target.handover)

    def launch(self, request: Request) -> str:
        if request.reads_run_data and not request.data_dir:  # the run's own data
            request = with_recorded(self.cloud, request,
                                     jobfiles.local_run_data(self.places.model_dir))
        texts = configs.read_local(request.config_files)  # the trainer reads them again
        data_dir = request.data_dir or self.places.data_dir
        job = request.trainer_job(self.places)
        trains = request.trains
        steps = request.steps or default_train_steps(request.experiment) if trains else None
        text = job_text(request, data_dir=data_dir, model_dir=self.places.model_dir)
        if not mirror.is_gcs(data_dir) and not Path(data_dir).is_dir():
            raise MissingError(f"--data-dir {data_dir}: no such directory; convert data first "
                               "(`invoke data.convert`)")
        if trains:
            datachecks.check_local(data_dir, self.force, request.experiment)
        save_job(text, self.submission.save_job)
        if self.submission.dry_run:
            say_job(text, f"runs here: model directory {self.places.model_dir}, data "
                           f"{data_dir}")
            return shlex.join(LocalExecutor().command(job))
        if trains:
            refuse_busy(self.places.model_dir)
        if trains and text:  # the stored job names the run's copies of its config files
            kept = configs.keep_local(self.cloud, self.places.model_dir, request.config_files,
                                      texts)
            jobfiles.store_local(self.places.model_dir, job_text(
                request, data_dir=data_dir, model_dir=self.places.model_dir, config_file=kept))
        pin = datasets.pin(self.cloud, request, Path(self.places.model_dir).name or "local",
                           job.name, datasets.LOCAL_PIN_HOURS)
        try:
            run_job(job, steps)  # the total steps, for the progress bar
        finally:
            datasets.unpin(self.cloud, pin)
        return f"{job.name} done: {self.places.model_dir}"

    def tune(self, request: Request, sweep: Sweep) -> str:
        """An Optuna study in the sweep directory (--model-dir): trials are runs beside it."""
        configs.read_local(request.config_files)  # checked now, not in a trial
        text = job_text(request, data_dir=request.data_dir or self.places.data_dir,
                         model_dir=self.places.model_dir)
        save_job(text, self.submission.save_job)
        if self.submission.dry_run:
            say_job(text, f"runs here: sweep directory {self.places.model_dir}")
            return json.dumps(sweep.as_mapping(), indent=2)
        datachecks.check_local(request.data_dir or self.places.data_dir, self.force,
                               request.experiment)
        pin = datasets.pin(self.cloud, request, Path(self.places.model_dir).name or "local",
                           "tune", datasets.LOCAL_PIN_HOURS)
        try:
            return local_tuning.run_sweep(sweep, request, self.places)
        finally:
            datasets.unpin(self.cloud, pin)

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
                            else self.places.model_dir)
        print(f"TensorBoard on http://127.0.0.1:{port} for {logdir}", flush=True)
        # An argument list, never a shell string: --logdir and --run-id are user input.
        status = subprocess.call([sys.executable, "-m", "tensorboard.main", "--logdir", logdir,
                                  "--host", "127.0.0.1", "--port", str(port)])
        if status != 0:
            raise StepFailed(f"TensorBoard exited with status {status}")
        return "TensorBoard stopped"

    # data.convert's flags besides the converter's and the cloud's: no Vertex AI job's
    convert_flags: ClassVar[frozenset[str]] = frozenset({"dataset", "dry_run"})
    # its runs are model directories (runs.list --root); predict runs the model here
    runs_in_bucket: ClassVar[bool] = False


