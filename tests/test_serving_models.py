"""The trained model served the way Vertex AI serves it: uploaded, deployed and asked through
the real client library, the fake Prediction Service running the Model's container (our
serving image's entrypoint, then TF Serving's REST API on the contract's routes), and a batch
job over files in the bucket. The answers must be the local prediction's, through either
signature. Minutes: marked slow."""

from __future__ import annotations

import base64
import json
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from launch.targets.vertex import serving as vertex_serving
from launch.targets.vertex.endpoints import Serving
from tests.conftest import HANG, trainer_here
from tests.fakes.cloud import OUTPUTS, fake_cloud
from trainer.prediction.results import ResultForms

pytestmark = pytest.mark.slow


def upload_run(storage, trained, exported, run_id: str = "r1") -> None:
    """The run's files in the bucket, as the training and evaluation jobs leave them: the
    checkpoint its export holds (the best), with its evaluation and best/."""
    model_dir = trained[0]
    bucket = storage.bucket(OUTPUTS.bucket)
    held = json.loads((exported / "export.json").read_text())["checkpoint"]
    for path in [model_dir / "run.json", model_dir / "eval" / f"{held}.json",
                 *model_dir.glob(f"{held}.*"), *(model_dir / "best").glob("*")]:
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
    assert theirs["score_threshold"] == ours["score_threshold"]
    for a, b in zip(theirs["images"], ours["images"], strict=True):
        assert Path(a["image"]).name == Path(b["image"]).name
        if not a["detections"] or not b["detections"]:  # one kept none: a score at the edge
            kept = a["detections"] or b["detections"]
            assert not kept or kept[0]["score"] < theirs["score_threshold"] + 0.02
            continue
        top_a, top_b = a["detections"][0], b["detections"][0]
        assert top_a["class"] == top_b["class"]
        np.testing.assert_allclose(top_a["box"], top_b["box"], atol=0.02)
        assert abs(top_a["score"] - top_b["score"]) < 0.02


def ask(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=HANG) as answer:
        (prediction,) = json.loads(answer.read())["predictions"]
    return prediction


def same_signatures(url: str, image: Path) -> None:
    """Both signatures through the container's predict route, as TF Serving's REST API takes
    them: `serving_default` (encoded files, for the registry) and `serving_bytes` give the
    same answer; `serving_uint8` (pixels) the same detections, given the pixels TensorFlow
    decodes from those bytes (`Picture.pixels`, what local predict sends: Pillow's JPEG
    decoder moves a score near the 0.1 floor across it, one detection more or less)."""
    from trainer.prediction.predict import read_picture

    encoded = {"b64": base64.b64encode(image.read_bytes()).decode()}
    default = ask(url, {"instances": [encoded]})
    assert ask(url, {"signature_name": "serving_bytes", "instances": [encoded]}) == default
    assert set(default) == {"detection_boxes", "detection_classes", "detection_scores",
                            "num_detections", "image_error"}
    # the image was read (trainer/export/saved_model.py's IMAGE_ERROR)
    assert default["image_error"] == ""
    pixels = read_picture(str(image)).pixels.tolist()
    uint8 = ask(url, {"signature_name": "serving_uint8", "instances": [pixels]})
    assert uint8["num_detections"] == default["num_detections"] > 0
    assert uint8["detection_classes"][0] == default["detection_classes"][0]
    np.testing.assert_allclose(uint8["detection_boxes"][0], default["detection_boxes"][0],
                               atol=0.02)


def test_upload_deploy_and_predict_online_and_in_batch_like_the_local_model(
        trained, exported, tmp_path):
    from trainer.data.sample import write_sample

    data = write_sample(tmp_path / "fresh", num_images=6, seed=5)
    images = sorted((data / "images").glob("*.jpg"))
    local = tmp_path / "local"
    trainer_here("predict", f"--model={exported}", f"--images={data}/images/*.jpg",
                 f"--output_dir={local}")
    expected = json.loads((local / "detections.json").read_text())

    with fake_cloud(tmp_path) as services:
        cloud = services.cloud()
        upload_run(services.storage, trained, exported)
        assert "uploaded as" in vertex_serving.upload_model(cloud, "r1")
        vertex_serving.deploy(cloud, "r1", lambda region: Serving.from_flags(
            region, "n1-standard-4", None, 1, 1, 100))
        (endpoint,) = services.endpoints.endpoints
        online = tmp_path / "online"
        vertex_serving.predict_online(cloud, endpoint.rsplit("/", 1)[-1], f"{data}/images/*.jpg",
                                      str(online), None, forms=ResultForms(("supervision",)))
        report = json.loads((online / "detections.json").read_text())
        same_report(expected, report)
        rows = json.loads((online / "supervision.json").read_text())  # predict --results
        assert len(rows) == sum(len(entry["detections"]) for entry in report["images"])
        # the threshold the export's evaluation chose travelled with the model (issue 40)
        chosen = json.loads((exported / "export.json").read_text())["score_threshold"]
        assert report["score_threshold"] == expected["score_threshold"] == chosen["value"]
        assert report["score_threshold_from"].startswith("export.json: the F1-best score")
        assert report["model"] == endpoint
        assert all(Path(entry["annotated"]).exists() for entry in report["images"])
        # one image a request, each `{"b64": ...}` as TF Serving's JSON carries bytes
        sent = services.prediction.received
        assert len(sent) == len(images)
        assert all(len(request.instances) == 1 and set(request.instances[0]) == {"b64"}
                   for request in sent)
        # our image, started by its entrypoint from the variables of the ContainerSpec
        ((_, predict_url),) = services.containers.running.values()
        assert services.containers.commands[0][:4] == [
            "tensorflow_model_server", "--port=8500", "--rest_api_port=8501",
            "--model_name=detector"]
        same_signatures(predict_url, images[0])

        bucket = services.storage.bucket(OUTPUTS.bucket)
        for path in images:
            bucket.blob(f"incoming/{path.name}").upload_from_filename(path)
        bucket.blob("incoming/broken.jpg").upload_from_string(b"\xff\xd8 not a jpeg")
        said = []
        where = vertex_serving.predict_batch(
            cloud, "r1", "gs://pets-data/incoming/*.jpg", None, None,
            lambda region: Serving.from_flags(region, "n1-standard-4", None, 1, 1, 100),
            poll_seconds=0, say=said.append, forms=ResultForms(("yolo", "labelstudio")))
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
        assert {f"{prefix}/yolo/{p.stem}.txt" for p in images} <= names
        tasks = json.loads(bucket.blob(f"{prefix}/label_studio.json").download_as_text())
        assert sorted(task["data"]["image"] for task in tasks) == sorted(
            entry["image"] for entry in batch["images"])  # the bucket's, not this machine's
