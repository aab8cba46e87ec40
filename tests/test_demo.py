"""The README's first command, in miniature: `invoke demo` runs every step end to end."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli import invoke
from tests.conftest import HANG, REPO
from tests.test_coco import examples, values


@pytest.mark.slow(100)
def test_invoke_demo_leaves_metrics_a_savedmodel_and_an_annotated_image(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "invoke", "demo", f"--workdir={tmp_path}", "--steps=20",
         "--num-images=30"], cwd=REPO, text=True, capture_output=True, timeout=HANG)
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-5000:]
    assert "AP50" in result.stdout
    annotated = result.stdout.split("annotated image:")[1].split()[0]
    assert Path(annotated).is_file() and annotated.endswith("_detections.jpg")
    assert (tmp_path / "exported" / "saved_model.pb").is_file()
    assert (tmp_path / "exported" / "label_map.pbtxt").is_file()
    metrics = json.loads((tmp_path / "model" / "eval" / "ckpt-20.json").read_text())
    assert {"AP", "AP50", "AP75"} <= set(metrics["metrics"])
    # evaluated by our evaluator in the training process (train_and_eval): it keeps best/
    assert json.loads((tmp_path / "model" / "best" / "best.json").read_text())["step"] == 20
    assert_demo_records(tmp_path / "records")
    detections = json.loads((tmp_path / "predictions" / "detections.json").read_text())
    assert len(detections["images"]) == 3
    # the export carries the evaluated threshold, and predict detects at it
    chosen = metrics["operating_point"]["threshold"]
    exported = json.loads((tmp_path / "exported" / "export.json").read_text())
    assert exported["score_threshold"]["value"] == chosen
    assert exported["score_threshold"]["evaluation"] == "eval/ckpt-20.json"
    assert detections["score_threshold"] == chosen
    assert detections["score_threshold_from"].startswith(
        "export.json: the F1-best score of eval/ckpt-20.json")
    # issue 38 item 8: every stage's log in our words, none of TensorFlow's or absl's
    foreign = [line for line in (result.stdout + result.stderr).splitlines()
               if FOREIGN.match(line)]
    assert foreign == []
    # the step lines show the loss; pycocotools says nothing; a
    # piped line is whole (rich cut it at 80 columns)
    steps = [line for line in result.stdout.splitlines() if "steps/sec:" in line]
    assert steps and all("output: total_loss: " in line and " | learning_rate: " in line
                         for line in steps), steps
    assert "creating index" not in result.stdout and "DONE (t=" not in result.stdout
    assert "Average Precision" not in result.stdout
    assert any(line.startswith("experiment pets_retinanet_mobilenet, mode train_and_eval, ") and
               line.endswith(f"model_dir {tmp_path / 'model'}")
               for line in result.stdout.splitlines())
    the_next_commands_work_on_the_demos_model_directory(tmp_path)


def the_next_commands_work_on_the_demos_model_directory(workdir: Path) -> None:
    """The quick start's next commands, naming the demo's model directory
    alone: its job file (the demo stores one, as `invoke train` does) names its data. (What
    an evaluation on the test split then does: tests/test_eval_on_test.py.)"""
    model = workdir / "model"
    tested = invoke("eval", f"--model-dir={model}", "--split", "test", "--dry-run")
    assert tested.returncode == 0, tested.stdout[-3000:] + tested.stderr[-3000:]
    assert f"--mode=eval --model_dir={model} --data_dir={workdir / 'records'} " \
        "--eval_split=test" in tested.stdout
    further = invoke("train", f"--model-dir={model}", "--steps", "800", "--dry-run")
    assert further.returncode == 0, further.stderr
    assert f"--data_dir={workdir / 'records'}" in further.stdout
    assert "--train_steps=800" in further.stdout


# a line of TensorFlow's C++ (absl's and tsl's formats), of its Python logger, or a warning
FOREIGN = re.compile(r"[IWEF]\d{4} \d\d:\d\d:\d\d|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] "
                     r"|WARNING:|Instructions for updating|\S+:\d+: \w*Warning: ")


def assert_demo_records(records: Path, test: int = 3) -> None:
    """30 images, 10% held out as the test split: its records from the Pets files (the
    test list), none from the COCO JSON (trainval's only); 4 shards a split."""
    report = json.loads((records / "conversion_report.json").read_text())
    examples = {split: info["examples"] for split, info in report["splits"].items()}
    assert examples["train"] + examples["val"] == 27 and examples.get("test", 0) == test
    assert len(list(records.glob("*.record-*-of-00004"))) == 4 * len(examples)


def test_the_demo_with_format_coco_converts_from_the_samples_coco_json(tmp_path):
    """`invoke demo --format coco` differs from the demo above in its first two steps only;
    the steps after them are the ones the session's trained model takes on COCO-converted
    records (tests/conftest.py: `train_records`, `trained`)."""
    from launch.features.workflow import demo_data
    from trainer.common.files import SAMPLE_COCO_FILE

    said = []
    demo_data(tmp_path / "pets", tmp_path / "records", 30, said.append, format="coco")
    assert said[-1] == "2/4 Converting the COCO JSON to TFRecords"
    assert (tmp_path / "pets" / SAMPLE_COCO_FILE).is_file()
    assert_demo_records(tmp_path / "records", test=0)
    converted = examples(tmp_path / "records")
    assert len(converted) == 27
    for _, example in converted.values():  # from the COCO JSON: no VOC pose ("Frontal", ...)
        assert set(values(example, "image/object/view")) == {b"Unspecified"}


def test_the_demo_with_masks_converts_the_sample_with_its_pets_shapes(tmp_path):
    """`invoke demo --masks` differs in its records and its experiment: the steps after
    conversion are the ones the session's mask model takes (tests/conftest.py:
    `mask_trained`, tests/test_masks_trained.py), so this does not train again."""
    from launch.features.workflow import DemoResult, demo_data
    from launch.stores.datachecks import check_local
    from trainer.model.experiments import MASK_DEMO_EXPERIMENT

    said = []
    demo_data(tmp_path / "pets", tmp_path / "records", 30, said.append, masks=True)
    assert said[-1].endswith("to TFRecords with masks")
    assert_demo_records(tmp_path / "records")
    assert json.loads((tmp_path / "records" / "conversion_report.json").read_text())["masks"]
    check_local(str(tmp_path / "records"), experiment=MASK_DEMO_EXPERIMENT)  # it trains on them
    metrics = {"AP": 0.58, "AP50": 0.99, "AP75": 0.64, "mask_AP": 0.66, "mask_AP50": 0.99,
               "mask_AP75": 0.7}
    assert "mask AP 0.660  mask AP50 0.990" in DemoResult(metrics, "m", "a.jpg", 60).summary()


def test_the_demos_pictures_show_several_breeds(tmp_path):
    """The held-out list is sorted, so its first six were all Abyssinians: the demo takes one
    breed after another."""
    from collections import Counter

    from launch.features.workflow import DEMO_PREDICT_IMAGES, across_classes
    from trainer.data import pets
    from trainer.data.sample import write_sample

    held_out = pets.read_example_list(write_sample(tmp_path, num_images=120) / pets.TEST_LIST)
    breeds = {pets.breed_of(name) for name in held_out}  # the sample's three
    assert len({pets.breed_of(name) for name in held_out[:DEMO_PREDICT_IMAGES]}) < len(breeds)
    picked = across_classes(held_out, DEMO_PREDICT_IMAGES)
    assert len(set(picked)) == DEMO_PREDICT_IMAGES and set(picked) <= set(held_out)
    shown = Counter(pets.breed_of(name) for name in picked)
    assert set(shown) == breeds and max(shown.values()) - min(shown.values()) <= 1
    assert across_classes(held_out[:2], DEMO_PREDICT_IMAGES) == held_out[:2]


def test_each_demo_has_its_own_directory():
    """`invoke demo --masks` once replaced the box demo's model in work/demo (the one
    `bench.serve` reads by default)."""
    import inspect

    import tasks
    from launch.features.workflow import demo_dir

    assert demo_dir("work", masks=False) == "work/demo"
    assert demo_dir("work", masks=True) == "work/demo-masks"
    assert inspect.signature(tasks.demo.body).parameters["workdir"].default is None


def test_the_demo_evaluates_before_it_exports_in_one_trainer_process(tmp_path):
    """The export reads the threshold of its checkpoint's evaluation
    (trainer/evaluation/operating.py): exported before the evaluation, it carried none, and
    the demo's predict detected at 0.3 instead of the evaluated threshold. Training,
    evaluation and export are one process (`--mode train_and_eval --export_dir`): one
    TensorFlow start where three took about 15 CPU-seconds each."""
    from launch.features.workflow import DEMO_STEPS, demo_model_job

    model, exported = tmp_path / "model", tmp_path / "exported"
    text, job, total = demo_model_job(model, tmp_path / "records", exported, 20, masks=False)
    assert text == (f"3/{DEMO_STEPS} Training, evaluating (COCO metrics) and exporting a "
                    "SavedModel with the evaluated score threshold")
    assert total == 20 and {"--mode=train_and_eval", f"--model_dir={model}",
                            f"--export_dir={exported}"} <= set(job.args)
