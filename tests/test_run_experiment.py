"""A model directory keeps the experiment of the run it holds: a train or eval of another
experiment on it is refused and leaves it as it was, one without --experiment uses the run's,
and a Vertex AI run id of another experiment is refused before anything is sent."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest
from invoke import Context, Exit

from launch.values import jobfile
from tests.fakes.cloud import write_records
from trainer.common.errors import JsonError
from trainer.model import model_dir as model_dir_lib

MASK = "pets_maskrcnn_mobilenet"


def mask_run(root: Path, records: Path) -> Path:
    """A model directory as a Mask R-CNN run leaves it (what the launcher and trainer read)."""
    model_dir = root / "model"
    model_dir.mkdir()
    (model_dir / "run.json").write_text(json.dumps({"experiment": MASK}) + "\n")
    (model_dir / "params.yaml").write_text("trainer: {train_steps: 10}\n")
    (model_dir / "job.yaml").write_text(f"target: local\nexperiment: {MASK}\n"
                                        f"data-dir: {records}\n")
    (model_dir / "checkpoint").write_text('model_checkpoint_path: "ckpt-10"\n')
    (model_dir / "ckpt-10.index").write_bytes(b"index")
    return model_dir


def snapshot(directory: Path) -> dict[str, tuple[bytes, int]]:
    return {str(path): (path.read_bytes(), path.stat().st_mtime_ns)
            for path in sorted(directory.rglob("*")) if path.is_file()}


def run_task(name: str, **flags) -> None:
    """`invoke NAME --flags`, in this process."""
    import tasks

    body = getattr(tasks, name)
    defaults = {p.name: None if p.default is inspect.Parameter.empty else p.default
                for p in list(inspect.signature(body).parameters.values())[1:]}
    body(Context(), **{**defaults, **flags})


@pytest.mark.parametrize("task", ["train", "evaluate"])
def test_a_run_of_another_experiment_is_refused_and_left_as_it_is(task, tmp_path):
    records = write_records(tmp_path / "records")
    model_dir = mask_run(tmp_path, records)
    before = snapshot(model_dir)
    for experiment in ("pets_retinanet_mobilenet", "pets_retinanet_resnetfpn"):
        with pytest.raises(Exit) as refused:
            run_task(task, model_dir=str(model_dir), data_dir=str(records),
                     experiment=experiment, force=True)
        assert refused.value.code == 2
        assert refused.value.message == (
            f"error: --experiment {experiment}: {model_dir} holds a run of {MASK} (its "
            "run.json); leave out --experiment to use the run's, or choose another "
            "--model-dir for a new run")
    job = tmp_path / "retinanet.yaml"
    job.write_text(f"experiment: pets_retinanet_mobilenet\nmodel-dir: {model_dir}\n")
    with pytest.raises(Exit, match=rf"--experiment pets_retinanet_mobilenet \(in --job "
                                   rf"{job}\): {model_dir} holds a run of {MASK}"):
        run_task(task, job=str(job), data_dir=str(records), force=True)
    assert snapshot(model_dir) == before


@pytest.mark.parametrize("task", ["train", "evaluate"])
def test_without_experiment_the_run_s_own_is_used(task, tmp_path, capsys):
    records = write_records(tmp_path / "records")
    model_dir = mask_run(tmp_path, records)
    before = snapshot(model_dir)
    run_task(task, model_dir=str(model_dir), data_dir=str(records), force=True, dry_run=True)
    out, err = capsys.readouterr()
    assert f"--experiment={MASK}" in out  # the trainer's command
    assert f"experiment: {MASK}" in err  # the resolved job file
    run_task(task, model_dir=str(model_dir), data_dir=str(records), force=True, dry_run=True,
             experiment=MASK)  # the same one, given: taken
    assert snapshot(model_dir) == before
    import tasks

    # export has no --experiment to differ: it rebuilds the model from run.json alone
    assert "experiment" not in inspect.signature(tasks.export).parameters


def test_a_vertex_run_id_of_another_experiment_is_refused_before_anything_is_sent(
        services):
    services.storage.bucket("pets-data").blob("runs/mask1/checkpoints/run.json") \
        .upload_from_string(json.dumps({"experiment": MASK}))
    cloud = services.cloud()

    def found(job):
        from launch.stores.runs.jobfiles import recorded_run

        return recorded_run(job, "unused", lambda: cloud, in_bucket=True)

    with pytest.raises(jobfile.JobFileError, match=(
            r"^--experiment pets_retinanet_resnetfpn: gs://pets-data/runs/mask1 holds a run "
            rf"of {MASK} \(its run.json\); leave out --experiment to use the run's, or choose "
            r"another --run-id for a new run$")):
        jobfile.resolve("train", {"target": "vertex", "run_id": "mask1",
                                  "experiment": "pets_retinanet_resnetfpn"}, run=found)
    assert jobfile.resolve("eval", {"target": "vertex", "run_id": "mask1"},
                           run=found).experiment == MASK
    assert jobfile.resolve("train", {"target": "vertex", "run_id": "new2"},
                           run=found).experiment == jobfile.DEFAULT_EXPERIMENT
    assert services.vertex.received == [] and services.builds.requests == []


def test_the_trainer_refuses_another_experiment_before_writing(tmp_path, capsys):
    """`python -m trainer` itself (a Vertex AI job whose run the launcher could not read):
    one line, exit 2, before anything is written."""
    from trainer.cli import main as cli
    from trainer.cli.main import ERROR_PREFIX

    records = write_records(tmp_path / "records")
    model_dir = mask_run(tmp_path, records)
    before = snapshot(model_dir)
    for mode in ("train", "eval"):
        assert cli.main(["--experiment=pets_retinanet_mobilenet", f"--mode={mode}",
                         f"--model_dir={model_dir}", f"--data_dir={records}"]) == 2
        assert capsys.readouterr().err == (
            f"{ERROR_PREFIX}--experiment pets_retinanet_mobilenet: {model_dir} holds a run of "
            f"{MASK} "
            f"(its run.json); pass --experiment {MASK}, or choose another --model-dir for a "
            "new run\n")
    assert snapshot(model_dir) == before
    model_dir_lib.check_experiment(str(model_dir), MASK)  # its own: taken
    model_dir_lib.check_experiment(str(tmp_path / "new"), "pets_retinanet_mobilenet")
    with pytest.raises(JsonError):  # a run file that names no experiment is no run's
        (tmp_path / "odd").mkdir()
        (tmp_path / "odd" / "run.json").write_text("[]")
        model_dir_lib.check_experiment(str(tmp_path / "odd"), MASK)
