"""Serving on this CPU: milliseconds per image for the SavedModel (both signatures) and the
TFLite exports, with each export's COCO AP50 and same-top agreement with the SavedModel on a
held-out sample. Needs a trained model directory (`invoke demo` writes work/demo/model).

Latency is one image a call, after warm-up, as an endpoint replica or a phone answers one
request: the median of the calls, so a stray slow call does not move it. The TFLite files run
on LiteRT's interpreter, as `predict` runs them (`trainer.export.tflite.TfliteDetector`).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

WARMUP = 3
HELD_OUT_IMAGES = 40


def _export(model_dir: str, out: Path, *flags: str) -> None:
    subprocess.run([sys.executable, "-m", "trainer", "export", f"--model_dir={model_dir}",
                    f"--export_dir={out}", *flags], check=True, capture_output=True)


def median_ms(call, pictures) -> float:
    for picture in pictures[:WARMUP]:
        call(picture)
    times = []
    for picture in pictures:
        start = time.perf_counter()
        call(picture)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def main(model_dir: str = "work/demo/model") -> list[dict]:
    import tensorflow as tf

    from trainer.common import files
    from trainer.data.convert import convert_directory
    from trainer.data.sample import write_sample
    from trainer.export.agreement import ap50, detect_all, labelled_images, top_agreement
    from trainer.prediction.predict import load_detector

    if not Path(model_dir, files.RUN_FILE).exists():
        raise SystemExit(f"no trained model in {model_dir}: run `invoke demo` first")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = write_sample(root / "held-out", num_images=HELD_OUT_IMAGES, seed=99)
        convert_directory(data, root / "records", num_shards=1, progress=False)
        truth = list(labelled_images(f"{root / 'records'}/{files.shard_glob('*')}"))
        pictures = [labelled.picture for labelled in truth]
        print(f"exporting {model_dir} (SavedModel, TFLite float32, float16, int8)...",
              flush=True)
        _export(model_dir, root / "saved_model")
        variants = {"float32": (), "float16": ("--quantize=float16",),
                    "int8": ("--quantize=int8",)}
        for name, flags in variants.items():
            _export(model_dir, root / name, "--format=tflite", *flags)

        saved_model, _ = load_detector(str(root / "saved_model"))
        reference = detect_all(saved_model, truth)
        as_bytes = tf.saved_model.load(str(root / "saved_model")).signatures["serving_bytes"]
        rows.append({"model": "SavedModel, uint8 signature", "ms": median_ms(
            saved_model, pictures), "ap50": ap50(truth, reference), "same_top": 1.0,
            "mb": _size(root / "saved_model")})
        rows.append({"model": "SavedModel, bytes signature (what an endpoint runs)",
                     "ms": median_ms(lambda p: as_bytes(tf.constant([p.encoded])), pictures),
                     "ap50": None, "same_top": None, "mb": None})
        for name in variants:
            path = root / name / files.TFLITE_FILE
            lite, _ = load_detector(str(path))
            found = detect_all(lite, truth)
            rows.append({"model": f"TFLite {name}", "ms": median_ms(lite, pictures),
                         "ap50": ap50(truth, found), "same_top": top_agreement(reference, found),
                         "mb": path.stat().st_size / 1e6})
    print(f"\n{len(truth)} held-out images, one a call, median of each\n")
    print(f"{'model':54} {'ms/image':>9} {'AP50':>6} {'same top':>9} {'MB':>6}")
    for row in rows:
        print(f"{row['model']:54} {row['ms']:9.1f} {_or_dash(row['ap50'], '6.3f')} "
              f"{_or_dash(row['same_top'], '9.0%')} {_or_dash(row['mb'], '6.1f')}")
    base = rows[0]["ms"]
    print("\nspeed-up over the SavedModel: " + ", ".join(
        f"{row['model'].removeprefix('TFLite ')} {base / row['ms']:.1f}x"
        for row in rows if row["model"].startswith("TFLite")))
    return rows


def _size(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6


def _or_dash(value, spec: str) -> str:
    width = int(spec.split(".")[0].rstrip("%f"))
    return format(value, spec) if value is not None else "-".rjust(width)
