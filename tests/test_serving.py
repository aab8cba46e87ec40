"""Serving against local fakes of Vertex AI's Model, Endpoint and Job services (the real
client library, the API's own protos): the registry gate, the exact requests, traffic splits,
and what comes back from a server checked before it is drawn."""

from __future__ import annotations

import datetime
import json

import numpy as np
import pytest
from google.cloud import aiplatform_v1

from infra.image_context import context_hash
from launch.context.images import tag_resource, with_digest
from launch.errors import InputError, MissingError, StepFailed
from launch.stores.pricing.estimate import OverBudget
from launch.targets.traffic import split_with_new, split_without
from launch.targets.vertex import answers, endpoints, lifecycle, registry
from launch.targets.vertex import serving as vertex_serving
from launch.targets.vertex.endpoints import Serving
from tests import cli
from tests.cli import REPO
from tests.fakes.cloud import OUTPUTS, REPOSITORY
from trainer.detections.detector import ImageRefused, Picture

METRICS = {"AP": 0.8352, "AP50": 0.97, "AP75": 0.9, "APs": -1.0, "APm": 0.7, "APl": 0.86}
SERVING_IMAGE = f"{REPOSITORY}/serving:{context_hash()}"  # these sources' serving image


def put(storage, name: str, data: bytes | str) -> None:
    storage.bucket(OUTPUTS.bucket).blob(name).upload_from_string(data)


def write_run(storage, run_id: str = "r1", step: int = 1000, metrics: dict | None = None,
              evaluated: int | None = None, signature: str = "bytes",
              experiment: str = "pets_retinanet_mobilenet") -> None:
    """A trained run's files as the jobs leave them in the bucket."""
    root = f"runs/{run_id}"
    put(storage, f"{root}/checkpoints/{'run.json'}", json.dumps({"experiment": experiment}))
    for s in (step // 2, step):
        put(storage, f"{root}/checkpoints/ckpt-{s}.index", b"index")
    put(storage, f"{root}/checkpoints/eval/ckpt-{evaluated or step}.json",
        json.dumps({"step": evaluated or step, "metrics": metrics or METRICS}))
    put(storage, f"{root}/model/export.json", json.dumps({"default_signature": signature,
                                                         "checkpoint": f"ckpt-{step}"}))
    put(storage, f"{root}/model/saved_model.pb", b"pb")
    put(storage, f"{root}/model/label_map.pbtxt", "item { id: 1 name: 'Abyssinian' }\n")


def cpu(region: str) -> Serving:
    return Serving.from_flags(region, "n1-standard-4", None, 1, 2, 100)


def test_upload_sends_the_model_version_with_its_metrics_and_moves_the_candidate_alias(
        services):
    write_run(services.storage, "r1")
    said = vertex_serving.upload_model(services.cloud(), "r1")
    assert "AP50 0.970 at ckpt-1000 clears 0.500 (the newest: the run keeps no best " \
           "checkpoint (best/best.json))" in said
    parent = "projects/pets-detector-dev/locations/us-central1/models/pets-retinanet-mobilenet"
    assert f"uploaded as {parent}@1 (aliases: candidate)" in said
    (first,) = services.models.received
    assert first.parent == "projects/pets-detector-dev/locations/us-central1"
    assert first.model_id == "pets-retinanet-mobilenet" and not first.parent_model
    model = first.model
    assert model.artifact_uri == "gs://pets-data/runs/r1/model"
    # our serving image, built first (it was missing), by the digest its tag names
    (build,) = services.builds.requests
    assert build.build.substitutions["_SERVING_IMAGE"] == SERVING_IMAGE
    digest = services.registry.tags[tag_resource(SERVING_IMAGE)]
    assert model.container_spec.image_uri == with_digest(SERVING_IMAGE, digest)
    assert [p.container_port for p in model.container_spec.ports] == [8080]
    assert (model.container_spec.predict_route, model.container_spec.health_route) == (
        "/v1/models/detector:predict", "/v1/models/detector")
    assert dict(model.labels) == {"run": "r1", "experiment": "pets_retinanet_mobilenet",
                                  "step": "1000", "ap": "0_8352", "ap50": "0_9700",
                                  "ap75": "0_9000"}
    assert model.version_description == \
        "run r1, ckpt-1000: AP 0.8352, AP50 0.9700, AP75 0.9000"

    write_run(services.storage, "r2", step=2000)  # trained on a named dataset's version
    put(services.storage, "runs/r2/job.yaml", "target: vertex\nexperiment: "
        "pets_retinanet_mobilenet\ndataset: pets@v-20261201T000000Z-0a1b2c3d\n")
    vertex_serving.upload_model(services.cloud(), "r2", aliases="candidate,staging")
    second = services.models.received[1]
    assert (second.model.labels["dataset"], second.model.labels["dataset-version"]) == (
        "pets", "v-20261201t000000z-0a1b2c3d")  # issue 42: where its data came from
    assert second.parent_model == parent and not second.model_id
    assert second.model.container_spec == model.container_spec  # the image is not rebuilt
    assert len(services.builds.requests) == 1
    versions = {v.version_id: list(v.version_aliases) for v in services.models.versions[parent]}
    # the first version stays the default; the candidate alias moved to the new one
    assert versions == {"1": ["default"], "2": ["candidate", "staging"]}


def test_keep_asked_makes_the_version_keep_its_requests_images_where_label_push_reads(
        services):
    """`model.upload --keep-asked RATE`: the version's container gets the variables the
    serving image reads (serving/asked.py), naming the bucket's asked/MODEL/ that `label.push
    --asked MODEL` reads; a rate outside (0, 1], or Google's container, is refused before
    any request."""
    from serving.asked import Keeping

    write_run(services.storage, "r1")
    vertex_serving.upload_model(services.cloud(), "r1", keep_asked="0.05")
    environ = {v.name: v.value for v in services.models.received[-1].model.container_spec.env}
    assert Keeping.from_environ(environ) == Keeping(0.05, "pets-data",
                                                    "asked/pets-retinanet-mobilenet")
    for rate in ("0", "nan", "inf", "1.5", "-0.1", "half"):
        with pytest.raises(InputError, match=r"^--keep-asked"):
            vertex_serving.upload_model(services.cloud(), "r1", keep_asked=rate)
    with pytest.raises(InputError, match=r"only our serving image keeps asked images; drop "
                                         r"--container prebuilt or --keep-asked"):
        vertex_serving.upload_model(services.cloud(), "r1", keep_asked=0.5,
                                    container="prebuilt")
    assert len(services.models.received) == 1


def test_upload_gpu_names_our_serving_images_gpu_build_by_digest_and_deploys_on_a_gpu(
        services):
    """Issue 41 item 1: `--gpu` serves on the serving image's GPU build from the same build of
    the same sources (same content hash), pinned by digest, with the contract's port and
    routes; a GPU deployment of that version is then accepted."""
    from serving import contract

    write_run(services.storage, "g1")
    said = vertex_serving.upload_model(services.cloud(), "g1", gpu=True)
    gpu_image = f"{REPOSITORY}/serving-gpu:{context_hash()}"
    (build,) = services.builds.requests
    assert build.build.substitutions["_SERVING_GPU_IMAGE"] == gpu_image
    assert build.build.substitutions["_SERVING_IMAGE"] == SERVING_IMAGE  # one build, both
    spec = services.models.received[-1].model.container_spec
    digest = services.registry.tags[tag_resource(gpu_image)]
    assert spec.image_uri == with_digest(gpu_image, digest) and spec.image_uri in said
    assert [p.container_port for p in spec.ports] == [contract.HTTP_PORT]
    assert (spec.predict_route, spec.health_route) == (contract.predict_route(),
                                                       contract.health_route())
    assert registry.serves_on_gpu(spec)
    request = aiplatform_v1.DeployModelRequest.from_json(vertex_serving.deploy(
        services.cloud(), "g1", lambda region: Serving.from_flags(
            region, "g2-standard-4", "NVIDIA_L4:1", 1, 1, 100), dry_run=True))
    assert request.deployed_model.dedicated_resources.machine_spec.accelerator_type.name == \
        "NVIDIA_L4"


def test_the_gate_refuses_a_run_without_a_final_evaluation_or_below_the_bar(services):
    cloud = services.cloud()
    write_run(services.storage, "late", step=1000, evaluated=500)
    with pytest.raises(registry.GateError, match=r"checkpoint ckpt-1000 \(the newest: .*\) "
                       r"has no evaluation \(newest: ckpt-500\).*invoke eval --target vertex "
                       r"--run-id late --once"):
        vertex_serving.upload_model(cloud, "late")
    write_run(services.storage, "weak", metrics={**METRICS, "AP50": 0.31})
    with pytest.raises(registry.GateError, match=r"its AP50 is 0\.310 at ckpt-1000 \(the "
                       r"newest: .*\), below 0\.500 \(the default of pets_retinanet_mobilenet\)"):
        vertex_serving.upload_model(cloud, "weak")
    assert "clears 0.300" in vertex_serving.upload_model(cloud, "weak", min_ap50=0.3)
    with pytest.raises(MissingError, match="run none has no checkpoint"):
        vertex_serving.upload_model(cloud, "none")
    assert len(services.models.received) == 1  # only the run that passed


def test_a_mask_experiment_is_gated_on_its_mask_ap50_and_labelled_with_its_mask_metrics(
        services):
    """Boxes found but masks poor: refused, naming mask_AP50; once they clear it, the
    version's labels and description carry the masks' AP beside the boxes'."""
    cloud = services.cloud()
    masks = {f"mask_{k}": v for k, v in METRICS.items()}
    write_run(services.storage, "blobs", experiment="pets_maskrcnn_resnetfpn",
              metrics={**METRICS, **masks, "mask_AP50": 0.2})
    with pytest.raises(registry.GateError, match=r"its mask_AP50 is 0\.200 at ckpt-1000 .*"
                       r"below 0\.500 \(the default of pets_maskrcnn_resnetfpn\)"):
        vertex_serving.upload_model(cloud, "blobs")
    write_run(services.storage, "no-masks", experiment="pets_maskrcnn_resnetfpn")
    with pytest.raises(registry.GateError, match=r"mask_AP is None, not a COCO metric"):
        vertex_serving.upload_model(cloud, "no-masks")  # evaluated without its masks
    assert not services.models.received

    write_run(services.storage, "shapes", experiment="pets_maskrcnn_resnetfpn",
              metrics={**METRICS, **masks, "mask_AP50": 0.8})
    said = vertex_serving.upload_model(cloud, "shapes")
    assert "mask_AP50 0.800 at ckpt-1000 clears 0.500" in said
    (sent,) = services.models.received
    assert sent.model_id == "pets-maskrcnn-resnetfpn"
    assert {k: v for k, v in sent.model.labels.items() if k.startswith("mask")} == {
        "mask_ap": "0_8352", "mask_ap50": "0_8000", "mask_ap75": "0_9000"}
    assert sent.model.version_description.endswith("mask_AP 0.8352, mask_AP50 0.8000, "
                                                   "mask_AP75 0.9000")


@pytest.mark.parametrize("value", [float("nan"), "0.9", True, 1.5, None, 10 ** 400])
def test_metrics_that_are_not_metrics_fail_the_gate(services, value):
    write_run(services.storage, "odd", metrics={**METRICS, "AP50": value})
    with pytest.raises(registry.GateError, match=r"AP50 is .* not a COCO metric"):
        vertex_serving.upload_model(services.cloud(), "odd")
    assert not services.models.received


def test_an_evaluation_nested_too_deeply_fails_the_gate_in_one_line(services):
    """Issue 27, case 5: a RecursionError in the reader is a named refusal."""
    write_run(services.storage, "deep")
    put(services.storage, "runs/deep/checkpoints/eval/ckpt-1000.json",
        "[" * 100_000 + "]" * 100_000)
    with pytest.raises(registry.GateError, match=r"ckpt-1000\.json is nested too deeply"):
        vertex_serving.upload_model(services.cloud(), "deep")
    assert not services.models.received


@pytest.mark.parametrize("run_file, message", [
    ("[" * 100_000 + "]" * 100_000, r"checkpoints/run\.json is nested too deeply to read$"),
    (json.dumps({"experiment": ["pets_retinanet_mobilenet"]}), r"names experiment .*, not "
                                                                r"one of ours$"),
    ("[]", r"run\.json is not a JSON object$"),
])
def test_a_hostile_run_json_is_one_line_for_upload_deploy_and_batch(services, run_file,
                                                                   message):
    """Issue 27, case 5: the run file that names the Model is read by the bounded reader
    wherever a task reads it (`model.upload`, `endpoint.deploy`, `predict --target vertex`)."""
    from launch.errors import UserError

    write_run(services.storage, "odd")
    put(services.storage, "runs/odd/checkpoints/run.json", run_file)
    cloud = services.cloud()
    for action in (lambda: vertex_serving.upload_model(cloud, "odd"),
                   lambda: vertex_serving.deploy(cloud, "odd", cpu),
                   lambda: vertex_serving.predict_batch(cloud, "odd", "gs://pets-data/images/*.jpg",
                                                        None, 0.3, cpu, poll_seconds=0)):
        with pytest.raises(UserError, match=message):
            action()
    assert not services.models.received and not services.vertex.batch_received


def test_a_model_exported_for_notebooks_is_refused_with_the_command_that_fixes_it(services):
    write_run(services.storage, "r1", signature="uint8")
    with pytest.raises(registry.GateError, match="invoke export --run-id r1 --checkpoint best "
                       "--output-dir gs://pets-data/runs/r1/model --default-signature bytes"):
        vertex_serving.upload_model(services.cloud(), "r1")


def test_upload_gates_the_best_checkpoint_and_its_export_must_be_of_it(services):
    """A run that keeps a best checkpoint (best/best.json) is gated, and uploaded, at that
    checkpoint; its model must have been exported from it, or from the one --checkpoint names."""
    write_run(services.storage, "r1", step=1000)
    put(services.storage, "runs/r1/checkpoints/eval/ckpt-500.json",
        json.dumps({"step": 500, "metrics": {**METRICS, "AP": 0.9}}))
    put(services.storage, "runs/r1/checkpoints/best/best.json", json.dumps({
        "step": 500, "metric": "AP", "value": 0.9, "goal": "maximize",
        "checkpoint": "ckpt-500", "evaluated_at": "2026-11-24T10:00:00+00:00"}))
    cloud = services.cloud()
    with pytest.raises(registry.GateError, match=r"runs/r1/model was exported from ckpt-1000, "
                       r"not ckpt-500 \(the best, AP 0\.9000 at step 500\): export that "
                       r"checkpoint there with `invoke export --run-id r1 --checkpoint best "):
        vertex_serving.upload_model(cloud, "r1")
    said = vertex_serving.upload_model(cloud, "r1", checkpoint="latest")
    assert "AP50 0.970 at ckpt-1000 clears 0.500 (the newest, as asked)" in said
    with pytest.raises(MissingError, match=r"run r1 has no checkpoint ckpt-600 \(the newest "
                                           r"is ckpt-1000\)"):
        vertex_serving.upload_model(cloud, "r1", checkpoint="600")
    with pytest.raises(InputError, match=r"--checkpoint 'gs://x/ckpt-5': give best"):
        vertex_serving.upload_model(cloud, "r1", checkpoint="gs://x/ckpt-5")
    put(services.storage, "runs/r1/model/export.json",
        json.dumps({"default_signature": "bytes", "checkpoint": "ckpt-500"}))
    said = vertex_serving.upload_model(cloud, "r1")
    assert "at ckpt-500 clears 0.500 (the best, AP 0.9000 at step 500)" in said
    assert services.models.received[-1].model.labels["step"] == "500"


def test_a_dry_run_prints_the_request_and_sends_nothing(services, capsys):
    write_run(services.storage, "r1")
    said = vertex_serving.upload_model(services.cloud(region="europe-west4"), "r1", gpu=True,
                                       dry_run=True, container="prebuilt")
    request = json.loads(said[said.index("{"):])
    spec = request["model"]["containerSpec"]
    assert spec["imageUri"] == "europe-docker.pkg.dev/vertex-ai/prediction/tf2-gpu.2-15:latest"
    assert (spec["ports"], spec["predictRoute"]) == ([], "")  # Vertex AI knows its own
    assert request["modelId"] == "pets-retinanet-mobilenet"

    said = vertex_serving.upload_model(services.cloud(), "r1", dry_run=True)  # our image: not built
    spec = json.loads(said[said.index("{"):])["model"]["containerSpec"]
    assert spec["imageUri"] == SERVING_IMAGE
    assert "note: images shown by tag, not digest (" in capsys.readouterr().err
    digest = services.registry.push(SERVING_IMAGE)
    said = vertex_serving.upload_model(services.cloud(), "r1", dry_run=True)
    spec = json.loads(said[said.index("{"):])["model"]["containerSpec"]
    assert spec["imageUri"] == with_digest(SERVING_IMAGE, digest)  # once it exists
    assert not services.models.received and not services.builds.requests


def test_upload_refuses_a_prebuilt_container_on_and_after_its_end_of_availability(services):
    """tf2-*.2-15 ends on 2027-01-14 (catalogue.yaml, from Google's page): refused in one
    line that names the date, the page and the fix, before any request."""
    write_run(services.storage, "r1")
    cloud = services.cloud(region="europe-west4")
    the_day_before = datetime.date(2027, 1, 13)
    assert "tf2-gpu.2-15" in vertex_serving.upload_model(cloud, "r1", gpu=True, dry_run=True,
                                                         container="prebuilt", today=the_day_before)
    for day in (datetime.date(2027, 1, 14), datetime.date(2030, 6, 1)):
        with pytest.raises(lifecycle.EndedError) as refused:
            vertex_serving.upload_model(cloud, "r1", gpu=True, container="prebuilt", today=day)
        (line,) = str(refused.value).splitlines()
        assert line.startswith("tf2-gpu.2-15 (TensorFlow 2.15 prebuilt prediction containers) "
                               "is no longer offered: its end of availability was 2027-01-14 "
                               "(https://docs.cloud.google.com/gemini-enterprise-agent-"
                               "platform/machine-learning/predictions/")
        assert "serve on the project's own serving image, the default" in line
    assert not services.models.received
    ours = "us-central1-docker.pkg.dev/p/pets-images/serving@sha256:" + "0" * 64
    assert lifecycle.check_offered(ours, datetime.date(2030, 6, 1)) == ours  # no end known


def test_deploy_shares_traffic_with_the_version_deployed_and_undeploy_gives_it_back(services):
    cloud = services.cloud()
    put(services.storage, "runs/r2/job.yaml", "target: vertex\nexperiment: "
        "pets_retinanet_mobilenet\ndataset: pets@v-20261201T000000Z-0a1b2c3d\n")
    for run in ("r1", "r2"):
        write_run(services.storage, run)
        vertex_serving.upload_model(cloud, run)
    said = vertex_serving.deploy(cloud, "r1", cpu)
    (endpoint,) = services.endpoints.endpoints.values()
    assert endpoint.display_name == "pets-detector" and f"to {endpoint.name}" in said
    first = services.endpoints.received[1]  # after the endpoint's creation
    assert first.traffic_split == {"0": 100}
    deployed = first.deployed_model
    assert deployed.model.endswith("/models/pets-retinanet-mobilenet@1")
    assert deployed.service_account == OUTPUTS.serving_service_account
    assert deployed.dedicated_resources.machine_spec.machine_type == "n1-standard-4"
    assert (deployed.dedicated_resources.min_replica_count,
            deployed.dedicated_resources.max_replica_count) == (1, 2)

    old_id = endpoint.deployed_models[0].id
    vertex_serving.deploy(cloud, "r2", lambda region: Serving.from_flags(
        region, "n1-standard-4", None, 1, 1, 20), endpoint=endpoint.name.rsplit("/", 1)[-1])
    assert services.endpoints.received[-1].traffic_split == {"0": 20, old_id: 80}
    listed = vertex_serving.list_endpoints(cloud)
    assert "pets-retinanet-mobilenet@1  80%  n1-standard-4 x 1-2  (r1)" in listed
    assert "pets-retinanet-mobilenet@2  20%" in listed
    # issue 42, `runs.show --target vertex`: where each serving version came from
    assert vertex_serving.origins(cloud).splitlines() == [
        "pets-detector 80%: pets-retinanet-mobilenet@1 <- run r1 ckpt-1000 (AP50 0.9700) <- "
        "its data not recorded (a data directory)",
        "pets-detector 20%: pets-retinanet-mobilenet@2 <- run r2 ckpt-1000 (AP50 0.9700) <- "
        "dataset pets version v-20261201T000000Z-0a1b2c3d"]

    said = vertex_serving.undeploy(cloud, endpoint.name.rsplit("/", 1)[-1], old_id)
    new_id = next(d.id for d in endpoint.deployed_models)
    assert services.endpoints.received[-1].traffic_split == {new_id: 100}
    assert f"traffic {new_id}: 100%" in said
    with pytest.raises(InputError, match="has no deployed model 'nope'"):
        vertex_serving.undeploy(cloud, endpoint.name, "nope")


def test_deploy_checks_the_machine_and_the_container_before_any_request(services):
    cloud = services.cloud()
    write_run(services.storage, "r1")
    vertex_serving.upload_model(cloud, "r1")

    def gpu(region: str) -> Serving:
        return Serving.from_flags(region, "g2-standard-4", "NVIDIA_L4:1", 1, 1, 100)

    with pytest.raises(InputError, match=r"serves on a CPU container .* upload it with "
                       r"--gpu \(our serving image's GPU build\)"):
        vertex_serving.deploy(cloud, "r1", gpu)
    with pytest.raises(InputError, match="nothing is deployed on this endpoint"):
        vertex_serving.deploy(cloud, "r1", lambda region: Serving.from_flags(
            region, "n1-standard-4", None, 1, 1, 50))
    write_run(services.storage, "r9")
    with pytest.raises(MissingError, match=r"invoke model.upload --run-id r9"):
        vertex_serving.deploy(cloud, "r9", cpu)
    assert not [r for r in services.endpoints.received
                if isinstance(r, aiplatform_v1.DeployModelRequest)]


@pytest.mark.parametrize("flags, message", [
    (("n1-standard-4", None, 0, 1, 100), "replicas"),
    (("n1-standard-4", None, 3, 2, 100), "replicas"),
    (("n1-standard-4", None, 1, 1, 101), "--traffic is a percentage"),
    (("ct5lp-hightpu-4t", None, 1, 1, 100), "serve on CPU or GPU machines"),
    (("n1-standard-4", "NVIDIA_L4:1", 1, 1, 100), "L4"),
])
def test_serving_flags_that_cannot_work_are_named(flags, message):
    with pytest.raises(InputError, match=message):
        Serving.from_flags("us-central1", *flags)


@pytest.mark.parametrize("current, traffic, expected", [
    ({}, 100, {"0": 100}),
    ({"a": 100}, 10, {"0": 10, "a": 90}),
    ({"a": 50, "b": 50}, 33, {"0": 33, "a": 34, "b": 33}),
    ({"a": 1, "b": 2}, 0, {"0": 0, "a": 33, "b": 67}),
])
def test_traffic_splits_always_add_up(current, traffic, expected):
    split = split_with_new(current, traffic)
    assert split == expected and sum(split.values()) == 100


def test_undeploying_gives_the_share_to_the_rest():
    assert split_without({"a": 20, "b": 40, "c": 40}, "a") == {"b": 50, "c": 50}
    assert split_without({"a": 100, "b": 0}, "a") == {"b": 100}
    assert split_without({"a": 100}, "a") == {}


PREDICTION = {"num_detections": 2, "detection_boxes": [[0.1, 0.2, 0.5, 0.6], [0, 0, 1.2, 1],
                                                       [0, 0, 0, 0]],
              "detection_classes": [3, 1, 0], "detection_scores": [0.9, 0.4, 0.0]}


def test_predictions_from_a_server_are_checked_before_they_are_drawn():
    found = answers.detections(PREDICTION)
    assert found.classes.tolist() == [3, 1] and found.boxes.max() == 1.0  # clipped
    for bad in ({**PREDICTION, "num_detections": 5}, {**PREDICTION, "num_detections": True},
                {**PREDICTION, "num_detections": float("nan")},
                {**PREDICTION, "detection_scores": [float("inf"), 0.4, 0]},
                {**PREDICTION, "detection_classes": [1e40, 1, 0]},
                {**PREDICTION, "detection_classes": [1.5, 1, 0]},
                {**PREDICTION, "detection_boxes": [[0.1, 0.2]]},
                {k: v for k, v in PREDICTION.items() if k != "detection_boxes"}):
        with pytest.raises(answers.BadAnswer):
            answers.detections(bad)


def test_a_mask_models_answer_keeps_its_masks_checked_and_cut_at_num_detections():
    masks = np.full((3, 28, 28), 0.25)
    masks[0, 7:21, 7:21] = 1.5  # clipped to 1
    found = answers.detections({**PREDICTION, "detection_masks": masks.tolist()})
    assert found.masks.shape == (2, 28, 28) and found.masks.max() == 1.0
    assert answers.detections(PREDICTION).masks is None  # a box-only model's answer
    for bad in ([[0.5]], masks[:1].tolist(), masks[:, :, :14].tolist(), "masks",
                [[[0.5, 0.5], [0.5]]] * 2, np.full((2, 300, 300), 0.5).tolist(),
                np.where(masks == 0.25, float("nan"), masks).tolist()):
        with pytest.raises(answers.BadAnswer, match="mask"):
            answers.detections({**PREDICTION, "detection_masks": bad})


def test_batch_results_are_read_by_file_and_odd_lines_are_not_trusted():
    lines = [json.dumps({"instance": "gs://b/a.jpg", "prediction": PREDICTION}),
             json.dumps({"instance": "gs://b/bad.jpg", "error": "Invalid JPEG data"}),
             json.dumps({"instance": "gs://b/odd.jpg", "prediction": {"num_detections": 9}}),
             json.dumps({"instance": {"b64": "..."}, "prediction": PREDICTION}),
             "not json", ""]
    found, errors = answers.batch_results(lines)
    assert set(found) == {"gs://b/a.jpg"}
    assert errors["gs://b/bad.jpg"] == "Invalid JPEG data"
    assert "gs://b/odd.jpg" in errors


def test_an_image_too_large_for_an_online_request_is_refused_alone():
    from PIL import Image

    big = Picture("big.png", Image.new("RGB", (1, 1)), np.random.default_rng(0).bytes(1_300_000))
    with pytest.raises(ImageRefused, match=r"1.3 MB encoded is more than a Vertex AI online "
                       r"request takes .* --target vertex"):
        answers.instance(big)


def test_batch_inputs_are_the_folders_matching_files_and_skip_names_that_break_a_line(
        services):
    for name in ("images/a.jpg", "images/b.jpg", "images/c.png", "images/sub/d.jpg",
                 "images/evil\nname.jpg"):
        put(services.storage, name, b"x")
    uris = vertex_serving.batch_inputs(services.storage, "gs://pets-data/images/*.jpg")
    assert uris == ["gs://pets-data/images/a.jpg", "gs://pets-data/images/b.jpg"]
    with pytest.raises(InputError, match="no object matches"):
        vertex_serving.batch_inputs(services.storage, "gs://pets-data/images/*.gif")


def test_the_batch_job_is_a_file_list_job_on_the_serving_identity(services, capsys):
    cloud = services.cloud()
    write_run(services.storage, "r1")
    vertex_serving.upload_model(cloud, "r1")
    put(services.storage, "images/a.jpg", b"not an image")
    capsys.readouterr()
    # issue 38 item 7: a dry run prints the request and writes and submits nothing
    said = vertex_serving.predict_batch(cloud, "r1", "gs://pets-data/images/*.jpg", None, 0.3, cpu,
                                        dry_run=True)
    # issue 41 item 5: priced from the pinned table's sourced prediction rows
    assert capsys.readouterr().err.startswith(
        "cost: 0.22 USD/h (1 x n1-standard-4 at 0.2186/h); at most 10.49 USD (0.44 USD/h at 2 "
        "replicas x 24 h timeout)\n      unconfirmed: n1 vCPUs, n1 memory from "
        "https://cloud.google.com/vertex-ai/pricing")
    first, text = said.split("\n", 1)
    assert first.startswith("1 image(s) with ") and first.endswith(
        "/inputs.txt not written, nothing submitted")
    shown = aiplatform_v1.BatchPredictionJob.from_json(text)
    assert shown.model.endswith("/models/pets-retinanet-mobilenet@1")
    assert services.vertex.batch_received == []
    assert not list(services.storage.list_blobs("pets-data", prefix="runs/r1/batch/"))
    services.vertex.batch_runner = None  # the job only: no model runs here
    with pytest.raises(StepFailed, match=r"batch prediction .* wrote no results"):
        vertex_serving.predict_batch(cloud, "r1", "gs://pets-data/images/*.jpg", None, 0.3, cpu,
                                     poll_seconds=0, say=lambda text: None)
    (request,) = services.vertex.batch_received
    job = request.batch_prediction_job
    assert job.model.endswith("/models/pets-retinanet-mobilenet@1")
    assert job.input_config.instances_format == "file-list"
    (listing,) = job.input_config.gcs_source.uris
    assert listing.startswith("gs://pets-data/runs/r1/batch/") and listing.endswith(
        "/inputs.txt")
    assert job.output_config.predictions_format == "jsonl"
    assert job.output_config.gcs_destination.output_uri_prefix == \
        listing.removesuffix("inputs.txt")
    assert job.service_account == OUTPUTS.serving_service_account
    assert job.dedicated_resources.machine_spec.machine_type == "n1-standard-4"
    assert job.dedicated_resources.max_replica_count == 2
    assert job.labels["run"] == "r1"
    name = listing.removeprefix("gs://pets-data/")
    assert services.storage.bucket("pets-data").blob(name).download_as_text() == \
        "gs://pets-data/images/a.jpg\n"


def test_deploy_prints_its_price_per_hour_and_month_and_max_cost_refuses_first(
        services, serving_prices, capsys):
    cloud = services.cloud()
    write_run(services.storage, "r1")
    vertex_serving.upload_model(cloud, "r1")

    def autoscaled(region: str) -> Serving:
        return Serving.from_flags(region, "n1-standard-4", None, 1, 3, 100)

    with pytest.raises(OverBudget, match=r"^the endpoint can cost up to 569\.40 USD a month "
                       r"\(3 replicas x 0\.26 USD/h x 730 h\), over --max-cost 400: lower "
                       r"--max-replicas to 2$"):
        vertex_serving.deploy(cloud, "r1", autoscaled, max_cost="400")
    with pytest.raises(OverBudget, match=r"choose a cheaper machine \(1 replica cost 189\.80 "
                       r"USD a month\)"):
        vertex_serving.deploy(cloud, "r1", autoscaled, max_cost=100)
    assert services.endpoints.received == []  # refused before any endpoint request
    capsys.readouterr()
    vertex_serving.deploy(cloud, "r1", autoscaled, max_cost=600)
    assert capsys.readouterr().err == (
        "replicas: autoscaling 1 to 3 replicas at 60% CPU utilization (Vertex AI's default)\n"
        "cost: 0.26 USD/h, 189.80 USD/month (1 x n1-standard-4 at 0.2600/h); at most 0.78 "
        "USD/h, 569.40 USD/month autoscaling to 3 replicas\n")
    vertex_serving.deploy(cloud, "r1", cpu, dry_run=True)  # one replica always: no maximum
    assert capsys.readouterr().err.startswith(
        "replicas: autoscaling 1 to 2 replicas at 60% CPU utilization (Vertex AI's default)\n"
        "cost: 0.26 USD/h, 189.80 USD/month (1 x n1-standard-4 at 0.2600/h); at most 0.52")


def test_deploy_says_the_price_is_unknown_and_max_cost_cannot_be_checked(services, capsys):
    """The pinned table has no prediction prices until `invoke pricing.refresh` runs (no
    page could be read for them): the price is unknown, and a budget refuses."""
    from launch.stores.pricing.table import PriceMissing, PriceTable

    if "europe-west4" in PriceTable.load().regions("prediction"):
        pytest.skip("the pinned table has prediction prices for europe-west4 now")
    cloud = services.cloud(region="europe-west4")
    with pytest.raises(PriceMissing, match=r"--max-cost cannot be checked: no prediction "
                                           r"prices for europe-west4"):
        vertex_serving.deploy(cloud, "r1", cpu, max_cost=10)
    assert services.endpoints.received == []
    write_run(services.storage, "r1")
    vertex_serving.upload_model(cloud, "r1")
    vertex_serving.deploy(cloud, "r1", cpu, dry_run=True)
    assert "\ncost: unknown (no prediction prices for europe-west4 in prices.yaml: run " \
           "`invoke pricing.refresh`" in capsys.readouterr().err


class Clock:
    """time for launch.targets.vertex.serving: each reading an hour after the last, so the
    shortest timeout (one minute) has passed at the first poll."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        self.now += 3600
        return self.now

    @staticmethod
    def sleep(seconds: float) -> None:
        pass


def test_a_batch_job_prints_its_bound_is_refused_over_budget_and_cancelled_at_its_timeout(
        services, serving_prices, capsys, monkeypatch):
    cloud = services.cloud()
    write_run(services.storage, "r1")
    vertex_serving.upload_model(cloud, "r1")
    put(services.storage, "images/a.jpg", b"not an image")
    with pytest.raises(OverBudget, match=r"^the batch job can cost up to 5\.20 USD \(2 "
                       r"replicas x 0\.26 USD/h x 10 h timeout\), over --max-cost 5: lower "
                       r"--timeout-hours to 9\.62 or less, lower --max-replicas, or choose a "
                       r"cheaper machine$"):
        vertex_serving.predict_batch(cloud, "r1", "gs://pets-data/images/*.jpg", None, 0.3, cpu,
                                     timeout_hours="10", max_cost="5")
    assert services.vertex.batch_received == []
    assert not list(services.storage.list_blobs("pets-data", prefix="runs/r1/batch/"))
    assert capsys.readouterr().err == ("cost: 0.26 USD/h (1 x n1-standard-4 at 0.2600/h); at "
                                       "most 5.20 USD (0.52 USD/h at 2 replicas x 10 h "
                                       "timeout)\n")
    for short in ("-1", "1e-9"):  # under a minute: 1e-9 h is 3.6 microseconds
        with pytest.raises(InputError, match=rf"^--timeout-hours must be at least 1 minute "
                                             rf"\(0\.0167 h\), got '{short}'$"):
            vertex_serving.predict_batch(cloud, "r1", "gs://pets-data/images/*.jpg", None, 0.3, cpu,
                                         timeout_hours=short)
    assert services.vertex.batch_received == []
    said: list[str] = []
    monkeypatch.setattr(vertex_serving, "time", Clock())
    with pytest.raises(StepFailed, match=r"ended JOB_STATE_CANCELLED"):
        vertex_serving.predict_batch(cloud, "r1", "gs://pets-data/images/*.jpg", None, 0.3, cpu,
                                     poll_seconds=0, say=said.append, timeout_hours="0.0167")
    assert said[1:] == ["  running", "  cancelling: 0.0167 h (--timeout-hours) have passed",
                        "  cancelled"]
    assert len(services.vertex.batch_received) == 1


def test_the_online_request_limit_is_the_documented_one_and_a_half_million_bytes():
    """1.5 MB (https://cloud.google.com/sdk/gcloud/reference/ai/endpoints/predict) is
    1,500,000 bytes: the base64 of a file plus the JSON around it must fit."""
    from PIL import Image

    assert answers.MAX_REQUEST_BYTES == 1_500_000

    def picture(size: int) -> Picture:
        return Picture("p.jpg", Image.new("RGB", (1, 1)), bytes(size))

    fits = 1_499_936 // 4 * 3  # base64: 1,499,936 bytes, + the 64 of the envelope
    assert len(answers.instance(picture(fits))["b64"]) + answers.ENVELOPE_BYTES == 1_500_000
    with pytest.raises(ImageRefused, match=r"1\.1 MB encoded is more than a Vertex AI online "
                                           r"request takes \(1\.5 MB after base64\)"):
        answers.instance(picture(fits + 1))  # was accepted at 1.5 MiB (1,572,864 bytes)


@pytest.mark.parametrize("args, message", [
    (["endpoint.deploy", "--run-id=r1", "--min-replicas=0"], "replicas: need 1 <="),
    (["endpoint.deploy", "--run-id=r1", "--traffic=150"], "--traffic is a percentage"),
    (["endpoint.deploy", "--run-id=r1", "--max-replicas=3", "--target-utilization=0"],
     "--target-utilization is a percentage, 1 to 100, got 0"),
    (["endpoint.deploy", "--run-id=r1", "--max-replicas=3", "--target-utilization=101"],
     "--target-utilization is a percentage, 1 to 100, got 101"),
    (["endpoint.deploy", "--run-id=r1", "--target-utilization=50"],
     "there is nothing to scale; raise --max-replicas"),
    (["endpoint.deploy", "--run-id=r1", "--max-replicas=3", "--target-utilization=lots"],
     "--target-utilization must be a whole number"),
    (["endpoint.deploy", "--run-id=r1", "--machine-type=ct5lp-hightpu-4t"],
     "serve on CPU or GPU machines"),
    (["model.upload", "--run-id=../x"], "is not a run id"),
    (["model.upload", "--run-id=r1", "--aliases=Bad Alias"], "is not a version alias"),
    (["model.upload", "--run-id=r1", "--container=docker"],
     "--container 'docker': give custom (our TF Serving image"),
    (["predict", "--target=vertex"], "pass --run-id"),
    (["predict", "--target=vertex", "--run-id=r1", "--images=photos/*.jpg"],
     "batch prediction reads the bucket"),
    (["endpoint.deploy", "--run-id=r1", "--max-cost=0"], "--max-cost must be more than 0"),
    (["endpoint.deploy", "--run-id=r1", "--max-cost=ten"], "--max-cost must be a number"),
    (["endpoint.deploy", "--run-id=r1", "--max-cost=0.01"], "--max-cost"),  # over, or unknown
    (["predict", "--target=vertex", "--run-id=r1", "--images=gs://b/*.jpg",
      "--timeout-hours=0"], "--timeout-hours must be at least 1 minute (0.0167 h)"),
    (["predict", "--endpoint=1", "--max-pixels=0"], "--max-pixels must be at least 1, got 0"),
    (["predict", "--target=vertex", "--run-id=r1", "--max-pixels=many"],
     "--max-pixels must be a whole number"),
    (["predict", "--max-pixels=200000000"], "--max-pixels must be at most 178,956,970"),
    (["export", "--quantize=int8"], "--quantize applies to --format tflite"),
    (["export", "--format=tflite", "--force=x"], "--force applies to --quantize int8"),
    (["export", "--format=tflite", "--quantize=int8", "--max-int8-drop=2"],
     "--max-int8-drop must be"),
    (["export", "--format=tensorrt"],
     "--format must be one of saved_model, tflite, onnx, openvino"),
    (["export", "--format=tflite", "--default-signature=bytes"],
     "a .tflite, .onnx or OpenVINO model takes decoded pixels"),
])
def test_serving_tasks_refuse_flags_that_cannot_work_before_any_request(args, message):
    """Through invoke's own parser, with no credentials at all: the refusal comes first."""
    result = invoke(*args, "--project=p", "--region=us-central1", "--bucket=bkt") \
        if args[0] != "export" else invoke(*args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr


NO_CREDENTIALS = {  # settings as a researcher's environment gives them, and no credentials
    "PETS_PROJECT": "p", "PETS_REGION": "us-central1", "PETS_BUCKET": "bkt",
    "PETS_SERVING_IMAGE": f"{REPOSITORY}/serving:deployed",
    "PETS_SERVING_GPU_IMAGE": f"{REPOSITORY}/serving-gpu:deployed",
    "PETS_SERVING_SERVICE_ACCOUNT": OUTPUTS.serving_service_account,
    "GOOGLE_APPLICATION_CREDENTIALS": str(REPO / "work" / "none.json")}


def invoke(*args: str) -> cli.Ran:
    """`invoke ARGS` in this process, with the settings above."""
    return cli.invoke(*args, env=NO_CREDENTIALS)


def test_upload_dry_run_without_credentials_prints_our_container_as_it_serves():
    """The request names these sources' serving image by its content-hash tag, with the port
    and routes the image serves: Vertex AI's variables from this ContainerSpec configure the
    entrypoint the Dockerfile runs, and TF Serving answers exactly these routes."""
    from serving import contract, entrypoint
    from tests.fakes.tf_serving import parse_flags
    from tests.test_container import stage_instructions

    result = invoke("model.upload", "--run-id=r1", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "note: run r1 not read (" in result.stderr  # the gate needs the bucket
    assert "note: images shown by tag, not digest (" in result.stderr
    # issue 41 item 6: the request alone on stdout (`| python -m json.tool` reads it)
    assert "run r1: not read, not gated\naliases: candidate\n" in result.stderr
    json.loads(result.stdout)
    request = aiplatform_v1.UploadModelRequest.from_json(result.stdout)
    assert request.parent == "projects/p/locations/us-central1"
    assert request.model.artifact_uri == "gs://bkt/runs/r1/model"
    spec = request.model.container_spec
    assert spec.image_uri == SERVING_IMAGE

    (port,) = [p.container_port for p in spec.ports]
    stage = stage_instructions()["serving"]
    assert stage["EXPOSE"] == [str(port)]
    assert stage["ENTRYPOINT"] == ['["python3", "-m", "serving"]']  # serving/entrypoint.py
    vertex = {"AIP_HTTP_PORT": str(port), "AIP_PREDICT_ROUTE": spec.predict_route,
              "AIP_HEALTH_ROUTE": spec.health_route, "AIP_STORAGE_URI": "gs://b/runs/r1/model"}
    settings = entrypoint.Settings.from_environ(vertex)
    flags = parse_flags(entrypoint.server_command(settings, REPO / "unused",
                                                  REPO / "batching.txt"))
    assert settings.port == port  # the request front's, with TF Serving's REST API behind it
    assert flags["rest_api_port"] == str(contract.REST_PORT) != str(port)
    # TF Serving's REST API for the model it serves
    assert spec.predict_route == f"/v1/models/{flags['model_name']}:predict"
    assert spec.health_route == f"/v1/models/{flags['model_name']}"


def test_deploy_dry_run_shows_autoscaling_and_the_price_range_with_its_source():
    """Issue 41 items 4 and 5: the pinned table's sourced prediction prices price the dry
    run; --target-utilization becomes the deployment's autoscaling metric (CPU, or the GPU's
    duty cycle with an accelerator), and the range from --min- to --max-replicas is shown."""
    result = invoke("endpoint.deploy", "--run-id=r1", "--dry-run", "--min-replicas=1",
                    "--max-replicas=3", "--target-utilization=70")
    assert result.returncode == 0, result.stderr
    err = result.stderr
    assert "replicas: autoscaling 1 to 3 replicas at 70% CPU utilization\n" in err
    # n1-standard-4: 4 vCPUs x 0.03635495 + 15 GB x 0.0048783 = 0.2186/h
    assert "cost: 0.22 USD/h, 159.57 USD/month (1 x n1-standard-4 at 0.2186/h); at most " \
           "0.66 USD/h, 478.72 USD/month autoscaling to 3 replicas" in err
    assert "unconfirmed: n1 vCPUs, n1 memory from https://cloud.google.com/vertex-ai/pricing " \
           "(prediction, Iowa" in err and "read 2022-08-20" in err
    resources = aiplatform_v1.DeployModelRequest.from_json(
        result.stdout).deployed_model.dedicated_resources
    (spec,) = resources.autoscaling_metric_specs
    assert (spec.metric_name, spec.target) == (endpoints.CPU_UTILIZATION, 70)

    gpu = invoke("endpoint.deploy", "--run-id=r1", "--dry-run", "--accelerator=NVIDIA_TESLA_T4:1",
                 "--max-replicas=2", "--target-utilization=50")
    assert gpu.returncode == 0, gpu.stderr
    assert "autoscaling 1 to 2 replicas at 50% GPU duty cycle" in gpu.stderr
    assert "(1 x n1-standard-4 + NVIDIA_TESLA_T4:1 at 0.6210/h)" in gpu.stderr
    (spec,) = aiplatform_v1.DeployModelRequest.from_json(
        gpu.stdout).deployed_model.dedicated_resources.autoscaling_metric_specs
    assert (spec.metric_name, spec.target) == (endpoints.GPU_DUTY_CYCLE, 50)
    fixed = invoke("endpoint.deploy", "--run-id=r1", "--dry-run")
    assert "replicas: 1 replica(s), no autoscaling" in fixed.stderr
    assert not aiplatform_v1.DeployModelRequest.from_json(
        fixed.stdout).deployed_model.dedicated_resources.autoscaling_metric_specs


def test_deploy_dry_run_without_credentials_prints_the_request():
    result = invoke("endpoint.deploy", "--run-id=r1", "--dry-run", "--endpoint=1001",
                    "--min-replicas=1", "--max-replicas=3", "--traffic=20")
    assert result.returncode == 0, result.stderr
    assert "note: run r1's registered version not read (" in result.stderr
    assert "note: the endpoint not read (" in result.stderr
    request = aiplatform_v1.DeployModelRequest.from_json(result.stdout)
    assert request.endpoint == "projects/p/locations/us-central1/endpoints/1001"
    assert request.traffic_split == {"0": 20}
    deployed = request.deployed_model
    assert deployed.service_account == OUTPUTS.serving_service_account
    assert deployed.display_name == "r1" and deployed.model == ""
    assert deployed.dedicated_resources.machine_spec.machine_type == "n1-standard-4"
    assert (deployed.dedicated_resources.min_replica_count,
            deployed.dedicated_resources.max_replica_count) == (1, 3)
