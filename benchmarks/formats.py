"""Every export format of one run on this CPU, in one table: COCO AP and AP50 on the run's
validation images (held out from its training, labelled as it was trained), p50/p90
milliseconds per image, images per second, size, load and export time, each against the
SavedModel. Needs a trained model directory (`invoke demo` writes work/demo/model).

The formats are measured interleaved: image by image, each format in turn (the order rotating),
so that a change in the machine's load falls on all of them alike. One image a call, after
warm-up, as an endpoint replica or a device answers one request. A SavedModel call includes its
in-graph resize; the other formats' calls include the host-side letterbox
(`trainer.export.pixels.letterbox`), whose own cost is the table's last row. "export s": the
SavedModel's and TFLite's whole export command; ONNX's and OpenVINO's conversion alone, as
export.json records it (OpenVINO's from the ONNX file, so it includes ONNX's).
"""

from __future__ import annotations

import datetime
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

WARMUP = 5
SERVED = ("--max_detections=100", "--min_score=0.05")  # the experiment's own bounds


def main(model_dir: str, images: int) -> list[dict]:
    from trainer.cli.main import main as trainer
    from trainer.common import files
    from trainer.export import pixels
    from trainer.export.agreement import coco_stats, held_out, top_agreement
    from trainer.model.model_dir import load_params
    from trainer.prediction.predict import load_detector

    if not Path(model_dir, files.RUN_FILE).exists():
        raise SystemExit(f"no trained model in {model_dir}: run `invoke demo` first")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        truth = held_out(str(load_params(model_dir).task.validation_data.input_path),
                         "bench.formats", images)
        print(f"exporting {model_dir} as a SavedModel, TFLite, ONNX and OpenVINO...", flush=True)
        converted = {}
        for name, flags in {"saved_model": (), "tflite": ("--format=tflite",),
                            "onnx,openvino": ("--format=onnx,openvino",)}.items():
            started = time.monotonic()
            if trainer(["export", f"--model_dir={model_dir}",
                        f"--export_dir={root / name.split(',')[0]}", *SERVED, *flags]):
                raise SystemExit(f"export --format {name} failed")
            converted[name] = time.monotonic() - started
        paths = {"SavedModel": root / "saved_model",
                 "TFLite (LiteRT)": root / "tflite" / files.TFLITE_FILE,
                 "ONNX (ONNX Runtime)": root / "onnx" / files.MODEL_FILES["onnx"],
                 "OpenVINO": root / "onnx" / files.MODEL_FILES["openvino"]}
        paths["OpenVINO, bf16"] = paths["OpenVINO"]  # OpenVINO's CPU default where it can
        loaders = {name: (lambda path=path: load_detector(str(path))[0])
                   for name, path in paths.items()}
        loaders["OpenVINO, bf16"] = lambda: _bf16(paths["OpenVINO"])
        detectors = {}
        for name, load in loaders.items():
            started = time.perf_counter()
            detector = load()
            detector(truth[0].picture)
            detectors[name] = (detector, time.perf_counter() - started)
        timings, answers = interleaved({k: v[0] for k, v in detectors.items()}, truth)
        sizes = {name: _size(path) for name, path in paths.items()}
        info = json.loads((root / "onnx" / files.EXPORT_INFO_FILE).read_text())
        size = info["onnx"]["input"]["shape"][1]
        decoded = [labelled.picture.pixels for labelled in truth]  # every format decodes
        letterbox_ms = [_timed(lambda image: pixels.letterbox(image, size, pixels.FLOAT), image)
                        for image in decoded]

    seconds = {"SavedModel": converted["saved_model"], "TFLite (LiteRT)": converted["tflite"],
               "ONNX (ONNX Runtime)": info["onnx"]["conversion_seconds"],
               "OpenVINO": info["openvino"]["conversion_seconds"],
               "OpenVINO, bf16": info["openvino"]["conversion_seconds"]}
    reference = answers["SavedModel"]
    rows = []
    for name, times in timings.items():
        stats = coco_stats(truth, answers[name])
        rows.append({"format": name, "ap": float(stats[0]), "ap50": float(stats[1]),
                     "p50": _percentile(times, 50), "p90": _percentile(times, 90),
                     "per_second": 1000 / statistics.mean(times), "mb": sizes[name],
                     "load_s": detectors[name][1], "convert_s": seconds[name],
                     "same_top": top_agreement(answers[name], reference)})
    report(rows, len(truth), statistics.median(letterbox_ms))
    return rows


def _bf16(path: Path) -> Callable:
    from trainer.detections.detector import Detections
    from trainer.export.openvino import OpenvinoDetector

    run = OpenvinoDetector(str(path), precision="bf16")
    return lambda picture: Detections(*run(picture.pixels))


def interleaved(detectors: dict[str, Callable], truth) -> tuple[dict, dict]:
    """Each image through every detector, the order rotating image by image: per detector,
    its milliseconds per image (after WARMUP calls each) and its answers."""
    names = list(detectors)
    for labelled in truth[:WARMUP]:
        for name in names:
            detectors[name](labelled.picture)
    times = {name: [] for name in names}
    answers = {name: [] for name in names}
    for index, labelled in enumerate(truth):
        for name in names[index % len(names):] + names[:index % len(names)]:
            started = time.perf_counter()
            answers[name].append(detectors[name](labelled.picture))
            times[name].append(1000 * (time.perf_counter() - started))
    return times, answers


def report(rows: list[dict], images: int, letterbox_ms: float) -> None:
    base = rows[0]
    print(f"\n{datetime.date.today()}, {images} held-out images, one a call, interleaved; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores\n")
    header = (f"{'format':22} {'AP':>6} {'AP50':>6} {'same top':>9} {'p50 ms':>7} "
              f"{'p90 ms':>7} {'img/s':>6} {'p50 vs SM':>9} {'MB':>6} {'load+1st s':>10} "
              f"{'export s':>9}")
    print(header)
    for row in rows:
        convert = f"{row['convert_s']:9.0f}"
        print(f"{row['format']:22} {row['ap']:6.3f} {row['ap50']:6.3f} {row['same_top']:9.1%} "
              f"{row['p50']:7.1f} {row['p90']:7.1f} {row['per_second']:6.1f} "
              f"{row['p50'] / base['p50']:8.2f}x {row['mb']:6.1f} {row['load_s']:10.2f} "
              f"{convert}")
    print(f"{'host letterbox alone':22} {'':6} {'':6} {'':9} {letterbox_ms:7.1f}")


def _timed(call: Callable, value) -> float:
    started = time.perf_counter()
    call(value)
    return 1000 * (time.perf_counter() - started)


def _percentile(values: list[float], percent: int) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(percent / 100 * (len(ordered) - 1)))]


def _size(path: Path) -> float:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6
    weights = path.with_suffix(".bin")
    return (path.stat().st_size + (weights.stat().st_size if path.suffix == ".xml" and
                                   weights.exists() else 0)) / 1e6
