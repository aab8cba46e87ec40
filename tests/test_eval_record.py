"""One evaluation record (trainer/eval_record.py): what the evaluator writes is what early
stopping, `invoke runs.*` and the registry's gate read, and a hostile file reads the same
way to each of them."""

from __future__ import annotations

import json

from launch.features.runs.record import load_run
from trainer.best import stopping
from trainer.eval_record import EvaluationRecord

FULL = EvaluationRecord(
    300, {"AP": 0.5, "AP50": 0.9}, "/m/ckpt-300",
    per_class={"cat": {"AP": 0.4}}, pr_curve={"recall": [0.0, 1.0], "precision": [1.0, 0.5]},
    worst_images=({"picture": "worst-300-1.jpg", "missed": 1},))


def test_a_record_round_trips_through_its_file(tmp_path):
    path = tmp_path / "eval" / "ckpt-300.json"
    path.parent.mkdir()
    path.write_text(json.dumps(FULL.to_json(), indent=2))
    assert EvaluationRecord.read(str(path), 300) == FULL
    bare = EvaluationRecord(100, {"AP": 0.1}, "/m/ckpt-100")
    assert set(bare.to_json()) == {"checkpoint", "step", "metrics"}  # no images: no breakdown
    assert EvaluationRecord.parse(bare.to_json(), 100) == bare


def test_a_hostile_file_reads_the_same_to_every_reader(tmp_path):
    run = tmp_path / "run"
    (run / "eval").mkdir(parents=True)
    (run / "eval" / "ckpt-200.json").write_text(
        '{"metrics": {"AP": NaN, "AP50": 0.5, "AR": "high"}, "per_class": ["cat"], '
        '"pr_curve": {"recall": [0.1], "precision": []}, "worst_images": {"a": 1}, '
        '"checkpoint": 7}')
    (run / "eval" / "ckpt-300.json").write_text("[1, 2]")  # no metrics: no evaluation
    (run / "eval" / "ckpt-400.json").write_text("{" * 100_000)  # too deep to read
    record = EvaluationRecord.read(str(run / "eval" / "ckpt-200.json"), 200)
    assert record == EvaluationRecord(200, {"AP50": 0.5})
    assert [e.metrics for e in load_run(run).evaluations] == [{"AP50": 0.5}]
    assert [(s.step, s.value) for s in stopping.scores(str(run), "AP50")] == [
        (200, 0.5), (300, None), (400, None)]
    assert stopping.scores(str(run), "AP")[0].value is None  # NaN is no score
