"""The best checkpoint and early stopping without training: the judge's table, best/ kept
whole through crashes and a second writer, the checkpoint export picks, and the flags'
refusals (trainer, invoke and job file). Training that stops early is in test_training.py."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launch.values import jobfile
from launch.values.jobs import TrainerDirs
from tests.cli import REPO, invoke
from tests.conftest import HANG
from trainer.common.errors import SettingsError
from trainer.model.best import choice, keeping, stopping
from trainer.model.best.stopping import Score, judge
from trainer.training import settings

NAN = float("nan")


def scored(*values) -> list[Score]:
    return [Score(100 * i, value) for i, value in enumerate(values, 1)]


# (values at steps 100, 200, ...), patience, min_delta, goal -> stop, best step, since best
JUDGED = {
    "rising: no stop": ((0.1, 0.2, 0.3), 2, 0.0, "maximize", False, 300, 0),
    "a plateau stops; ties are no gain": ((0.5, 0.5, 0.5), 2, 0.0, "maximize", True, 100, 2),
    "one short of the patience": ((0.5, 0.4, 0.45), 3, 0.0, "maximize", False, 100, 2),
    "a peak then a fall": ((0.2, 0.6, 0.5, 0.55), 2, 0.0, "maximize", True, 200, 2),
    "small gains under min_delta count as none, yet rank": (
        (0.5, 0.505, 0.509), 2, 0.01, "maximize", True, 300, 2),
    "a gain over min_delta resets the count": (
        (0.5, 0.505, 0.52, 0.525), 2, 0.01, "maximize", False, 400, 1),
    "NaN and missing values are left out": (
        (0.5, NAN, 0.4, None, 0.45), 2, 0.0, "maximize", True, 100, 2),
    "minimize: smaller is better": ((1.0, 0.9, 0.95, 0.92), 2, 0.0, "minimize", True, 200, 2),
    "minimize with min_delta": ((1.0, 0.95, 0.99), 2, 0.1, "minimize", True, 200, 2),
    "no patience: never stops": ((0.5, 0.4, 0.3, 0.2), None, 0.0, "maximize", False, 100, 3),
    "nothing evaluated": ((), 1, 0.0, "maximize", False, None, 0),
    "only NaN": ((NAN, NAN), 1, 0.0, "maximize", False, None, 0),
    "patience 1": ((0.3, 0.3), 1, 0.0, "maximize", True, 100, 1),
}


@pytest.mark.parametrize(("values", "patience", "min_delta", "goal", "stop", "best_step",
                          "since"), JUDGED.values(), ids=JUDGED.keys())
def test_the_judge(values, patience, min_delta, goal, stop, best_step, since):
    verdict = judge(scored(*values), patience, min_delta, goal)
    assert (verdict.stop, verdict.best_step, verdict.since_best) == (stop, best_step, since)
    assert verdict.last_step == (100 * len(values) if values else None)
    assert verdict.ignored == tuple(100 * i for i, v in enumerate(values, 1)
                                    if v is None or math.isnan(v))


@pytest.mark.parametrize(("patience", "min_delta", "goal", "evaluations", "message"), [
    (0, 0.0, "maximize", (), "at least 1, got 0"),
    (-1, 0.0, "maximize", (), "at least 1, got -1"),
    (1.5, 0.0, "maximize", (), "whole number of evaluations"),
    (True, 0.0, "maximize", (), "whole number of evaluations"),
    (2, -0.1, "maximize", (), "minimum gain must be a finite number, at least 0, got -0.1"),
    (2, NAN, "maximize", (), "got nan"),
    (2, math.inf, "maximize", (), "got inf"),
    (2, 0.0, "up", (), "goal 'up'"),
    (2, 0.0, "maximize", (Score(200, 0.1), Score(100, 0.2)), "not in step order"),
    (2, 0.0, "maximize", (Score(100, 0.1), Score(100, 0.2)), "not in step order"),
])
def test_the_judge_refuses_what_is_no_rule(patience, min_delta, goal, evaluations, message):
    with pytest.raises(ValueError, match=message):
        judge(list(evaluations), patience, min_delta, goal)


def test_the_reason_says_the_metric_the_gain_and_the_best_step():
    verdict = judge(scored(0.5, 0.5, 0.5), 2, 0.001)
    assert stopping.reason(verdict, "AP", stopping.EarlyStopping(2, 0.001), "maximize") == \
        "no AP gain > 0.001 in 2 evaluations; best step 100"


# --- best/ on real (tiny) checkpoints -------------------------------------------------------

def make_run(model_dir: Path, early_stop: dict | None = None) -> Path:
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "run.json").write_text(json.dumps({
        "experiment": "pets_retinanet_mobilenet",
        **({"early_stop": early_stop} if early_stop else {})}))
    return model_dir


def save(model_dir: Path, step: int, value: float | None) -> None:
    """A checkpoint at `step` holding `step` (so its copy can be told apart), evaluated."""
    import tensorflow as tf

    tf.train.Checkpoint(v=tf.Variable(float(step))).write(str(model_dir / f"ckpt-{step}"))
    steps = sorted(int(p.stem[5:]) for p in model_dir.glob("ckpt-*.index"))
    tf.compat.v1.train.update_checkpoint_state(  # the `checkpoint` file, as the manager keeps it
        str(model_dir), f"ckpt-{step}", all_model_checkpoint_paths=[f"ckpt-{s}" for s in steps])
    evaluate(model_dir, step, value)


def evaluate(model_dir: Path, step: int, value: float | None) -> None:
    (model_dir / "eval").mkdir(exist_ok=True)
    metrics = {"AP": value, "AP50": 0.9} if value is not None else {"AP50": 0.9}
    (model_dir / "eval" / f"ckpt-{step}.json").write_text(json.dumps(  # NaN as Python writes it
        {"step": step, "metrics": metrics}))


def kept(model_dir: Path) -> tuple[dict, list[str]]:
    record = json.loads((model_dir / "best" / "best.json").read_text())
    return record, sorted(p.name for p in (model_dir / "best").glob("ckpt-*"))


def held(prefix: Path) -> float:
    import tensorflow as tf

    return float(tf.train.load_checkpoint(str(prefix)).get_tensor(
        "v/.ATTRIBUTES/VARIABLE_VALUE"))


def test_best_follows_the_evaluations_and_outlives_rotation(tmp_path):
    run = make_run(tmp_path / "run")
    for step, value in ((100, 0.3), (200, 0.5), (300, 0.4)):
        save(run, step, value)
        verdict = keeping.after_evaluation(str(run))
    assert (verdict.best_step, verdict.stop) == (200, False)
    record, names = kept(run)
    assert {k: record[k] for k in ("step", "metric", "value", "goal", "checkpoint")} == {
        "step": 200, "metric": "AP", "value": 0.5, "goal": "maximize",
        "checkpoint": "ckpt-200"}
    assert record["evaluated_at"].startswith(time.strftime("%Y-", time.gmtime()))
    assert names == ["ckpt-200.data-00000-of-00001", "ckpt-200.index"]
    assert held(run / "best" / "ckpt-200") == 200.0
    assert not (run / "early_stop.json").exists()  # no early stopping asked

    for name in run.glob("ckpt-200.*"):  # Model Garden's manager rotates it away
        name.unlink()
    chosen = choice.choose(str(run), choice.Choice.parse(None))
    assert (chosen.path, chosen.choice) == (f"{run}/best/ckpt-200", "best")
    assert chosen.reason == "the best evaluated: AP 0.5000 at step 200"
    assert choice.choose(str(run), choice.Choice.parse("200")).path == f"{run}/best/ckpt-200"
    assert choice.choose(str(run), choice.Choice.parse("latest")).path == f"{run}/ckpt-300"

    save(run, 400, 0.6)
    keeping.after_evaluation(str(run))
    assert kept(run)[1] == ["ckpt-400.data-00000-of-00001", "ckpt-400.index"]  # 200 deleted

    evaluate(run, 500, 0.9)  # its checkpoint was rotated away before it was evaluated
    warnings = []
    assert keeping.keep(str(run), keeping.Best(500, "AP", 0.9, "maximize", "now"),
                     say=warnings.append).step == 400
    assert "ckpt-500 is gone (rotated away before it could be kept: raise " \
           "trainer.max_to_keep)" in warnings[0]


def test_a_crash_in_an_update_leaves_the_previous_pair_whole(tmp_path):
    """The new files are copied, then best.json is replaced: a crash between the two (here, a
    best.json that cannot be written) leaves the old record and its files, and the next
    evaluation completes the update and removes what the crash left."""
    run = make_run(tmp_path / "run")
    save(run, 100, 0.3)
    keeping.after_evaluation(str(run))
    save(run, 200, 0.5)
    blocker = run / "best" / f"best.json.{os.getpid()}.tmp"
    blocker.mkdir()  # the temporary file cannot be written: the update dies there
    with pytest.raises(Exception):  # noqa: B017 (TensorFlow's or the OS's, either will do)
        keeping.after_evaluation(str(run))
    record, names = kept(run)
    assert record["step"] == 100 and held(run / "best" / "ckpt-100") == 100.0
    assert "ckpt-200.index" in names  # copied before the crash: a stray, named by nothing
    assert choice.choose(str(run), choice.Choice.parse(None)).path == f"{run}/best/ckpt-100"

    blocker.rmdir()
    keeping.after_evaluation(str(run))
    record, names = kept(run)
    assert record["step"] == 200 and names == ["ckpt-200.data-00000-of-00001",
                                               "ckpt-200.index"]


def test_strays_are_removed_only_when_they_can_never_be_the_best(tmp_path):
    """A stray of a worse checkpoint goes; one of a checkpoint this writer has not judged
    (a concurrent writer's, perhaps) stays."""
    import shutil

    run = make_run(tmp_path / "run")
    for step, value in ((100, 0.3), (200, 0.2)):
        save(run, step, value)
    keeping.after_evaluation(str(run))
    for name in run.glob("ckpt-200.*"):
        shutil.copy(name, run / "best")  # a crashed update's leftovers
    (run / "best" / "ckpt-900.index").write_text("not judged by this writer")
    save(run, 300, 0.4)
    keeping.after_evaluation(str(run))
    assert kept(run)[1] == ["ckpt-300.data-00000-of-00001", "ckpt-300.index",
                            "ckpt-900.index"]


def test_a_damaged_or_missing_best_falls_back_to_the_newest_with_a_note(tmp_path):
    run = make_run(tmp_path / "run")
    save(run, 100, 0.3)
    notes = []
    chosen = choice.choose(str(run), choice.Choice(), say=notes.append)
    assert (chosen.path, chosen.choice) == (f"{run}/ckpt-100", "latest")
    assert "keeps no best checkpoint yet" in notes[0]
    (run / "best").mkdir()
    (run / "best" / "best.json").write_text('{"step": 100, "checkpoint": "../../etc"}')
    chosen = choice.choose(str(run), choice.Choice(), say=notes.append)
    assert chosen.path == f"{run}/ckpt-100" and "is not a best checkpoint's record" in notes[1]
    keeping.after_evaluation(str(run))  # the next evaluation writes it anew
    assert kept(run)[0]["step"] == 100


WRITER = """
import json, random, sys, time
from pathlib import Path
from trainer.model.best import keeping, stopping
run, first = Path(sys.argv[1]), int(sys.argv[2])
rng = random.Random(first)
(run / f"ready-{first}").touch()
while not (run / "go").exists():
    time.sleep(0.01)
for step in range(first, first + 2000, 20):
    for suffix in ("data-00000-of-00001", "index"):
        (run / f"ckpt-{step}.{suffix}").write_text(f"{step}:{suffix}")
    (run / "eval" / f"ckpt-{step}.json").write_text(json.dumps(
        {"step": step, "metrics": {"AP": rng.random()}}))
    keeping.after_evaluation(str(run))
"""


def test_two_writers_at_once_never_show_a_reader_half_a_best(tmp_path):
    """Two evaluators of one run (two eval jobs, or one beside the chief's own) update best/
    at once while a reader watches: every best.json it reads names files that are there, and
    the end holds the best of all evaluations."""
    run = make_run(tmp_path / "run")
    (run / "eval").mkdir()
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(run), str(first)], cwd=REPO,
                                stderr=subprocess.PIPE, text=True) for first in (1000, 1010)]
    while len(list(run.glob("ready-*"))) < 2:  # both started: they write at once from here
        assert all(w.poll() is None for w in writers)
        time.sleep(0.05)
    (run / "go").touch()
    seen = set()
    while any(w.poll() is None for w in writers):
        try:
            record = json.loads((run / "best" / "best.json").read_text())
        except FileNotFoundError:
            continue
        files = {p.name for p in (run / "best").glob(f"{record['checkpoint']}.*")}
        if files != {f"{record['checkpoint']}.{s}" for s in ("data-00000-of-00001", "index")}:
            again = json.loads((run / "best" / "best.json").read_text())
            assert again != record, f"best.json names {record['checkpoint']}, not all there"
        seen.add(record["step"])
    for writer in writers:
        assert writer.wait() == 0, writer.stderr.read()[-3000:]
    values = {int(p.stem[5:]): json.loads(p.read_text())["metrics"]["AP"]
              for p in (run / "eval").glob("ckpt-*.json")}
    record, names = kept(run)
    top = max(values, key=lambda step: (values[step], -step))
    assert record["step"] == top and record["value"] == values[top]
    assert f"ckpt-{top}.index" in names and len(seen) > 1
    assert (run / "best" / f"ckpt-{top}.index").read_text() == f"{top}:index"


def test_the_verdict_is_written_and_read_only_under_the_same_rule(tmp_path):
    rule = {"patience": 2, "min_delta": 0.01, "evaluator": "eval-job"}
    run = make_run(tmp_path / "run", rule)
    for step, value in ((100, 0.5), (200, 0.505), (300, NAN), (400, 0.5)):
        save(run, step, value)
        verdict = keeping.after_evaluation(str(run))
    assert verdict.stop and verdict.ignored == (300,)
    written = json.loads((run / "early_stop.json").read_text())
    assert written["reason"] == "no AP gain > 0.01 in 2 evaluations; best step 200"
    assert (written["last_step"], written["best_step"]) == (400, 200)  # its gain was small
    assert stopping.read_stop(str(run), stopping.EarlyStopping(2, 0.01)).step == 400
    # another run's rule
    assert stopping.read_stop(str(run), stopping.EarlyStopping(3, 0.01)) is None
    assert stopping.stopped_at(str(run)) == 400

    (run / "run.json").write_text(json.dumps({"experiment": "x", "early_stop": {
        "patience": 0, "min_delta": 0, "evaluator": "trainer"}}))
    with pytest.raises(ValueError, match=r"run\.json: early_stop is not a patience of at "
                                         r"least 1"):
        keeping.after_evaluation(str(run))


class ScoringEvaluator:
    """What an eval job's CheckpointEvaluator leaves per checkpoint (an evaluation, then
    best/ and the verdict), its score given instead of measured by a model."""

    def __init__(self, run: Path, values: dict[int, float]) -> None:
        self.model_dir, self.values = str(run), values

    def evaluate(self, checkpoint: str):
        from trainer.model.eval_record import EvaluationRecord

        step = int(checkpoint.rsplit("-", 1)[1])
        evaluate(Path(self.model_dir), step, self.values[step])
        keeping.after_evaluation(self.model_dir)
        return EvaluationRecord(step, {"AP": self.values[step]}, checkpoint)


def test_an_eval_job_that_stops_the_run_ends_with_it(tmp_path):
    """`--early-stop-evaluator eval-job`: the eval job judges from the rule in run.json and,
    once its verdict says stop, ends at that evaluation instead of waiting (here, 5 s of
    idle time) for the step the run will now never reach."""
    from trainer.evaluation.evaluate import evaluate_continuously

    run = make_run(tmp_path / "run", {"patience": 1, "min_delta": 0, "evaluator": "eval-job"})
    for step in (100, 200):
        save(run, step, None)
    for name in (run / "eval").iterdir():
        name.unlink()
    results = evaluate_continuously(ScoringEvaluator(run, {100: 0.5, 200: 0.5}),
                                    lambda: stopping.last_step(str(run), 1000), idle_timeout=5,
                                    poll_interval=0)
    # the newest first (it skips ahead of a trainer), then the one it skipped: both judged
    assert [r.step for r in results] == [200, 100] and stopping.last_step(str(run), 1000) == 200
    assert stopping.read_stop(str(run), stopping.EarlyStopping(1, 0, "eval-job")).reason == \
        "no AP gain > 0 in 1 evaluation; best step 100"
    assert kept(run)[0]["step"] == 100  # equal values: the earlier, whatever the order


# --- the flags ------------------------------------------------------------------------------

# Each bad early-stopping value, refused in one line by the one check (TrainArgs.check, the
# fields' bounds and choices): the trainer's parsing and the launcher's job file (a flag of
# `invoke train`, or a key of the file) answer the same words.
BAD_RULES = [({"early_stop_patience": "0"}, "--early-stop-patience must be at least 1, got '0'"),
             ({"early_stop_patience": "-1"}, "--early-stop-patience must be at least 1, got '-1'"),
             ({"early_stop_patience": "x"}, "--early-stop-patience must be a whole number, got "
                                            "'x'"),
             ({"early_stop_patience": "nan"}, "--early-stop-patience must be a whole number, "
                                              "got 'nan'"),
             ({"early_stop_patience": "inf"}, "--early-stop-patience must be a whole number, "
                                              "got 'inf'"),
             ({"early_stop_patience": "2.5"}, "--early-stop-patience must be a whole number, "
                                              "got '2.5'"),
             ({"early_stop_patience": "2", "early_stop_min_delta": "-1"},
              "--early-stop-min-delta must be at least 0, got '-1'"),
             ({"early_stop_patience": "2", "early_stop_min_delta": "nan"},
              "--early-stop-min-delta must be a number, got 'nan'"),
             ({"early_stop_patience": "2", "early_stop_min_delta": "inf"},
              "--early-stop-min-delta must be a number, got 'inf'"),
             ({"early_stop_patience": "2", "early_stop_min_delta": "x"},
              "--early-stop-min-delta must be a number, got 'x'"),
             ({"early_stop_patience": "2", "early_stop_evaluator": "me"},
              "--early-stop-evaluator must be one of trainer, eval-job, got 'me'"),
             ({"early_stop_min_delta": "0.1"},
              "--early-stop-min-delta applies to early stopping: add --early-stop-patience N"),
             ({"early_stop_evaluator": "eval-job"},
              "--early-stop-evaluator applies to early stopping: add --early-stop-patience N")]


@pytest.mark.parametrize(("flags", "message"), BAD_RULES, ids=[m for _, m in BAD_RULES])
def test_the_trainer_and_the_launcher_refuse_each_bad_rule_in_the_same_words(flags, message):
    with pytest.raises(SettingsError) as trainer:
        settings.parse(["--model_dir=m", *(f"--{k}={v}" for k, v in flags.items())], {})
    with pytest.raises(jobfile.JobFileError) as flag:
        jobfile.resolve("train", flags)
    file = {k.replace("_", "-"): v for k, v in flags.items()}
    with pytest.raises(jobfile.JobFileError) as key:
        jobfile.resolve("train", {}, file, "job.yaml")
    assert str(trainer.value) == str(flag.value) == message
    assert str(key.value) == message.replace(" must", " (in job.yaml) must", 1)


def test_two_evaluators_for_one_run_are_refused_by_the_trainer_and_the_launcher():
    """--evaluate has the chief evaluate; an eval job as early stopping's evaluator would be a
    second writer of the run's records and best/: one line, before anything starts."""
    message = ("--mode train_and_eval (`invoke train --evaluate`) has the chief evaluate each "
               "checkpoint, and --early-stop-evaluator eval-job says an eval job does: drop "
               "one of them, so one evaluator writes the run's records and best/")
    with pytest.raises(SettingsError) as trainer:
        settings.parse(["--model_dir=m", "--mode=train_and_eval", "--early_stop_patience=2",
                        "--early_stop_evaluator=eval-job"], {})
    with pytest.raises(jobfile.JobFileError) as launcher:
        jobfile.resolve("train", {"evaluate": True, "early_stop_patience": "2",
                                  "early_stop_evaluator": "eval-job"})
    assert str(trainer.value) == str(launcher.value) == message
    both = jobfile.resolve("train", {"evaluate": True, "early_stop_patience": "2"})
    assert jobfile.request(both, "train").args.mode == "train_and_eval"  # the chief judges


def test_the_trainer_takes_the_rule_and_refuses_its_parts_alone():
    found = settings.parse(["--model_dir=m", "--early-stop-patience=3",
                            "--early-stop-min-delta=0.001"], {}).early_stopping
    assert found == stopping.EarlyStopping(3, 0.001, "trainer")
    assert settings.parse(["--model_dir=m"], {}).early_stopping is None
    for flag in ("--early_stop_min_delta=0.1", "--early_stop_evaluator=eval-job"):
        with pytest.raises(SettingsError, match="applies to early stopping: add "
                                                "--early-stop-patience N"):
            settings.parse(["--model_dir=m", flag], {})
    with pytest.raises(SettingsError, match=r"--early-stop-patience applies to training: an "
                                            r"evaluator \(--mode continuous_eval\) reads the "
                                            r"rule from the run's run.json"):
        settings.parse(["--model_dir=m", "--mode=continuous_eval", "--early_stop_patience=2"],
                       {})


def test_the_rule_reaches_the_trainers_command_and_the_job_file_and_eval_takes_none():
    job = jobfile.resolve("train", {"early_stop_patience": "3", "early_stop_min_delta": "0.01",
                                    "early_stop_evaluator": "eval-job"})
    args = jobfile.request(job, "train").trainer_job(TrainerDirs("m", "d")).args
    assert {"--early_stop_patience=3", "--early_stop_min_delta=0.01",
            "--early_stop_evaluator=eval-job"} <= set(args)
    assert "early-stop-patience: 3" in job.to_yaml("train")
    # the same file serves `invoke eval`, which reads the rule from the run, not the file
    evaluation = jobfile.resolve("eval", {}, {"early-stop-patience": 3}, "job.yaml")
    assert not any("early_stop" in a for a in jobfile.request(evaluation, "eval").trainer_job(
        TrainerDirs("m", "d")).args)


def test_the_guides_example_on_vertex_ai_carries_the_rule_to_the_chief(tmp_path):
    from tests.test_vertex import dry_run

    job = dry_run("train", "--target", "vertex", "--run-id", "gpu1", "--early-stop-patience",
                  "5", "--early-stop-min-delta", "0.002", cwd=tmp_path)
    (pool,) = job.job_spec.worker_pool_specs
    assert {"--early_stop_patience=5", "--early_stop_min_delta=0.002"} <= \
        set(pool.container_spec.args)


def test_a_bad_value_exits_2_in_one_line_before_anything_runs(tmp_path):
    trainer = subprocess.run([sys.executable, "-m", "trainer", f"--model_dir={tmp_path}/m",
                              "--early_stop_patience=0"], cwd=REPO, capture_output=True,
                             text=True, timeout=HANG)
    launcher = invoke("train", f"--model-dir={tmp_path}/m", "--early-stop-min-delta=-1",
                      "--early-stop-patience=2")
    for result in (trainer, launcher):
        assert result.returncode == 2 and "Traceback" not in result.stderr
        assert "must be at least" in result.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "m").exists()


def test_the_last_line_of_training_says_which_steps_no_checkpoint_holds():
    """Issue 38 item 6: a stop at step 450 whose last checkpoint is ckpt-400 says that steps
    401-450 were trained and not saved; a stop on a checkpoint says nothing more."""
    from trainer.training.train import finished_line

    assert finished_line("/m/ckpt-400", 450) == (
        "training finished at /m/ckpt-400; steps 401-450, trained before the stop, are in no "
        "checkpoint")
    assert finished_line("/m/ckpt-450", 450) == "training finished at /m/ckpt-450"
    assert finished_line("/m/ckpt-500", None) == "training finished at /m/ckpt-500"
