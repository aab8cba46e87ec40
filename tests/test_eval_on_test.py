"""Issue 40, item 1's evaluation: `invoke eval --split test` measures the checkpoint the run
keeps (best/, as export chooses it) once on the held-out test split, into eval-test/ and
test/ summaries, never into eval/ or best/, so nothing that picks a checkpoint or stops a
run ever reads the test split; `invoke runs.compare` shows it. (The refusals, answered
before TensorFlow loads: tests/test_args.py; the Vertex AI job: tests/test_vertex.py.)"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from launch.errors import InputError
from launch.features.runs import lookup
from launch.features.runs.record import load_run
from launch.values.jobs import inputs
from tests.conftest import data_flags, trainer_here
from tests.test_runs import cells, write_run
from trainer.cli.main import ERROR_PREFIX
from trainer.common import files
from trainer.data.tfrecord import parse_example, records
from trainer.model.eval_record import EvaluationRecord

TEST_IMAGES = 8  # the test split here: the first validation images, renamed (cheap to evaluate)


def fingerprint(model_dir: Path) -> dict[str, str]:
    """Every file of what picks a checkpoint or stops the run: eval/, best/, the verdict."""
    return {str(path.relative_to(model_dir)): hashlib.sha256(path.read_bytes()).hexdigest()
            for part in (files.METRICS_DIR, files.BEST_DIR) for path in
            sorted((model_dir / part).rglob("*")) if path.is_file()} | \
        {files.EARLY_STOP_FILE: str((model_dir / files.EARLY_STOP_FILE).exists())}


def with_test_split(records: Path, out: Path, count: int = TEST_IMAGES) -> Path:
    """`records`' label map, and `count` of its validation records as its test split."""
    import tensorflow as tf

    out.mkdir()
    label_map = Path(files.data_label_map(str(records), lambda p: Path(p).exists()))
    shutil.copy(label_map, out / files.DATA_LABEL_MAP_FILE)
    shards = sorted(str(p) for p in records.glob(files.shard_glob(files.VAL)))
    with tf.io.TFRecordWriter(str(out / files.shard_name(files.TEST, 0, 1))) as writer:
        for record in tf.data.TFRecordDataset(shards).take(count):
            writer.write(record.numpy())
    return out


@pytest.mark.slow
def test_the_best_checkpoint_is_evaluated_once_on_the_test_split_apart_from_eval_and_best(
        trained, tmp_path):
    model_dir, records, _ = trained
    copy = tmp_path / "model"  # the session's run stays as the other tests read it
    shutil.copytree(model_dir, copy)
    best = json.loads((copy / files.BEST_DIR / files.BEST_FILE).read_text())["step"]
    before = fingerprint(copy)
    data = with_test_split(records, tmp_path / "data")

    result = trainer_here(*data_flags(data, copy), "--mode=eval", "--eval_split=test")
    path = copy / files.TEST_METRICS_DIR / files.metrics_file(best)
    (said,) = [line for line in result.stdout.splitlines() if line.startswith("evaluated")]
    assert said.startswith(f"evaluated step {best} on test (the best evaluated: AP ")
    assert said.endswith(f"-> {path}")
    record = EvaluationRecord.read(str(path), best)
    assert record is not None and {"AP", "AP50"} <= set(record.metrics)
    assert record.checkpoint == f"{copy}/{files.BEST_DIR}/{files.checkpoint_name(best)}"
    assert record.operating_point is not None and record.operating_point["classes"]
    assert sum(map(sum, record.operating_point["confusion"])) > 0
    # measured at the threshold the validation chose for that checkpoint, not tuned on test
    validated = EvaluationRecord.read(str(copy / files.METRICS_DIR / files.metrics_file(best)),
                                      best)
    assert record.operating_point["threshold"] == validated.operating_point["threshold"]
    assert record.operating_point["threshold_from"] == f"eval/{files.metrics_file(best)}"
    assert record.data.startswith(f"{data}/test.record-") and " files, sha256 " in record.data
    assert sorted(p.name for p in (copy / files.TEST_METRICS_DIR).iterdir()) == \
        [files.checkpoint_name(best), path.name]  # and its worst images, beside it
    assert fingerprint(copy) == before  # no evaluation of eval/, no best/, no verdict
    assert list((copy / "test").glob("events.out.tfevents.*"))  # TensorBoard: test/

    run = load_run(copy)  # `invoke runs.compare` shows it beside the validation numbers
    assert run.shown.step == best and run.shown_test == record
    (row,) = cells(lookup.table([run]))
    assert row["test AP"] == f"{record.metrics['AP']:.4f}"
    assert row["test F1"] == f"{record.operating_point['f1']:.4f}"


def test_runs_compare_shows_the_test_evaluation_of_the_checkpoint_shown(tmp_path):
    """Columns for the test split's AP, AP50 and F1 when a run shown has an evaluation of
    that checkpoint on it; `-` for a run without; the mirror of a run in the bucket keeps
    eval-test/'s records."""
    tested, untested = write_run(tmp_path / "a"), write_run(tmp_path / "b")
    (tested / files.TEST_METRICS_DIR).mkdir()
    for step, ap in ((100, 0.1), (200, 0.42)):  # the newest (200) is the one shown
        (tested / files.TEST_METRICS_DIR / files.metrics_file(step)).write_text(json.dumps({
            "checkpoint": f"ckpt-{step}", "step": step,
            "metrics": {"AP": ap, "AP50": 0.8}}))
    before = cells(lookup.table([load_run(untested)]))
    assert not any(name.startswith("test ") for name in before[0])

    rows = cells(lookup.compare(lambda: pytest.fail("local runs need no cloud"),
                                [str(tested), str(untested)], tmp_path / "report"
                                ).split("\n\n")[0])
    assert [(r["test AP"], r["test AP50"]) for r in rows] == [("0.4200", "0.8000"),
                                                              ("-", "-")]
    assert rows[0]["test F1"] == "-"  # recorded without an operating point
    assert rows[0]["AP"] != rows[0]["test AP"]  # validation's stays where it was
    assert lookup.is_record_file(f"{files.TEST_METRICS_DIR}/ckpt-200.json")


def test_invoke_eval_split_test_runs_the_trainer_on_the_test_split_once(tmp_path):
    """The local target's command: one evaluation (--mode eval, without --once) on the test
    split; the job file it prints keeps the split in its `eval:` section."""
    from tests.cli import invoke

    (tmp_path / "records").mkdir()
    ran = invoke("eval", "--split=test", f"--model-dir={tmp_path / 'model'}",
                 f"--data-dir={tmp_path / 'records'}", "--dry-run")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip().endswith(
        f"-m trainer --experiment=pets_retinanet_mobilenet --mode=eval --model_dir="
        f"{tmp_path / 'model'} --data_dir={tmp_path / 'records'} --eval_split=test")
    assert "eval:\n  split: test" in ran.stderr


def test_a_named_datasets_test_shards_are_what_a_test_evaluation_reads():
    listed = ("train.record-00000-of-00001", "val.record-00000-of-00001",
              "test.record-00000-of-00002", "test.record-00001-of-00002")
    assert inputs("gs://b/d/v1", listed) == {
        "train_input": "gs://b/d/v1/train.record-00000-of-00001",
        "eval_input": "gs://b/d/v1/val.record-00000-of-00001"}
    assert inputs("gs://b/d/v1/", listed, files.TEST)["eval_input"] == \
        "gs://b/d/v1/test.record-00000-of-00002,gs://b/d/v1/test.record-00001-of-00002"
    with pytest.raises(InputError, match=r"^--split test: the named dataset lists no test "):
        inputs("gs://b/d/v1", listed[:2], files.TEST)


def test_a_test_split_that_is_the_training_data_is_refused_in_one_line(records_dir, tmp_path):
    """Test shards that are byte copies of the training shards: refused
    by content, exit 2, before any checkpoint is evaluated or anything recorded."""
    data = tmp_path / "data"
    shutil.copytree(records_dir, data)
    for path in sorted(data.glob(files.shard_glob(files.TEST))):
        path.unlink()
    train = sorted(data.glob(files.shard_glob(files.TRAIN)))
    for index, path in enumerate(train):
        shutil.copy(path, data / files.shard_name(files.TEST, index, len(train)))
    model_dir = tmp_path / "model"
    result = trainer_here(*data_flags(data, model_dir), "--mode=eval", "--eval_split=test",
                          check=False)
    names = sorted(parse_example(record)["image/filename"][0].decode()
                   for path in train for record in records(path))
    shown = ", ".join(map(repr, names[:3]))
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.splitlines() == [
        f"{ERROR_PREFIX}--split test: {len(names)} of the test split's {len(names)} images are "
        f"in the training split too, by content ({shown}, ...): its figures would not be held "
        "out. Convert the data again (`invoke data.convert` "
        "keeps each image in one split), or evaluate on val"]
    assert not (model_dir / files.TEST_METRICS_DIR).exists()
    # a training that would test itself afterwards (--test) is refused before it trains
    trained = trainer_here(*data_flags(data, tmp_path / "run"), "--test_after",
                           "--train_steps=1", check=False)
    assert trained.returncode == 2 and trained.stderr.splitlines() == [
        f"{ERROR_PREFIX}--test: {len(names)} of the test split's {len(names)} images are in "
        f"the training split too, by content ({shown}, ...): its figures would not be held "
        "out. Convert the data again (`invoke data.convert` keeps each image in one split), "
        "or drop --test"]
    assert not list((tmp_path / "run").glob("ckpt-*"))


def test_a_held_out_test_split_passes_the_check(records_dir):
    from trainer.evaluation.evaluate import check_held_out, image_digests

    train = str(records_dir / files.shard_glob(files.TRAIN))
    test = str(records_dir / files.shard_glob(files.TEST))
    assert image_digests(test)  # the conversion's own test split: none of it in train
    check_held_out(train, test)
