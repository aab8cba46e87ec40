"""Real training on CPU: metrics, concurrent continuous evaluation, resume after kill -9,
two workers on 127.0.0.1, export and prediction. Minutes, not seconds: marked slow."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tests.conftest import (
    AP50_BOUND,
    HANG,
    REPO,
    SERVED_MAX_DETECTIONS,
    SERVED_MIN_SCORE,
    TRAIN_STEPS,
    data_flags,
    trainer_here,
    trainer_process,
)
from trainer.cli.main import main

pytestmark = pytest.mark.slow
# Fresh sample images: the top detection finds the pet (IoU > 0.5) and its breed on 80%
FRESH_IMAGES, FRESH_BAR = 30, 0.8


def test_training_reaches_the_ap50_bound(trained):
    model_dir, _, _ = trained
    result = json.loads((model_dir / "eval" / f"ckpt-{TRAIN_STEPS}.json").read_text())
    print(f"AP50 after {TRAIN_STEPS} steps: {result['metrics']['AP50']:.3f}")
    assert result["metrics"]["AP50"] >= AP50_BOUND
    assert 0 <= result["metrics"]["AP"] <= result["metrics"]["AP50"]


def test_training_records_its_speed_for_cost_estimates(trained):
    from launch.stores.pricing.estimate import speed_of

    model_dir, _, _ = trained
    summary = json.loads((model_dir / "training_summary.json").read_text())
    assert summary["experiment"] == "pets_retinanet_mobilenet"
    assert summary["hardware"] == "this CPU x 1" and summary["steps"] == TRAIN_STEPS
    assert 0 < summary["seconds_per_step"] == pytest.approx(summary["seconds"] / TRAIN_STEPS,
                                                            rel=1e-3)
    print(f"this CPU: {summary['seconds_per_step']:.3f} s/step")
    assert speed_of([summary], summary["experiment"], "this CPU x 1").runs == 1


def test_continuous_eval_ran_beside_training_and_exited_after_the_final_checkpoint(trained):
    _, _, eval_out = trained
    steps = [int(line.split()[2].rstrip(":")) for line in eval_out.splitlines()
             if line.startswith("evaluated step")]
    assert steps == sorted(set(steps)) and steps[-1] == TRAIN_STEPS
    assert len(steps) >= 2  # it evaluated while training ran, not just at the end
    assert f"final checkpoint (step {TRAIN_STEPS}) evaluated" in eval_out


def test_eval_wrote_tensorboard_scalars_and_annotated_images(trained):
    model_dir, _, _ = trained
    tags, images = set(), []
    for event_file in (model_dir / "validation").glob("events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(str(event_file)):
            for value in event.summary.value:
                tags.add(value.tag)
                if "detections" in value.tag:
                    images.append(tf.make_ndarray(value.tensor))
    assert {"AP", "AP50", "AP75"} <= tags
    assert images and images[0].size >= 3  # width, height and at least one encoded image
    # the operating point: its threshold and scores, and the confusion matrix as a table
    assert {f"operating_point/{k}" for k in ("threshold", "precision", "recall", "f1")} | \
        {"confusion matrix"} <= tags


def test_restarted_eval_does_not_reevaluate_and_exits(trained):
    model_dir, records, _ = trained
    before = sorted(p.name for p in (model_dir / "eval").iterdir())
    result = trainer_here(*data_flags(records, model_dir), "--mode=continuous_eval",
                          f"--train_steps={TRAIN_STEPS}", "--eval_idle_timeout=5")
    assert "evaluated step" not in result.stdout
    assert sorted(p.name for p in (model_dir / "eval").iterdir()) == before


def test_export_signature_and_prediction_on_a_sample_image(exported, tmp_path):
    from PIL import Image

    from trainer.data import pets

    export_dir = exported
    signatures = tf.saved_model.load(str(export_dir)).signatures
    assert set(signatures) == {"serving_default", "serving_uint8", "serving_bytes"}
    serve = signatures["serving_uint8"]
    (spec,) = serve.structured_input_signature[1].values()
    assert spec.dtype == tf.uint8 and spec.shape.as_list() == [None, None, None, 3]
    kinds = json.loads((export_dir / "export.json").read_text())["signatures"]
    for name in signatures:  # a bytes signature adds each image's image_error
        assert set(signatures[name].structured_outputs) == {
            "detection_boxes", "detection_classes", "detection_scores", "num_detections",
            *(["image_error"] if kinds[name] == "bytes" else [])}
    assert (export_dir / "label_map.pbtxt").exists()

    from trainer.data.sample import write_sample

    # never seen in training; a bar over 30 images, not every one of 3: one model in a few
    # runs took a Russian Blue for an Abyssinian (measured: 149 of 150 right, 2026-11-27)
    data = write_sample(tmp_path / "fresh", num_images=FRESH_IMAGES, seed=99)
    out = tmp_path / "predictions"
    # the container's command, in this process: TensorFlow is loaded here already
    assert main(["predict", f"--model={export_dir}", f"--images={data}/images/*.jpg",
                 f"--output_dir={out}"]) == 0
    report = json.loads((out / "detections.json").read_text())
    assert len(report["images"]) == FRESH_IMAGES
    missed = []
    for entry in report["images"]:
        name = Path(entry["image"]).stem
        assert Path(entry["annotated"]).exists()
        with Image.open(pets.trimap_path(data, name)) as trimap:  # trained on whole pets
            gt = np.array(pets.mask_bounds(pets.pet_mask(trimap)))
        if not entry["detections"]:  # none scored 0.3: one image in 30, some runs
            missed.append((name, None))
            continue
        top = max(entry["detections"], key=lambda d: d["score"])
        ymin, xmin, ymax, xmax = top["box"]
        box = np.array([xmin * entry["width"], ymin * entry["height"],
                        xmax * entry["width"], ymax * entry["height"]])
        inter = np.prod(np.clip(np.minimum(box[2:], gt[2:]) - np.maximum(box[:2], gt[:2]), 0,
                                None))
        union = np.prod(box[2:] - box[:2]) + np.prod(gt[2:] - gt[:2]) - inter
        if not (inter / union > 0.5 and top["class"] == pets.breed_of(name)):
            missed.append((name, top))
    assert len(missed) <= FRESH_IMAGES * (1 - FRESH_BAR), missed


def test_the_bytes_signature_answers_like_the_uint8_one_and_options_bound_it(
        trained, exported, tmp_path):
    """`serving_bytes` takes encoded files (as TF Serving's REST API feeds them from b64),
    of mixed sizes in one request, and returns what `serving_uint8` returns."""
    import io

    from PIL import Image

    from trainer.data.sample import write_sample

    model_dir, _, _ = trained
    model = tf.saved_model.load(str(exported))
    as_uint8, as_bytes = (model.signatures[k] for k in ("serving_uint8", "serving_bytes"))
    (spec,) = as_bytes.structured_input_signature[1].values()
    assert spec.dtype == tf.string and spec.shape.as_list() == [None]

    data = write_sample(tmp_path / "fresh", num_images=3, seed=7)
    jpegs = [path.read_bytes() for path in sorted((data / "images").glob("*.jpg"))[:2]]
    png = io.BytesIO()  # another format, and another size, in the same request
    Image.open(io.BytesIO(jpegs[0])).resize((321, 207)).save(png, "PNG")
    files = [*jpegs, png.getvalue()]
    together = {k: v.numpy() for k, v in as_bytes(tf.constant(files)).items()}
    for index, encoded in enumerate(files):
        alone = {k: v.numpy()[0] for k, v in
                 as_uint8(tf.image.decode_image(encoded, channels=3)[tf.newaxis]).items()}
        mine = {k: v[index] for k, v in together.items()}
        # the same detections; equal scores may come in another order, so compare the top
        # one and the sorted scores
        assert mine["num_detections"] == alone["num_detections"], index
        np.testing.assert_allclose(np.sort(mine["detection_scores"]),
                                   np.sort(alone["detection_scores"]), atol=1e-4)
        top, alone_top = np.argmax(mine["detection_scores"]), np.argmax(
            alone["detection_scores"])
        assert mine["detection_classes"][top] == alone["detection_classes"][alone_top], index
        np.testing.assert_allclose(mine["detection_boxes"][top],
                                   alone["detection_boxes"][alone_top], atol=1e-3)

    # for Vertex AI's prediction container, which calls the default signature
    result = model.signatures["serving_default"](tf.constant(files))
    assert result["detection_boxes"].shape == (3, SERVED_MAX_DETECTIONS, 4)
    for scores, count in zip(result["detection_scores"].numpy(),
                             result["num_detections"].numpy(), strict=True):
        assert (scores[:count] >= SERVED_MIN_SCORE).all()
    info = json.loads((exported / "export.json").read_text())
    assert info["default_signature"] == "bytes" and info["max_detections"] == 20
    # the operating point of the exported checkpoint's evaluation travels with it (issue 40)
    step = int(info["checkpoint"].rsplit("-", 1)[1])
    evaluated = json.loads((model_dir / "eval" / f"ckpt-{step}.json").read_text())
    point = evaluated["operating_point"]
    assert info["score_threshold"]["value"] == point["threshold"] and \
        info["score_threshold"]["evaluation"] == f"eval/ckpt-{step}.json"
    assert point["f1"] >= 0.8 and len(point["confusion"]) == len(point["classes"]) == 4
    refused = trainer_here("export", f"--model_dir={model_dir}", f"--export_dir={tmp_path / 'x'}",
                           "--max_detections=0", check=False)
    assert refused.returncode == 2 and "--max-detections must be 1 to 1000" in refused.stderr


RESUMED_STEPS = 40  # killed at its first checkpoint from step 20 on (one every 10 steps), at
# least one loop of 10 steps before the end


def checkpoint_step(model_dir: Path) -> int:
    """The step of the newest checkpoint in `model_dir`, 0 before the first."""
    latest = tf.train.latest_checkpoint(str(model_dir))
    return int(latest.rsplit("-", 1)[1]) if latest else 0


@pytest.mark.slow(55)
def test_training_resumes_after_kill_9_from_the_last_checkpoint(small_records, tmp_path):
    flags = [*data_flags(small_records, tmp_path), f"--train_steps={RESUMED_STEPS}",
             "--params_override=trainer.checkpoint_interval=10,trainer.steps_per_loop=10,"
             "trainer.summary_interval=10"]
    process, seen = trainer_process(*flags), []
    for line in process.stdout:  # a line or more each loop of ten steps
        seen.append(line)
        if checkpoint_step(tmp_path) >= 20:
            break
    assert process.poll() is None, "".join(seen)[-5000:]  # still training: kill it now
    os.kill(process.pid, signal.SIGKILL)  # a preempted VM: no chance to clean up
    process.communicate(timeout=60)
    last = checkpoint_step(tmp_path)
    assert 20 <= last < RESUMED_STEPS

    result = trainer_here(*flags)
    assert f"resuming from {tmp_path}/ckpt-{last} (step {last})" in result.stdout
    steps = [int(line.split("step:")[1].split("|")[0]) for line in result.stdout.splitlines()
             if line.startswith("train | step:")]
    assert last <= steps[0] <= last + 10 and steps[-1] == RESUMED_STEPS  # continued
    assert checkpoint_step(tmp_path) == RESUMED_STEPS

    # An evaluator given no --train_steps takes the run's length from its model directory.
    result = trainer_here(*data_flags(small_records, tmp_path), "--mode=continuous_eval",
                          "--eval_idle_timeout=120")
    assert f"final checkpoint (step {RESUMED_STEPS}) evaluated" in result.stdout


def test_train_and_eval_evaluates_each_checkpoint_an_interval_past_the_last():
    """Which checkpoints `--mode train_and_eval` evaluates after a loop (the last one is
    evaluated when training ends: the demo's test runs the whole mode, export included)."""
    from trainer.training.train import due

    assert due([1, 2, 3], set(), 2) == [2]
    assert due([1, 2, 3, 4, 5, 6], {2}, 2) == [4, 6]
    assert due([100, 200, 300, 400], {100}, 250) == [400]
    assert due([5, 10], {5, 10}, 1) == [] and due([], set(), 1) == []
    assert due([3, 7, 8, 12], set(), 4) == [7, 12]  # checkpoints off the interval's grid


PLATEAU = ("--override=learning_rate=0",  # nothing learnt: every evaluation scores the same
           "--override=trainer.optimizer_config.warmup.linear.warmup_learning_rate=0",
           "--params-override=trainer.checkpoint_interval=5,trainer.steps_per_loop=5,"
           "trainer.summary_interval=5")


@pytest.mark.slow(100)
def test_two_workers_train_together_and_stop_early_together_on_a_plateau(small_records,
                                                                         tmp_path):
    """`invoke train --workers 1 --early-stop-patience 1`: a chief and a worker on 127.0.0.1
    (MultiWorkerMirroredStrategy) train at a learning rate of 0; the chief evaluates each
    checkpoint between its loops, and after an evaluation without a gain both stop at the
    same step, long before the 200 asked. best/ holds the best evaluation's checkpoint, the
    run says why it stopped, and the export picks the best."""
    from launch.features.runs.lookup import list_runs

    model_dir = tmp_path / "model"
    result = subprocess.run(
        [sys.executable, "-m", "invoke", "train", f"--model-dir={model_dir}",
         f"--data-dir={small_records}", "--steps=200", "--workers=1",
         "--early-stop-patience=1", *PLATEAU], cwd=REPO, text=True, capture_output=True,
        timeout=HANG)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-5000:]
    assert "strategy multi_worker_mirrored" in out and "[replica 1] experiment" in out
    stop = re.search(r"^stopped early at step (\d+): no AP gain > 0 in 1 evaluation; best "
                     r"step (\d+)$", out, re.MULTILINE)
    assert stop, out[-5000:]
    stopped, best_step = int(stop[1]), int(stop[2])
    assert f"[replica 1] stopped early at step {stopped}: " in out  # the same step: no hang
    evaluations = {int(p.stem[5:]): json.loads(p.read_text())["metrics"]["AP"]
                   for p in (model_dir / "eval").glob("ckpt-*.json")}
    assert len(evaluations) == 2 and stopped < 200
    top = max(evaluations, key=lambda step: (evaluations[step], -step))
    record = json.loads((model_dir / "best" / "best.json").read_text())
    assert (record["step"], record["value"], record["checkpoint"]) == (
        top, evaluations[top], f"ckpt-{top}") and best_step == top
    for suffix in (".index", ".data-00000-of-00001"):
        assert (model_dir / "best" / f"ckpt-{top}{suffix}").read_bytes() == \
            (model_dir / f"ckpt-{top}{suffix}").read_bytes()
    summary = json.loads((model_dir / "training_summary.json").read_text())
    assert summary["stopped_early"] == stop[0] and summary["steps"] == stopped
    assert stop[0] in list_runs(tmp_path)

    exported = tmp_path / "exported"  # `invoke export`'s own wiring: the bucket test below
    trainer_here("export", f"--model_dir={model_dir}", f"--export_dir={exported}")
    info = json.loads((exported / "export.json").read_text())
    assert (info["checkpoint"], info["checkpoint_choice"]) == (f"ckpt-{top}", "best")
    assert info["checkpoint_reason"] == f"the best evaluated: AP {evaluations[top]:.4f} at " \
                                        f"step {top}"


FROZEN = ("--params_override=trainer.optimizer_config.learning_rate.cosine.initial_learning_rate="
          "1e-9,trainer.optimizer_config.warmup.linear.warmup_learning_rate=1e-9")


@pytest.mark.slow(63)
def test_invoke_fine_tunes_from_a_checkpoint_and_eval_reads_the_runs_own_data(trained,
                                                                              tmp_path):
    """`invoke train --init-from CHECKPOINT`: five steps at a learning rate of ~0 keep the
    restored weights, so the run scores like the checkpoint it started from (five steps from
    scratch score 0). `invoke eval` without --data-dir evaluates on the data the run recorded
    in its job file, and `--rerun` repeats the job in a new model directory."""
    model_dir, records, _ = trained
    init = tf.train.latest_checkpoint(str(model_dir))
    run = tmp_path / "finetuned"

    def invoke(*args: str) -> subprocess.CompletedProcess:
        result = subprocess.run([sys.executable, "-m", "invoke", *args], cwd=REPO, text=True,
                                capture_output=True, timeout=HANG)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
        return result

    invoke("train", f"--init-from={init}", "--init-type=all", "--steps=5",
           f"--model-dir={run}", f"--data-dir={records}", "--override=learning_rate=1e-9",
           "--override=trainer.optimizer_config.warmup.linear.warmup_learning_rate=1e-9")
    invoke("eval", "--once", f"--model-dir={run}")
    ap50 = json.loads((run / "eval" / "ckpt-5.json").read_text())["metrics"]["AP50"]
    assert ap50 >= AP50_BOUND

    again = invoke("train", f"--rerun={run}", "--dry-run").stdout
    assert f"--init_checkpoint={init}" in again and "--train_steps=5" in again
    assert f"--model_dir={run}-rerun-" in again and f"--data_dir={records}" in again


def test_fine_tunes_from_a_backbone_checkpoint(train_records, tmp_path):
    """A classification-style checkpoint (a backbone alone, like Model Garden's ImageNet ones)."""
    from official.core import task_factory

    from trainer.training import settings
    from trainer.training.params import build_params

    params = build_params(settings.parse(data_flags(train_records, tmp_path / "x"), {}),
                          "float32")
    backbone = task_factory.get_task(params.task).build_model().backbone
    init = tf.train.Checkpoint(backbone=backbone).save(str(tmp_path / "backbone" / "ckpt"))
    model_dir = tmp_path / "model"
    done = trainer_here(*data_flags(train_records, model_dir), "--train_steps=2",
                        f"--init_checkpoint={init}", "--init_checkpoint_type=backbone", FROZEN)
    assert f"--init-from: restored the backbone from {init} (--init-type backbone)" in \
        done.stdout.splitlines()
    key = "backbone/layer_with_weights-0/_conv0/kernel/.ATTRIBUTES/VARIABLE_VALUE"
    loaded = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(model_dir)))
    np.testing.assert_allclose(loaded.get_tensor(key),
                               tf.train.load_checkpoint(init).get_tensor(key), atol=1e-6)


def test_invoke_tensorboard_serves_the_runs(trained):
    import urllib.request

    from launch.targets.local.processes import free_ports

    model_dir, _, _ = trained
    (port,) = free_ports(1)
    server = subprocess.Popen([sys.executable, "-m", "invoke", "tensorboard",
                               f"--logdir={model_dir}", f"--port={port}"], cwd=REPO,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        runs = []  # until the server answers and has read the runs: no deadline of our own
        while not {"train", "validation"} <= set(runs):
            assert server.poll() is None, f"invoke tensorboard exited {server.returncode}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/data/runs",
                                            timeout=5) as response:
                    runs = json.loads(response.read())
            except OSError:
                pass  # not listening yet
            time.sleep(0.5)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


@pytest.mark.slow(49)
def test_invoke_export_and_predict_on_a_run_in_the_bucket(trained, tmp_path):
    """A Vertex AI run's checkpoints in GCS (fake-gcs-server) -> `invoke export --run-id`
    -> a SavedModel in the bucket -> `invoke predict` on gs:// images, results in the bucket."""
    from launch.stores.gcs.mirror import stage_directory
    from launch.stores.gcs.upload import upload_directory
    from tests.fakes.gcs import FakeGcs
    from trainer.data.sample import write_sample

    model_dir, _, _ = trained
    data = write_sample(tmp_path / "fresh", num_images=3, seed=7)
    with FakeGcs() as server:
        client = server.client()
        client.create_bucket("pets-data")
        upload_directory(client, "pets-data", model_dir, "runs/r1/checkpoints")
        upload_directory(client, "pets-data", data / "images", "test-images")
        env = {**os.environ, "STORAGE_EMULATOR_HOST": server.url, "PETS_PROJECT": "test",
               "PETS_BUCKET": "pets-data", "PETS_CACHE_DIR": str(tmp_path / "cache")}

        def invoke(*args: str) -> str:
            result = subprocess.run([sys.executable, "-m", "invoke", *args], cwd=REPO, env=env,
                                    capture_output=True, text=True, timeout=HANG)
            assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
            return result.stdout

        assert "exported to gs://pets-data/runs/r1/exported" in invoke(
            "export", "--run-id=r1", f"--checkpoint={TRAIN_STEPS}")
        mirrored = tmp_path / "cache/pets-data/runs/r1/checkpoints"
        assert sorted(p.name for p in mirrored.glob("ckpt-*")) == [  # one checkpoint only
            f"ckpt-{TRAIN_STEPS}.data-00000-of-00001", f"ckpt-{TRAIN_STEPS}.index"]
        exported = {b.name for b in client.list_blobs("pets-data", prefix="runs/r1/exported/")}
        assert {"runs/r1/exported/saved_model.pb",
                "runs/r1/exported/label_map.pbtxt"} <= exported
        invoke("predict", "--model=gs://pets-data/runs/r1/exported",
               "--images=gs://pets-data/test-images/*.jpg",
               "--output-dir=gs://pets-data/runs/r1/predictions")
        report = json.loads(client.bucket("pets-data").blob(
            "runs/r1/predictions/detections.json").download_as_text())
        uploaded = {b.name for b in client.list_blobs("pets-data", prefix="runs/r1/predictions/")}
        local_model = stage_directory(client, "gs://pets-data/runs/r1/exported", tmp_path / "got")
    # the bucket's report is what the same SavedModel answers here on the same files (the
    # model's quality is test_export_signature_and_prediction_on_a_sample_image's subject)
    assert main(["predict", f"--model={local_model}", f"--images={data}/images/*.jpg",
                 f"--output_dir={tmp_path / 'here'}"]) == 0
    here = json.loads((tmp_path / "here" / "detections.json").read_text())
    assert report["score_threshold"] == here["score_threshold"]
    answers = {Path(entry["image"]).name: entry["detections"] for entry in here["images"]}
    assert len(report["images"]) == 3 and len(answers) == 3
    assert any(answers.values())  # something to compare: boxes on at least one image
    for entry in report["images"]:  # the uploaded report names objects in the bucket
        assert entry["image"].startswith("gs://pets-data/test-images/")
        assert entry["annotated"].removeprefix("gs://pets-data/") in uploaded
        expected = answers[Path(entry["image"]).name]
        assert [d["class"] for d in entry["detections"]] == [d["class"] for d in expected]
        for got, want in zip(entry["detections"], expected, strict=True):
            assert got["score"] == pytest.approx(want["score"], abs=1e-4)
            assert got["box"] == pytest.approx(want["box"], abs=1e-4)
