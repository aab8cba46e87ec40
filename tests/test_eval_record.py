"""One evaluation record (trainer/model/eval_record.py): what the evaluator writes is what early
stopping, `invoke runs.*` and the registry's gate read, and a hostile file reads the same
way to each of them."""

from __future__ import annotations

import json

from launch.features.runs.record import load_run
from trainer.model.best import stopping
from trainer.model.eval_record import EvaluationRecord

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


def test_an_operating_point_round_trips_and_a_malformed_one_is_absent(tmp_path):
    from tests.test_confusion import IMAGES, NAMES
    from trainer.evaluation import confusion

    point = confusion.operating_point(IMAGES, NAMES).as_json()
    record = EvaluationRecord(300, {"AP": 0.5}, "/m/ckpt-300", operating_point=point,
                              data="gs://b/datasets/pets/v3/test.record-*")
    path = tmp_path / "ckpt-300.json"
    path.write_text(json.dumps(record.to_json()))
    read = EvaluationRecord.read(str(path), 300)
    assert read == record and read.operating_point["confusion"] == point["confusion"]
    assert read.data == "gs://b/datasets/pets/v3/test.record-*"
    assert EvaluationRecord.parse({**record.to_json(), "data": 7}, 300).data == ""
    for broken in ({**point, "threshold": 1.5}, {**point, "f1": float("nan")},
                   {**point, "confusion": point["confusion"][:-1]},
                   {**point, "confusion": [[-1, 0, 0]] * 3},
                   {**point, "confusion": [[True, 0, 0]] * 3},
                   {**point, "classes": ["cat", "cat", "background"]},
                   {**point, "per_class": {"lion": point["per_class"]["cat"]}},
                   {**point, "per_class": {"cat": {**point["per_class"]["cat"], "f1": 2}}},
                   [1], "x"):
        data = {**record.to_json(), "operating_point": broken}
        assert EvaluationRecord.parse(data, 300).operating_point is None, broken
