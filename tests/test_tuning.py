"""`invoke tune --target vertex` and `invoke tune.status` through the real Vertex AI client
against the fake JobService (tests/fakes/vertex.py): the tuning job as the service receives
it, and trials whose metric is read back from the file the trainer writes."""

from __future__ import annotations

import math
import re

import pytest
from google.cloud import aiplatform_v1

from launch.errors import InputError, StepFailed
from launch.features.tuning import status
from launch.stores.gcs.records import upload_records
from launch.stores.pricing.estimate import OverBudget
from launch.targets.vertex import sweeps
from launch.targets.vertex.executor import Vertex
from launch.targets.vertex.ladder import Ladder
from launch.targets.vertex.resources import Resources
from launch.targets.vertex.submit import VertexHandover
from launch.values.jobs import Request
from launch.values.resources import Accelerator
from launch.values.sweep import Sweep
from tests.fakes.cloud import fake_cloud, write_records
from tests.on_vertex import with_vertex
from trainer.model import hparams

SWEEP = Sweep.from_yaml("""
metric: AP50
trials: 4
parallel: 2
params:
  learning_rate: {low: 1e-4, high: 1e-1, log: true}
  batch_size: [8, 16, 32]
  task.model.head.num_convs: {low: 1, high: 4}
  task.model.backbone.type: [resnet, mobilenet]
""")
HARDWARE = {"gpu": Resources("n1-standard-8", Accelerator("NVIDIA_TESLA_T4", 1)),
            "multi-worker": Resources("n1-standard-8", Accelerator("NVIDIA_TESLA_T4", 2),
                                      workers=2),
            "tpu": Resources(tpu="v5litepod-8")}


@pytest.fixture
def fakes(tmp_path):
    with fake_cloud(tmp_path) as services:
        services.vertex.tuning.metric_dir = tmp_path / "hypertune"
        yield services


def request(resources: Resources, run_id: str = "sweep1") -> Request:
    return with_vertex(Request.training("pets_retinanet_resnetfpn", 500, run_id=run_id), resources)


def without_model_dir(spec: aiplatform_v1.CustomJobSpec) -> aiplatform_v1.CustomJobSpec:
    spec = aiplatform_v1.CustomJobSpec(spec)
    for pool in spec.worker_pool_specs:
        args = [a for a in pool.container_spec.args if not a.startswith("--model_dir=")]
        pool.container_spec.args = args
    return spec


@pytest.mark.parametrize("hardware", sorted(HARDWARE))
def test_each_trial_runs_the_train_spec_in_its_own_directory(fakes, hardware):
    cloud, dry = fakes.cloud(), VertexHandover(dry_run=True)
    trained = aiplatform_v1.CustomJob.from_json(
        Vertex(cloud, dry).launch(request(HARDWARE[hardware])))
    tuning = aiplatform_v1.HyperparameterTuningJob.from_json(
        Vertex(cloud, dry).tune(request(HARDWARE[hardware]), SWEEP))
    # the spec `invoke train` builds, but the trainer takes Vertex AI's per-trial
    # AIP_CHECKPOINT_DIR (runs/sweep1/<trial id>/checkpoints) instead of the run's
    assert tuning.trial_job_spec == without_model_dir(trained.job_spec)
    assert tuning.trial_job_spec != trained.job_spec
    for pool in tuning.trial_job_spec.worker_pool_specs:
        assert not any(a.startswith("--model_dir") for a in pool.container_spec.args)
    assert tuning.trial_job_spec.base_output_directory.output_uri_prefix == \
        "gs://pets-data/runs/sweep1"
    assert (tuning.max_trial_count, tuning.parallel_trial_count) == (4, 2)
    assert tuning.labels["run"] == "sweep1" and tuning.display_name.startswith("tune-train-")
    assert fakes.vertex.received == [] and fakes.vertex.tuning.received == []


def test_the_study_spec_says_what_the_sweep_says(fakes):
    tuning = aiplatform_v1.HyperparameterTuningJob.from_json(
        Vertex(fakes.cloud(), VertexHandover(dry_run=True)).tune(request(HARDWARE["gpu"]), SWEEP))
    spec = tuning.study_spec
    assert [(m.metric_id, m.goal.name) for m in spec.metrics] == [("AP50", "MAXIMIZE")]
    lr, batch, convs, backbone = spec.parameters
    assert (lr.parameter_id, lr.double_value_spec.min_value, lr.double_value_spec.max_value,
            lr.scale_type.name) == ("learning_rate", 1e-4, 1e-1, "UNIT_LOG_SCALE")
    assert list(batch.discrete_value_spec.values) == [8.0, 16.0, 32.0]
    assert (convs.parameter_id, convs.integer_value_spec.min_value,
            convs.integer_value_spec.max_value) == ("task__model__head__num_convs", 1, 4)
    assert list(backbone.categorical_value_spec.values) == ["resnet", "mobilenet"]
    assert spec.algorithm.name == "ALGORITHM_UNSPECIFIED"  # Vizier's Bayesian default


def test_a_sweep_over_budget_or_on_a_ladder_is_refused_before_any_request(fakes, capsys):
    cloud, budget = fakes.cloud(), VertexHandover(dry_run=True, max_cost=50)
    Vertex(cloud, budget).launch(request(HARDWARE["gpu"]))  # one run fits the budget...
    one = capsys.readouterr().err
    with pytest.raises(OverBudget, match="over --max-cost 50"):  # ...four trials do not
        Vertex(cloud, budget).tune(request(HARDWARE["gpu"]), SWEEP)
    hourly = float(re.search(r" at (\d+\.\d+)/h\)", one)[1])  # one trial's price
    Vertex(cloud, VertexHandover(dry_run=True)).tune(request(HARDWARE["gpu"]), SWEEP)
    # two trials run at a time (parallel: 2); all four are in the bound, 24 h each
    assert f"cost: {2 * hourly:.2f} USD/h (2 trials at a time, each 1 x n1-standard-8 + " \
        f"NVIDIA_TESLA_T4:1 at {hourly:.4f}/h); at most {4 * hourly * 24:.2f} USD (4 trials " \
        "x 24 h timeout)" in capsys.readouterr().err
    with pytest.raises(InputError, match="a sweep tunes training runs"):
        Vertex(cloud).tune(Request.evaluation(None, None, "sweep1"), SWEEP)
    with pytest.raises(InputError,
                       match=r"--capacity, --regions and --fallback \(a ladder\) do not apply"):
        Vertex(cloud, VertexHandover(ladder=Ladder(("SPOT", "STANDARD")))).tune(
            request(HARDWARE["gpu"]), SWEEP)
    assert fakes.vertex.tuning.received == [] and fakes.builds.requests == []


def reported_metric(values: dict, env: dict) -> None:
    """What a trial's trainer does at its end (trainer/training/train.py report_trial): AP50 peaks
    at a learning rate of 0.01."""
    ap50 = 1 - abs(math.log10(values["learning_rate"]) + 2) / 3
    hparams.report({"AP": ap50 / 2, "AP50": ap50}, step=500, env=env)


def test_trials_report_their_metric_and_status_lists_them_best_first(fakes, tmp_path,
                                                                      capsys):
    cloud = fakes.cloud()
    upload_records(cloud, str(write_records(tmp_path / "records")))
    fakes.vertex.tuning.trial_runner = reported_metric
    out = Vertex(cloud).tune(request(HARDWARE["gpu"]), SWEEP)
    (received,) = fakes.vertex.tuning.received
    (pool,) = received.hyperparameter_tuning_job.trial_job_spec.worker_pool_specs
    assert "@sha256:" in pool.container_spec.image_uri  # built, then pinned by digest
    assert "tune.status --job 1" in out

    said: list[str] = []
    table = sweeps.follow(cloud.clients.jobs("us-central1"),
                          next(iter(fakes.vertex.tuning.jobs)), 0, said.append,
                          sleep=lambda seconds: None)
    assert said[0].endswith("JOB_STATE_RUNNING") and said[-1].endswith("JOB_STATE_SUCCEEDED")
    assert [line for line in said if line.startswith("trial 1:")] == [
        "trial 1: ACTIVE", f"trial 1: SUCCEEDED AP50={expected(fakes, '1'):.4f}"]

    job = next(iter(fakes.vertex.tuning.jobs.values()))
    values = [expected(fakes, t.id) for t in job.trials]
    rows = table.splitlines()[1:]
    assert len(rows) == 4
    shown = [float(row.split("AP50")[1].split()[0]) for row in rows]
    assert shown == sorted(shown, reverse=True)
    assert shown == pytest.approx(sorted(values, reverse=True), abs=1e-4)
    assert status(cloud, "1") == table
    assert "SUCCEEDED     4/4 trials  tune-train-" in status(cloud, None)


def expected(fakes, trial_id: str) -> float:
    job = next(iter(fakes.vertex.tuning.jobs.values()))
    (trial,) = [t for t in job.trials if t.id == trial_id]
    rate = next(p.value for p in trial.parameters if p.parameter_id == "learning_rate")
    return 1 - abs(math.log10(rate) + 2) / 3


def test_a_trial_without_its_metric_is_infeasible_and_the_job_still_ends(fakes, tmp_path):
    cloud = fakes.cloud()
    upload_records(cloud, str(write_records(tmp_path / "records")))
    fakes.vertex.tuning.trial_runner = lambda values, env: hparams.report(
        {"AP": 0.5}, step=1, env={**env, "CLOUD_ML_HP_METRIC_TAG": "AP"})  # the wrong one
    Vertex(cloud).tune(request(HARDWARE["gpu"]), SWEEP)
    with pytest.raises(StepFailed) as failed:
        sweeps.follow(cloud.clients.jobs("us-central1"), next(iter(fakes.vertex.tuning.jobs)),
                      0, lambda line: None, sleep=lambda seconds: None)
    assert "INFEASIBLE" in str(failed.value) and "all trials failed" in str(failed.value)


@pytest.mark.slow
def test_a_local_sweep_resumes_after_ctrl_c_and_ends_with_its_best_trial(swept):
    """Three two-step trials; Ctrl-C while the second runs; the same command finishes the
    sweep (the interrupted trial again, in its own directory, with its values)."""
    sweep_dir, first, second = swept
    assert first.returncode == 1, first.out[-3000:]
    assert "interrupted: run the same command to resume the sweep" in first.out
    assert "trial 0: AP50 " in first.out

    assert second.returncode == 0, second.out[-3000:]
    assert "resuming interrupted trials 1 from their checkpoints" in second.out
    assert "trial 0: " not in second.out  # a finished trial is not run again
    assert "3 trials finished; AP50 maximized" in second.out

    runs = sorted(p.name for p in sweep_dir.glob("trial-*"))
    assert runs == ["trial-000", "trial-001", "trial-003"]  # trial 2 re-ran trial 1's
    assert (sweep_dir / "trial-000" / "trainer.log").read_text().count(
        "training finished") == 1
    assert (sweep_dir / "trial-001" / "trainer.log").read_text().count(
        "training finished") == 1  # stopped once, then finished
    started = next(line for line in first.out.splitlines() if line.startswith("trial 1: "))
    assert started.replace("trial 1: ", "trial 2: ") in second.out  # the same values

    reported = {run: hparams.read_report(str(sweep_dir / run / "hypertune/output.metrics"),
                                         "AP50") for run in runs}
    assert all(value is not None and 0 <= value[0] <= 1 for value in reported.values())
    best = max(runs, key=lambda run: reported[run][0])  # ties: the first trial
    assert second.out.strip().endswith(f"in {sweep_dir / best}")


def test_a_local_sweep_directory_holds_one_sweep_and_one_process(tmp_path):
    from launch.targets.local import tuning as local
    from launch.values.jobs import TrainerDirs

    request, dirs = Request.training(None, 2), TrainerDirs(str(tmp_path / "sweep"), "records")
    wanted = local.identity(SWEEP, request, dirs)
    held = local._claim(tmp_path / "sweep", wanted)
    with pytest.raises(local.SweepBusy, match=r"sweep directory .* in use by process \d+;"):
        local._claim(tmp_path / "sweep", wanted)
    held.close()
    local._claim(tmp_path / "sweep", wanted).close()  # the same sweep resumes
    more = Sweep.from_mapping({**SWEEP.as_mapping(), "trials": 40, "parallel": 4})
    local._claim(tmp_path / "sweep", local.identity(more, request, dirs)).close()
    other = Sweep.from_mapping({**SWEEP.as_mapping(), "metric": "AP"})
    with pytest.raises(InputError, match="holds a different sweep"):
        local._claim(tmp_path / "sweep", local.identity(other, request, dirs))
    with pytest.raises(InputError, match="a local sweep keeps its study"):
        local.run_sweep(SWEEP, request, TrainerDirs("gs://pets-data/sweep", "records"))


def test_an_interrupted_trial_runs_again_with_its_values_and_directory(tmp_path):
    from optuna.trial import TrialState

    from launch.targets.local import tuning as local

    study = local.open_study(tmp_path, SWEEP)
    finished = study.ask()
    study.tell(finished, 0.5)
    failed = study.ask()
    failed.set_user_attr("failed", "exit status 1")
    study.tell(failed, state=TrialState.FAIL)
    running = study.ask()
    values = local.suggest(running, SWEEP)
    running.set_user_attr("run_dir", "trial-002")
    assert local.counted(study) == 2  # a result each: finished, and failed on its own

    study = local.open_study(tmp_path, SWEEP)  # the next run of the sweep
    assert local.requeue_interrupted(study) == [2]
    assert local.counted(study) == 2  # the interrupted trial is not a result
    again = study.ask()
    assert local.suggest(again, SWEEP) == values
    assert again.user_attrs["run_dir"] == "trial-002"
    job = local.trial_job(Request.training(None, 2), local.TrainerDirs(str(tmp_path), "records"),
                          SWEEP, tmp_path / "trial-002", again.number, values)
    assert job.env["CLOUD_ML_HP_METRIC_TAG"] == "AP50"
    assert job.env["CLOUD_ML_HP_METRIC_FILE"] == \
        str(tmp_path / "trial-002" / "hypertune/output.metrics")
    flags = [a for a in job.args if a.startswith("--hparam=")]
    assert flags == [f"--hparam={SWEEP.params[i].parameter_id}={v}"
                     for i, v in enumerate(values.values())]
    assert f"--model_dir={tmp_path / 'trial-002'}" in job.args


def test_a_sweep_whose_trials_all_fail_fails_and_a_grid_is_tried_once(tmp_path):
    from launch.targets.local import tuning as local
    from launch.values.jobs import TrainerDirs

    grid = Sweep.from_mapping({"metric": "AP", "algorithm": "grid", "trials": 5, "parallel": 2,
                               "params": {"batch_size": [2, 4]}})
    assert local.wanted_trials(grid) == 2
    dirs = TrainerDirs(str(tmp_path / "sweep"), str(tmp_path / "no-records"))
    with pytest.raises(StepFailed, match="no trial finished") as failed:
        local.run_sweep(grid, Request.training(None, 2), dirs, say=lambda line: None)
    assert "0 trials finished, 2 failed" in str(failed.value)
    # each failure says why, from the trial's log (launch/targets/triage.py)
    reasons = [t.user_attrs["failed"] for t in local.open_study(
        tmp_path / "sweep", grid).get_trials()]
    assert len(reasons) == 2 and all(
        "failed with exit status 2: the trainer refused to go on: no files match" in reason
        for reason in reasons), reasons
    logs = sorted((tmp_path / "sweep").glob("trial-*/trainer.log"))
    assert len(logs) == 2 and all("no files match" in log.read_text() for log in logs)
