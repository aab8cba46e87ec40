"""The README's first command, in miniature: `invoke demo` runs every step end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("data_format", ["pets", "coco"])
def test_invoke_demo_leaves_metrics_a_savedmodel_and_an_annotated_image(tmp_path,
                                                                         data_format):
    result = subprocess.run(
        [sys.executable, "-m", "invoke", "demo", f"--workdir={tmp_path}", "--steps=20",
         "--num-images=30", f"--format={data_format}"], cwd=REPO, text=True,
        capture_output=True, timeout=900)
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-5000:]
    assert "AP50" in result.stdout
    annotated = result.stdout.split("annotated image:")[1].split()[0]
    assert Path(annotated).is_file() and annotated.endswith("_detections.jpg")
    assert (tmp_path / "exported" / "saved_model.pb").is_file()
    assert (tmp_path / "exported" / "label_map.pbtxt").is_file()
    metrics = json.loads((tmp_path / "model" / "eval" / "ckpt-20.json").read_text())
    assert {"AP", "AP50", "AP75"} <= set(metrics["metrics"])
    report = json.loads((tmp_path / "records" / "conversion_report.json").read_text())
    assert report["written"] == 27  # 30 images, 10% held out as the test split
    assert len(json.loads((tmp_path / "predictions" / "detections.json").read_text())[
        "images"]) == 3
