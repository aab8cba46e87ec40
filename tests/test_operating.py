"""The score threshold travels with the model (trainer/evaluation/operating.py): an export
records its checkpoint's evaluated operating point, `predict` detects at it unless
`--score-threshold` says otherwise, and a missing, damaged or hostile export.json falls back
to the default instead of failing. The trained model's export and the endpoints are in
test_training.py and test_serving_models.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.test_confusion import IMAGES, NAMES
from trainer.detections.detector import Detections, Picture
from trainer.evaluation import confusion, operating
from trainer.evaluation.analysis import SHOWN_SCORE
from trainer.model.eval_record import EvaluationRecord
from trainer.prediction.predict import detect_files


def evaluated_run(tmp_path):
    """A model directory whose ckpt-300 was evaluated with an operating point."""
    point = confusion.operating_point(IMAGES, NAMES).as_json()
    (tmp_path / "run" / "eval").mkdir(parents=True)
    (tmp_path / "run" / "eval" / "ckpt-300.json").write_text(json.dumps(
        EvaluationRecord(300, {"AP": 0.5}, "ckpt-300", operating_point=point).to_json()))
    return tmp_path / "run"


def test_an_export_records_its_checkpoints_operating_point(tmp_path):
    run = evaluated_run(tmp_path)
    recorded = operating.from_evaluation(str(run), f"{run}/ckpt-300")
    assert recorded == {"value": 0.2, "f1": pytest.approx(0.6), "precision": 0.5,
                        "recall": 0.75, "iou": 0.5, "overlap": "box",
                        "evaluation": "eval/ckpt-300.json",
                        "per_class": {"cat": 0.9, "dog": 0.2}}
    assert operating.from_evaluation(str(run), f"{run}/ckpt-100") is None  # not evaluated


def test_the_flag_wins_then_the_export_then_the_default(tmp_path):
    run = evaluated_run(tmp_path)
    info = {"score_threshold": operating.from_evaluation(str(run), f"{run}/ckpt-300")}
    assert operating.threshold(0.7, info) == (0.7, "--score-threshold")
    value, why = operating.threshold(None, info)
    assert value == 0.2 and why == ("export.json: the F1-best score of eval/ckpt-300.json "
                                    "(F1 0.600)")
    assert operating.threshold(None, {"score_threshold": {"value": 1.0}})[0] == 1.0
    for damaged in ({}, {"score_threshold": None}, {"score_threshold": {"value": 1.5}},
                    {"score_threshold": {"value": "0.2"}}, {"score_threshold": [0.2]}, []):
        assert operating.threshold(None, damaged)[0] == SHOWN_SCORE, damaged


def test_a_saved_model_and_a_tflite_file_read_their_own_threshold(tmp_path):
    (tmp_path / "export.json").write_text(json.dumps({
        "score_threshold": {"value": 0.4},
        "tflite": {"file": "model.tflite", "score_threshold": {"value": 0.6}}}))
    assert operating.recorded(operating.read_info(str(tmp_path)))["value"] == 0.4
    assert operating.recorded(operating.read_info(str(tmp_path / "model.tflite")))["value"] \
        == 0.6
    (tmp_path / "export.json").write_text("{" * 100_000)  # too deep: no threshold, no crash
    assert operating.read_info(str(tmp_path)) == {}
    assert operating.read_info(str(tmp_path / "absent")) == {}


def test_predict_keeps_what_scores_at_least_the_threshold_and_says_why(tmp_path):
    from PIL import Image

    image = tmp_path / "cat.jpg"
    Image.new("RGB", (64, 64), "gray").save(image)
    found = Detections(np.array([[0, 0, .5, .5], [.5, .5, 1, 1]]), np.array([1, 2]),
                       np.array([0.9, 0.25]))

    def detector(picture: Picture) -> Detections:
        return found

    for threshold, kept in (((0.2, "export.json: ..."), 2), ((0.3, "--score-threshold"), 1)):
        report = detect_files(detector, NAMES, "m", [str(image)], str(tmp_path / "out"),
                              threshold)
        assert (report["score_threshold"], report["score_threshold_from"]) == threshold
        assert len(report["images"][0]["detections"]) == kept
        written = json.loads((tmp_path / "out" / "detections.json").read_text())
        assert written["score_threshold"] == threshold[0]
