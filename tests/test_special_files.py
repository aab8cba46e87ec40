"""A FIFO or a device named as a file (a job file, a config file, a label map, a picture) is
refused at once, never waited on."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal

import pytest

from launch.context.cloud import Cloud
from launch.errors import InputError
from launch.stores.runs import configs, jobfiles
from launch.targets.base import Handover
from launch.targets.local.executor import Local
from launch.values import jobfile
from launch.values.jobs import Request, TrainerDirs
from launch.values.resources import Resources
from launch.values.sweep import load
from tests.fakes.cloud import write_records
from trainer.common import jsonnum
from trainer.common.errors import JsonError, LabelMapError, SettingsError
from trainer.common.io import NotRegularFile, read_regular
from trainer.data.changes import ClassChanges
from trainer.data.label_map import read_label_map
from trainer.prediction.predict import read_picture

EXPERIMENT = "pets_retinanet_resnetfpn"


@contextlib.contextmanager
def within(seconds: float):
    """Fails, instead of hanging the suite, a call that waits (a FIFO waits for a writer)."""
    def expired(*_):
        raise TimeoutError(f"still waiting after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_a_fifo_or_a_device_named_as_a_file_is_refused_at_once(tmp_path):
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    with within(10):
        for path in (fifo, "/dev/zero", tmp_path):
            with pytest.raises(NotRegularFile):
                read_regular(path, 100)
        with pytest.raises(jobfile.JobFileError, match=rf"^--job {fifo}: cannot read it "
                                                       r"\(a FIFO, not a regular file\)$"):
            jobfile.read(str(fifo))
        with pytest.raises(InputError, match=rf"^--config-file {fifo}: cannot read it as YAML "
                                             r"\(a FIFO, not a regular file\)$"):
            configs.read_local([str(fifo)])
        with pytest.raises(SettingsError, match=rf"^--classes {fifo}: a FIFO, not a regular "
                                                r"file$"):
            ClassChanges.read(fifo)
        with pytest.raises(InputError, match=rf"^--sweep {fifo}: cannot read it \(a FIFO, "
                                             r"not a regular file\)$"):
            load(str(fifo))
        with pytest.raises(JsonError, match="a FIFO, not a regular file"):
            jsonnum.read_file(fifo, 100)  # --annotations, LabelMe files
        with pytest.raises(InputError, match=r"^--config-file /dev/zero: cannot read it as "
                                             r"YAML \(a device, not a regular file\)$"):
            configs.read_local(["/dev/zero"])
        with pytest.raises(LabelMapError, match=rf"^label map {fifo}: a FIFO, not a regular"):
            read_label_map(fifo)  # --label-map of convert, train and predict
        with pytest.raises(NotRegularFile):
            read_picture(str(fifo))  # predict --images: that image fails, the others go on
        model = tmp_path / "model"
        model.mkdir()
        os.mkfifo(model / "run.json")  # the run a model directory holds
        job = jobfile.resolve("train", {"model_dir": str(model)})
        with pytest.raises(InputError, match=rf"^--model-dir {model}: a FIFO, not a regular "
                                             r"file; choose another --model-dir$"):
            jobfiles.recorded_run(job, str(model), Cloud)


def test_a_fifo_config_file_is_refused_before_a_local_run_starts(tmp_path):
    fifo = tmp_path / "head.yaml"
    os.mkfifo(fifo)
    request = Request.training(EXPERIMENT, 10, Resources(), None)
    request = dataclasses.replace(request, args=dataclasses.replace(
        request.args, config_files=(str(fifo),)))
    records = write_records(tmp_path / "records")
    with within(10), pytest.raises(InputError, match=r"^--config-file .*a FIFO"):
        Local(TrainerDirs(str(tmp_path / "model"), str(records)), Cloud(),
              handover=Handover(dry_run=True)).launch(request)
    assert not (tmp_path / "model").exists()
