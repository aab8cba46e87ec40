"""The trained model served the way Vertex AI serves it: uploaded, deployed and asked through
the real client library, the fake Prediction Service running the exported SavedModel as TF
Serving does (b64 decoded, `serving_default`), and a batch job over files in the bucket. The
answers must be the local prediction's. Minutes: marked slow."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from launch.serving import commands
from launch.serving.endpoints import Serving
from tests.conftest import run_trainer
from tests.fakes.cloud import OUTPUTS, fake_cloud

pytestmark = pytest.mark.slow


def upload_run(storage, trained, exported, run_id: str = "r1") -> None:
    """The run's files in the bucket, as the training and evaluation jobs leave them."""
    model_dir = trained[0]
    bucket = storage.bucket(OUTPUTS.bucket)
    final = max(model_dir.glob("eval/ckpt-*.json"), key=lambda p: int(p.stem[5:]))
    for path in [model_dir / "run.json", final, *model_dir.glob(f"{final.stem}.*")]:
        bucket.blob(f"runs/{run_id}/checkpoints/{path.relative_to(model_dir)}"
                    ).upload_from_filename(path)
    for path in exported.rglob("*"):
        if path.is_file():
            bucket.blob(f"runs/{run_id}/model/{path.relative_to(exported)}"
                        ).upload_from_filename(path)


def same_report(theirs: dict, ours: dict) -> None:
    """The same detections for the same images; scores may differ in the last digits (TF
    Serving decodes JPEGs with TensorFlow, the local path with PIL)."""
    assert len(theirs["images"]) == len(ours["images"])
    for a, b in zip(theirs["images"], ours["images"], strict=True):
        assert Path(a["image"]).name == Path(b["image"]).name
        top_a, top_b = a["detections"][0], b["detections"][0]
        assert top_a["class"] == top_b["class"]
        np.testing.assert_allclose(top_a["box"], top_b["box"], atol=0.02)
        assert abs(top_a["score"] - top_b["score"]) < 0.02


def test_upload_deploy_and_predict_online_and_in_batch_like_the_local_model(
        trained, exported, tmp_path):
    from trainer.data.sample import write_sample

    data = write_sample(tmp_path / "fresh", num_images=6, seed=5)
    images = sorted((data / "images").glob("*.jpg"))
    local = tmp_path / "local"
    run_trainer("predict", f"--model={exported}", f"--images={data}/images/*.jpg",
                f"--output_dir={local}")
    expected = json.loads((local / "detections.json").read_text())

    with fake_cloud(tmp_path) as services:
        cloud = services.cloud()
        upload_run(services.storage, trained, exported)
        assert "uploaded as" in commands.upload_model(cloud, "r1")
        commands.deploy(cloud, "r1", lambda region: Serving.from_flags(
            region, "n1-standard-4", None, 1, 1, 100))
        (endpoint,) = services.endpoints.endpoints
        online = tmp_path / "online"
        commands.predict_online(cloud, endpoint.rsplit("/", 1)[-1], f"{data}/images/*.jpg",
                                str(online), 0.3)
        report = json.loads((online / "detections.json").read_text())
        same_report(expected, report)
        assert report["model"] == endpoint
        assert all(Path(entry["annotated"]).exists() for entry in report["images"])
        # one image a request, each `{"b64": ...}` as TF Serving's JSON carries bytes
        sent = services.prediction.received
        assert len(sent) == len(images)
        assert all(len(request.instances) == 1 and set(request.instances[0]) == {"b64"}
                   for request in sent)

        bucket = services.storage.bucket(OUTPUTS.bucket)
        for path in images:
            bucket.blob(f"incoming/{path.name}").upload_from_filename(path)
        bucket.blob("incoming/broken.jpg").upload_from_string(b"\xff\xd8 not a jpeg")
        said = []
        where = commands.predict_batch(
            cloud, "r1", "gs://pets-data/incoming/*.jpg", None, 0.3,
            lambda region: Serving.from_flags(region, "n1-standard-4", None, 1, 1, 100),
            poll_seconds=0, say=said.append)
        assert where.startswith("gs://pets-data/runs/r1/predictions/")
        assert said[-1].strip() == "succeeded"
        prefix = where.removeprefix("gs://pets-data/")
        batch = json.loads(bucket.blob(f"{prefix}/detections.json").download_as_text())
        assert [Path(f["image"]).name for f in batch["failures"]] == ["broken.jpg"]
        batch["images"] = sorted(batch["images"], key=lambda entry: entry["image"])
        same_report(expected, batch)
        assert all(entry["image"].startswith("gs://pets-data/incoming/")
                   and entry["annotated"].startswith(where) for entry in batch["images"])
        names = {b.name for b in services.storage.list_blobs("pets-data", prefix=prefix)}
        assert {f"{prefix}/{p.stem}_detections.jpg" for p in images} <= names
