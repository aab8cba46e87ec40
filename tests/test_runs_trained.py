"""The comparison report on runs the trainer really made: the session's trained model
(evaluated at several checkpoints beside training) and the best trial of the local sweep."""

from __future__ import annotations

import json
import math
import statistics

import numpy as np
import pytest
from PIL import Image

from launch.features.runs import lookup
from tests.conftest import TRAIN_STEPS
from tests.test_runs import cells

pytestmark = pytest.mark.slow


def test_compare_two_trained_runs(trained, swept, tmp_path):
    model_dir = trained[0]
    sweep_dir = swept[0]
    out = lookup.compare(lambda: pytest.fail("local runs need no cloud"),
                         [str(model_dir), str(sweep_dir / "trial-000")], tmp_path)
    rows = cells(out.split("\n\n")[0])
    for row, run in zip(rows, (model_dir, sweep_dir / "trial-000"), strict=True):
        newest = max(int(p.stem.split("-")[1]) for p in (run / "eval").glob("ckpt-*.json"))
        kept = json.loads((run / "best" / "best.json").read_text())  # its evaluators kept it
        written = json.loads((run / "eval" / f"ckpt-{kept['step']}.json").read_text())
        assert written["metrics"]["AP"] == kept["value"] and row["checkpoint"] == \
            f"best {kept['step']}"
        for metric in ("AP", "AP50", "AP75", "APm", "APl"):
            value = written["metrics"][metric]
            assert row[metric] == (f"{value:.4f}" if value >= 0 else "-")
        assert row["steps"] == str(newest)
        assert row["experiment"] == "pets_retinanet_mobilenet"

    trained_eval = json.loads((model_dir / "eval" / f"ckpt-{TRAIN_STEPS}.json").read_text())
    # AP per class is COCO's per-class slice: its mean is the evaluator's AP
    per_class = trained_eval["per_class"]
    assert len(per_class) == 3 and all(v["objects"] > 0 for v in per_class.values())
    assert statistics.mean(v["AP"] for v in per_class.values()) == \
        pytest.approx(trained_eval["metrics"]["AP"], abs=1e-4)
    curve = trained_eval["pr_curve"]
    assert len(curve["recall"]) == 101 and curve["precision"][0] >= 0.9
    for worst in trained_eval["worst_images"]:
        image = Image.open(model_dir / "eval" / worst["picture"])
        assert image.size[0] >= 256 and 0 <= worst["mean_iou"] <= 1
    ious = [w["mean_iou"] for w in trained_eval["worst_images"] if not w["missed"]]
    assert ious == sorted(ious)  # worst first

    for name in ("ap_by_step.png", "loss_by_step.png", "per_class_ap.png", "pr_curve.png"):
        pixels = np.asarray(Image.open(tmp_path / name).convert("RGB"))
        assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 50
    page = (tmp_path / "report.html").read_text()
    # the four plots, and each run's confusion matrix (the trained run's at least)
    assert (tmp_path / "confusion-1.png").is_file()
    assert page.count("data:image/png;base64,") == 4 + len(list(tmp_path.glob("confusion-*")))
    assert page.count("data:image/jpeg;base64,") >= len(trained_eval["worst_images"])
    assert all(math.isfinite(float(row["AP"])) for row in rows)
