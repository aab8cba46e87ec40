"""`invoke runs.list` and `invoke runs.compare` on runs' files as the trainer writes them
(eval/ckpt-N.json, training_summary.json, TensorBoard events), here and in the bucket (the
fake GCS and Vertex AI of tests/fakes), including damaged and hostile ones. The same report
on two really trained runs is in test_runs_trained.py."""

from __future__ import annotations

import csv
import datetime
import html
import io
import json
from pathlib import Path

import numpy as np
import pytest
from google.cloud import aiplatform_v1
from PIL import Image

from launch.errors import InputError, MissingError
from launch.features.runs import lookup
from launch.features.runs.record import load_run
from launch.features.runs.report import table
from launch.stores.gcs.upload import upload_directory
from tests.fakes.cloud import fake_cloud
from trainer.model.experiments import AP_METRICS

CLASSES = {"Abyssinian": 0.9, "<b>beagle</b>": 0.6, "Russian_Blue": 0.75}


def write_run(model_dir: Path, steps=(100, 200), scale: float = 1.0, loss=True,
              masks: bool = False, point: dict | None = None) -> Path:
    """A run's record files, shaped as the trainer and the evaluator write them (those of a
    mask experiment with `masks`)."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    (model_dir / "eval").mkdir(parents=True)
    (model_dir / "run.json").write_text(json.dumps({"experiment": "pets_retinanet_mobilenet"}))
    (model_dir / "training_summary.json").write_text(json.dumps({
        "experiment": "pets_retinanet_mobilenet", "hardware": "this CPU x 1",
        "steps": steps[-1], "seconds": 754.2, "seconds_per_step": 3.771}))
    for i, step in enumerate(steps, 1):
        fraction = scale * i / len(steps)
        (model_dir / "eval" / f"ckpt-{step}").mkdir()
        worst = []
        for rank in (1, 2):
            picture = f"ckpt-{step}/worst-0{rank}.jpg"
            pixels = np.random.default_rng(rank).integers(0, 255, (64, 64, 3), np.uint8)
            Image.fromarray(pixels).save(model_dir / "eval" / picture)
            worst.append({"key": f"img{rank}" if rank == 1 else "<script>x</script>",
                          "objects": 2, "missed": 2 - rank,
                          "mean_iou": 0.3 * rank, "extra": 0, "picture": picture,
                          "overlap": "mask" if masks else "box"})
        worst.append({"key": "evil", "objects": 1, "missed": 1, "mean_iou": 0, "extra": 0,
                      "picture": "../../run.json"})  # not followed out of eval/
        box = {"AP": 0.5 * fraction, "AP50": 0.9 * fraction, "AP75": 0.4 * fraction,
               "APs": -1.0, "APm": 0.45 * fraction, "APl": 0.55 * fraction}
        (model_dir / "eval" / f"ckpt-{step}.json").write_text(json.dumps({
            "checkpoint": str(model_dir / f"ckpt-{step}"), "step": step,
            "metrics": {**box, **({f"mask_{k}": v * 0.8 for k, v in box.items()} if masks
                                  else {})},
            "per_class": {name: {"AP": ap * fraction, "AP50": 1.0, "objects": 10,
                                 **({"mask_AP": ap * fraction / 2, "mask_AP50": 0.9}
                                    if masks else {})}
                          for name, ap in CLASSES.items()},
            "pr_curve": {"recall": list(np.linspace(0, 1, 101)),
                         "precision": list(np.linspace(1, 0.2 * fraction, 101))},
            "worst_images": worst, **({"operating_point": point} if point else {})}))
    if loss:
        writer = EventFileWriter(str(model_dir / "train"))
        for step in range(0, steps[-1] + 1, 50):
            writer.add_event(event_pb2.Event(step=step, summary=summary_pb2.Summary(value=[
                summary_pb2.Summary.Value(tag="total_loss", simple_value=2.0 / (1 + step))])))
        writer.close()
    return model_dir


def cells(text: str) -> list[dict[str, str]]:
    """The printed table back into rows (columns split on runs of two spaces)."""
    import re

    header, *rows = text.splitlines()
    names = re.split(r"\s{2,}", header.strip())
    return [dict(zip(names, re.split(r"\s{2,}", r.strip()), strict=True)) for r in rows]


def test_the_report_has_the_evaluators_numbers_real_plots_and_one_html(tmp_path):
    first, second = write_run(tmp_path / "a"), write_run(tmp_path / "b", scale=0.5)
    out = lookup.compare(lambda: pytest.fail("local runs need no cloud"),
                         [str(first), str(second)], tmp_path / "report")
    rows = cells(out.split("\n\n")[0])
    for row, run in zip(rows, (first, second), strict=True):
        newest = json.loads((run / "eval" / "ckpt-200.json").read_text())["metrics"]
        for metric in AP_METRICS:
            value = newest[metric]
            assert row[metric] == (f"{value:.4f}" if value >= 0 else "-")
        assert (row["steps"], row["wall time"], row["hardware"]) == \
            ("200", "12m34s", "this CPU x 1")
    with open(tmp_path / "report" / "table.csv") as f:
        saved = list(csv.DictReader(f))
    assert float(saved[1]["AP"]) == json.loads(
        (second / "eval" / "ckpt-200.json").read_text())["metrics"]["AP"]

    for name in ("ap_by_step.png", "loss_by_step.png", "per_class_ap.png", "pr_curve.png"):
        image = Image.open(tmp_path / "report" / name)
        assert image.format == "PNG" and image.size == (700, 420)
        pixels = np.asarray(image.convert("RGB"))
        assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 50  # lines, bars, text
        assert (pixels.std(axis=(0, 1)) > 10).all()

    assert not any("mask" in name for name in rows[0])  # box runs: no mask columns
    assert not (tmp_path / "report" / "per_class_mask_ap.png").exists()
    page = (tmp_path / "report" / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 4
    assert page.count("data:image/jpeg;base64,") == 4  # two worst images a run
    assert "<script>x" not in page and "&lt;script&gt;x&lt;/script&gt;: 0 of 2" in page
    assert "img1: 1 of 2 missed, mean IoU 0.30, 0 extra" in page
    # its picture points out of eval/: left out (a caption, since base64 may spell "evil")
    assert "<figcaption>evil" not in page and page.count("<figcaption>") == 4


def test_a_mask_run_is_compared_by_its_masks_too(tmp_path):
    """Mask AP columns beside the box ones (a box run beside it shows '-'), mask AP per
    class drawn, and its worst images named by mask IoU."""
    masks, boxes = write_run(tmp_path / "masks", masks=True), write_run(tmp_path / "boxes")
    out = lookup.compare(lambda: pytest.fail("local runs need no cloud"),
                         [str(masks), str(boxes)], tmp_path / "report")
    shown, plain = cells(out.split("\n\n")[0])
    newest = json.loads((masks / "eval" / "ckpt-200.json").read_text())["metrics"]
    for metric in ("mask_AP", "mask_AP50", "mask_AP75"):
        assert shown[metric] == f"{newest[metric]:.4f}" and plain[metric] == "-"
    with open(tmp_path / "report" / "table.csv") as f:
        assert float(next(csv.DictReader(f))["mask_AP50"]) == newest["mask_AP50"]
    bars = np.asarray(Image.open(tmp_path / "report" / "per_class_mask_ap.png").convert("RGB"))
    assert len(np.unique(bars.reshape(-1, 3), axis=0)) > 50
    page = (tmp_path / "report" / "report.html").read_text()
    assert "Mask AP per class" in page
    assert "img1: 1 of 2 missed, mean mask IoU 0.30, 0 extra" in page  # the mask run's
    assert "img1: 1 of 2 missed, mean IoU 0.30, 0 extra" in page  # the box run's


def test_damaged_files_cost_a_cell_not_the_report(tmp_path):
    run = write_run(tmp_path / "run", loss=False)
    (run / "eval" / "ckpt-100.json").write_text("{not json")
    (run / "eval" / "ckpt-200.json").write_text(json.dumps({
        "step": 200, "metrics": {"AP": float("nan"), "AP50": "high", "AP75": 0.25},
        "per_class": {"x": "y"}, "pr_curve": {"recall": [0, 1], "precision": [1]}}))
    (run / "eval" / "ckpt-300.json.partial").write_text("{}")
    (run / "training_summary.json").write_text("[1, 2]")
    (run / "train").mkdir()
    (run / "train" / "events.out.tfevents.1.host").write_bytes(b"\x10\x00\x00")  # truncated
    record = load_run(run)
    assert [e.step for e in record.evaluations] == [200]
    assert record.latest.metrics == {"AP75": 0.25} and record.latest.pr_curve is None
    assert record.losses == () and record.seconds is None
    (row,) = cells(table([record]))
    assert (row["AP"], row["AP75"], row["steps"]) == ("-", "0.2500", "200")
    out = lookup.compare(lambda: None, [str(run)], tmp_path / "report")
    assert "report: " in out and (tmp_path / "report" / "report.html").exists()


def test_the_best_checkpoint_is_shown_unless_another_is_asked_and_a_stop_is_said(tmp_path,
                                                                                capsys):
    """A run keeping ckpt-200 as its best (best/best.json) shows that evaluation, and why it
    stopped early; `--checkpoint latest` or a step shows another; a run keeping none shows its
    newest, with a note."""
    from trainer.model.best.choice import Choice

    run = write_run(tmp_path / "a", steps=(100, 200, 300))
    (run / "best").mkdir()
    (run / "best" / "best.json").write_text(json.dumps({
        "step": 200, "metric": "AP", "value": 0.3333, "goal": "maximize",
        "checkpoint": "ckpt-200", "evaluated_at": "2026-11-24T10:00:00+00:00"}))
    summary = json.loads((run / "training_summary.json").read_text())
    stop = "stopped early at step 350: no AP gain > 0 in 1 evaluations; best step 200"
    (run / "training_summary.json").write_text(json.dumps({**summary, "stopped_early": stop}))
    other = write_run(tmp_path / "b", steps=(100,))

    text = lookup.list_runs(tmp_path)
    first, second = cells(text.split(f"\n{run}: ")[0])
    assert (first["checkpoint"], first["AP"]) == ("best 200", f"{0.5 * 2 / 3:.4f}")
    assert second["checkpoint"] == "latest 100"
    assert f"{run}: {stop}" in text.splitlines()
    shown = {kind: load_run(run, choice=Choice.parse(kind)).shown_as
             for kind in ("latest", "100", "ckpt-999")}
    assert shown == {"latest": "latest 300", "100": "ckpt-100", "ckpt-999": "-"}

    lookup.compare(lambda: None, [str(run), str(other)], tmp_path / "report")
    assert f"note: {other} keeps no best checkpoint" in capsys.readouterr().err
    assert html.escape(stop) in (tmp_path / "report" / "report.html").read_text()
    with open(tmp_path / "report" / "table.csv") as table_file:
        assert [r["step evaluated"] for r in csv.DictReader(table_file)] == ["200", "100"]
    lookup.compare(lambda: None, [str(run)], tmp_path / "r2", checkpoint=Choice.parse("7"))
    assert f"note: {run} has no evaluation of ckpt-7" in capsys.readouterr().err


def test_runs_are_named_plainly_or_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(MissingError, match="is not a run's model directory"):
        lookup.load(lambda: None, str(tmp_path / "empty"))
    with pytest.raises(InputError, match="neither a directory here nor a run id"):
        lookup.load(lambda: None, "a/b/c")
    with pytest.raises(InputError, match="neither a directory here nor a run id"):
        lookup.load(lambda: None, "../etc")
    with pytest.raises(InputError, match="name the runs to compare"):
        lookup.compare(lambda: None, [], tmp_path / "report")
    sweep = tmp_path / "sweep"
    write_run(sweep / "trial-000")
    write_run(sweep / "trial-001")
    out = lookup.compare(lambda: None, [str(sweep)], tmp_path / "report")  # its trials
    assert [row["run"] for row in cells(out.split("\n\n")[0])] == \
        [str(sweep / "trial-000"), str(sweep / "trial-001")]
    with pytest.raises(InputError, match="named twice"):
        lookup.compare(lambda: None, [str(sweep), str(sweep / "trial-000")], tmp_path / "r")


def test_list_finds_runs_below_a_root_but_not_in_the_mirror_nor_through_symlinks(tmp_path):
    write_run(tmp_path / "work" / "model")
    write_run(tmp_path / "work" / "cache" / "pets-data" / "runs" / "r1" / "checkpoints")
    write_run(tmp_path / "elsewhere" / "run")
    (tmp_path / "work" / "link").symlink_to(tmp_path / "elsewhere")
    listed = lookup.list_runs(tmp_path / "work", cache_dir=tmp_path / "work" / "cache")
    assert [row["run"] for row in cells(listed)] == [str(tmp_path / "work" / "model")]
    assert lookup.list_runs(tmp_path / "elsewhere" / "run" / "eval").startswith("no runs")


@pytest.fixture
def fakes(tmp_path):
    with fake_cloud(tmp_path) as services:
        yield services


def upload_run(fakes, local: Path, prefix: str) -> None:
    for extra in ("ckpt-200.index", "ckpt-200.data-00000-of-00001"):  # never fetched
        (local / extra).write_bytes(b"\0" * 4096)
    upload_directory(fakes.storage, "pets-data", local, prefix)


def test_runs_in_the_bucket_are_mirrored_without_checkpoints_and_costed(fakes, tmp_path):
    gpu1 = write_run(tmp_path / "gpu1")
    (gpu1 / "best").mkdir()
    (gpu1 / "best" / "best.json").write_text(json.dumps({
        "step": 100, "metric": "AP", "value": 0.25, "goal": "maximize",
        "checkpoint": "ckpt-100", "evaluated_at": "2026-11-24T10:00:00+00:00"}))
    (gpu1 / "best" / "ckpt-100.index").write_text("a checkpoint: never mirrored")
    upload_run(fakes, gpu1, "runs/gpu1/checkpoints")
    upload_run(fakes, write_run(tmp_path / "trial", steps=(100,), loss=False),
               "runs/sweep1/3/checkpoints")
    bucket = fakes.storage.bucket("pets-data")
    bucket.blob("runs/gpu1/checkpoints/eval/../../../../escape.json").upload_from_string("{}")
    bucket.blob("runs/Bad Name/checkpoints/run.json").upload_from_string("{}")
    started = datetime.datetime(2026, 11, 22, 1, tzinfo=datetime.UTC)
    fakes.vertex.jobs["projects/pets-detector-dev/locations/us-central1/customJobs/9"] = \
        aiplatform_v1.CustomJob(
            name="projects/pets-detector-dev/locations/us-central1/customJobs/9",
            labels={"run": "gpu1"}, state=aiplatform_v1.JobState.JOB_STATE_SUCCEEDED,
            start_time=started, end_time=started + datetime.timedelta(hours=2),
            job_spec=aiplatform_v1.CustomJobSpec(worker_pool_specs=[
                aiplatform_v1.WorkerPoolSpec(replica_count=1, machine_spec=aiplatform_v1.
                                             MachineSpec(machine_type="n1-standard-8"))]))
    fakes.vertex.tuning.jobs["projects/pets-detector-dev/locations/us-central1/"
                             "hyperparameterTuningJobs/4"] = aiplatform_v1.HyperparameterTuningJob(
        name="projects/pets-detector-dev/locations/us-central1/hyperparameterTuningJobs/4",
        labels={"run": "sweep1"}, trial_job_spec=fakes.vertex.jobs[
            "projects/pets-detector-dev/locations/us-central1/customJobs/9"].job_spec,
        trials=[aiplatform_v1.Trial(id=str(i), start_time=started,
                                    end_time=started + datetime.timedelta(hours=i))
                for i in (1, 2, 3)])
    cloud, cache = fakes.cloud, tmp_path / "cache"

    listed = cells(lookup.list_runs(tmp_path, cloud, cache_dir=cache))
    assert [row["run"] for row in listed] == ["sweep1/3", "gpu1"]
    assert [row["checkpoint"] for row in listed] == ["latest 100", "best 100"]
    gpu1, trial3 = (float(listed[i]["cost"].removesuffix(" USD")) for i in (1, 0))
    assert gpu1 > 0 and trial3 == pytest.approx(gpu1 * 3 / 2, abs=0.01)  # 3 h against 2 h

    out = lookup.compare(cloud, ["gpu1", "sweep1/3"], tmp_path / "report", cache_dir=cache)
    mirrored = sorted(p.relative_to(cache).as_posix() for p in cache.rglob("*") if p.is_file())
    assert not [p for p in mirrored if "ckpt-200.data" in p or p.endswith(".index")]
    assert "pets-data/runs/gpu1/checkpoints/eval/ckpt-200.json" in mirrored
    assert not (tmp_path / "escape.json").exists() and not (cache / "escape.json").exists()
    assert [row["run"] for row in cells(out.split("\n\n")[0])] == ["gpu1", "sweep1/3"]
    with pytest.raises(MissingError, match="no run 'gpu2'"):
        lookup.load(cloud, "gpu2", cache)
    image = Image.open(io.BytesIO((tmp_path / "report" / "loss_by_step.png").read_bytes()))
    assert image.size == (700, 420)


def test_the_invoke_tasks_list_and_compare(tmp_path):
    from tests.cli import REPO, invoke

    write_run(tmp_path / "runs" / "a")
    write_run(tmp_path / "runs" / "b", scale=0.5)
    listed = invoke("runs.list", f"--root={tmp_path / 'runs'}")
    assert listed.returncode == 0, listed.stderr
    assert [row["run"] for row in cells(listed.stdout.strip())] == \
        [str(tmp_path / "runs" / "a"), str(tmp_path / "runs" / "b")]
    compared = invoke("runs.compare", f"--run={tmp_path / 'runs'}",
                      f"--output-dir={tmp_path / 'report'}")
    assert compared.returncode == 0, compared.stderr
    assert (tmp_path / "report" / "report.html").exists()
    missing = f"../{tmp_path.name}-missing"  # neither a directory beside the repo nor a run id
    assert not (REPO / missing).exists()
    refused = invoke("runs.compare", f"--run={missing}")
    assert refused.returncode == 2 and refused.stderr.startswith(f"error: '{missing}' is neither")


def test_hostile_metrics_and_event_files_are_shown_missing(tmp_path):
    """Issue 27, cases 4 and 9: a 400-digit metric, a record declaring 2^62 bytes and a
    two-value total_loss are left out (shown '-'), never a traceback or a 2^62-byte read."""
    import struct
    import tracemalloc

    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
    from tensorboard.util import tensor_util

    run = write_run(tmp_path / "runs" / "run", loss=False)
    (run / "eval" / "ckpt-200.json").write_text(
        '{"step": 200, "metrics": {"AP": 1' + "0" * 400 + ', "AP50": 0.5}}')
    writer = EventFileWriter(str(run / "train"))
    for step, value in ((0, tensor_util.make_tensor_proto([1.0, 2.0])),
                        (1, tensor_util.make_tensor_proto(3.0)),
                        (2, tensor_util.make_tensor_proto(float("inf")))):
        writer.add_event(event_pb2.Event(step=step, summary=summary_pb2.Summary(value=[
            summary_pb2.Summary.Value(tag="total_loss", tensor=value)])))
    writer.close()
    (run / "train" / "events.out.tfevents.2.host").write_bytes(
        struct.pack("<Q", 1 << 62) + b"\0" * 12)
    tracemalloc.start()
    record = load_run(run)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 16 << 20
    assert record.losses == ((1, 3.0),)  # the scalar; two values and infinity ignored
    assert record.latest.metrics == {"AP50": 0.5}
    (row,) = cells(table([record]))
    assert (row["AP"], row["AP50"]) == ("-", "0.5000")
    out = lookup.compare(lambda: None, [str(run)], tmp_path / "report")
    assert "report: " in out
    (listed,) = cells(lookup.list_runs(tmp_path / "runs", cache_dir=tmp_path / "cache"))
    assert listed["AP"] == "-"


def test_run_names_from_data_reach_no_terminal_plot_or_spreadsheet_as_code(tmp_path):
    """Issue 27, case 7: an ESC sequence in a run's directory name is shown as '?', a class
    named "$a^^b$" is drawn as text, control characters in plot labels as '?' (no glyph
    warnings), an experiment named "=cmd" is no formula in table.csv."""
    import warnings

    from launch.text import printable, spreadsheet_cell
    from tests.cli import invoke

    run = write_run(tmp_path / "runs" / "\x1b]0;owned\x07red")
    (run / "run.json").write_text(json.dumps({"experiment": "=cmd|' /C calc'!A0"}))
    data = json.loads((run / "eval" / "ckpt-200.json").read_text())
    data["per_class"]["$a^^b$"] = {"AP": 0.5}
    data["per_class"]["bell\x07\x01"] = {"AP": 0.4}
    (run / "eval" / "ckpt-200.json").write_text(json.dumps(data))
    listed = invoke("runs.list", f"--root={tmp_path / 'runs'}")
    assert listed.returncode == 0, listed.stderr
    assert "\x1b" not in listed.stdout and "\x07" not in listed.stdout
    assert "?]0;owned?red" in listed.stdout
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        lookup.compare(lambda: None, [str(run)], tmp_path / "report")
    assert (tmp_path / "report" / "per_class_ap.png").exists()
    assert not [w for w in warned if "Glyph" in str(w.message)]  # every label made printable
    with open(tmp_path / "report" / "table.csv", newline="") as f:
        (row,) = list(csv.DictReader(f))
    assert row["experiment"] == "'=cmd|' /C calc'!A0"
    assert [spreadsheet_cell(v) for v in ("+1", "-0.5", "-", "@x", "\tx", -1.0, "ok")] == \
        ["+1", "-0.5", "'-", "'@x", "'\tx", -1.0, "ok"]
    assert printable("a\tb\nc\x1b[31m\x9b") == "a\tb\nc?[31m?"


def test_the_report_shows_each_runs_confusion_matrix_and_operating_point(tmp_path):
    """Issue 40: the matrix as a picture, P/R/F1 per class at the threshold and at each
    class's own best, and the threshold with its F1 in the table runs.compare prints."""
    from tests.test_confusion import BY_HAND, IMAGES, NAMES
    from trainer.evaluation import confusion

    point = confusion.operating_point(IMAGES, NAMES).as_json()
    with_point = write_run(tmp_path / "a", point=point)
    without = write_run(tmp_path / "b")
    out = lookup.compare(lambda: pytest.fail("local runs need no cloud"),
                         [str(with_point), str(without)], tmp_path / "report")
    rows = cells(out.split("\n\n")[0])
    assert (rows[0]["threshold"], rows[0]["P"], rows[0]["R"], rows[0]["F1"]) == \
        ("0.2000", "0.5000", "0.7500", "0.6000")
    assert (rows[1]["threshold"], rows[1]["F1"]) == ("-", "-")
    with open(tmp_path / "report" / "table.csv") as f:
        assert float(next(csv.DictReader(f))["F1"]) == pytest.approx(0.6)

    picture = Image.open(tmp_path / "report" / "confusion-1.png")
    pixels = np.asarray(picture.convert("RGB"))
    assert picture.format == "PNG" and len(np.unique(pixels.reshape(-1, 3), axis=0)) > 50
    assert not (tmp_path / "report" / "confusion-2.png").exists()
    page = (tmp_path / "report" / "report.html").read_text()
    section = page.split("<h2>Operating point</h2>", 1)[1].split("<h2>", 1)[0]
    assert "At score 0.2 (IoU 0.5): precision 0.50, recall 0.75, F1 0.60." in section
    assert section.count("data:image/png;base64,") == 1
    assert "<td>cat</td><td>0.50</td><td>1.00</td><td>0.67</td><td>0.9</td><td>0.67</td>" \
        in section
    assert "<td>dog</td><td>0.50</td><td>0.50</td><td>0.50</td><td>0.2</td><td>0.50</td>" \
        in section
    assert "No operating point recorded" in section  # the run evaluated without one
    assert BY_HAND[0.2] == point["confusion"]


def test_the_gallery_says_the_score_it_was_drawn_at_and_the_matrix_its_colours(tmp_path):
    """The worst images are drawn at the operating point shown above them (the
    evaluator records that score with each picture); an evaluation from before says 0.3; the
    confusion matrix says its colours are shares of a row, on the page and on the picture."""
    from launch.plots import ROW_SHARE, figure, heatmap
    from tests.test_confusion import IMAGES, NAMES
    from trainer.evaluation import confusion

    point = confusion.operating_point(IMAGES, NAMES).as_json()
    drawn_there = write_run(tmp_path / "a", point=point)
    for path in (drawn_there / "eval").glob("ckpt-*.json"):
        record = json.loads(path.read_text())
        for image in record["worst_images"]:
            image["score"] = point["threshold"]
        path.write_text(json.dumps(record))
    before = write_run(tmp_path / "b", point=point)
    lookup.compare(lambda: pytest.fail("local runs need no cloud"),
                   [str(drawn_there), str(before)], tmp_path / "report")
    page = (tmp_path / "report" / "report.html").read_text()
    gallery = page.split("<h2>Worst validation images</h2>", 1)[1]
    first, second = gallery.split("<h3>")[1:]
    assert "Coloured: detections scored 0.2 or more (the operating point above)." in first
    assert "At score 0.2 " in page  # the operating point above it
    assert "Coloured: detections scored 0.3 or more." in second
    assert "its colour is its share of the row" in page

    drawn = {}

    def draw(axes) -> bool:
        heatmap(axes, point["confusion"], point["classes"])
        drawn["bar"] = axes.figure.axes[-1].get_ylabel()
        return True

    assert figure(draw, tmp_path / "m.png", "m", "detected as", "object", legend=False)
    assert drawn["bar"] == ROW_SHARE == "colour: share of its row (numbers: counts)"
