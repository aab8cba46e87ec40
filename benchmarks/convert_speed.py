"""Conversion throughput: examples/s with one process and with all cores, against the
reference-style converter (one process, image headers only, no validation)."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from benchmarks.reference_converter import convert_reference
from trainer.data.convert import convert_directory
from trainer.data.sample import write_sample

PHOTO_SCALE = 2.0  # images the size of Pets' photos (about 500x375), not the demo's small ones


def timed_conversion(data_dir: Path, output_dir: Path, processes: int) -> tuple[float, int]:
    start = time.perf_counter()
    report = convert_directory(data_dir, output_dir, processes=processes, progress=False)
    return time.perf_counter() - start, report["written"]


def main(num_images: int = 2000) -> dict:
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp:
        data = write_sample(Path(tmp) / "pets", num_images=num_images, scale=PHOTO_SCALE)
        timed_conversion(data, Path(tmp) / "warmup", 1)  # imports and file cache
        one, written = timed_conversion(data, Path(tmp) / "one", 1)
        many, _ = timed_conversion(data, Path(tmp) / "many", cores)
        start = time.perf_counter()
        reference_written = convert_reference(data, Path(tmp) / "reference")
        reference = time.perf_counter() - start
    result = {"examples": written, "one_process": written / one, "all_cores": written / many,
              "reference": reference_written / reference, "cores": cores}
    print(f"\nconverted {written} examples")
    print(f"  1 process:        {result['one_process']:8.1f} examples/s")
    print(f"  {cores} processes:      {result['all_cores']:8.1f} examples/s")
    print(f"  speed-up:         {result['all_cores'] / result['one_process']:8.2f}x")
    print(f"  reference style:  {result['reference']:8.1f} examples/s (1 process, headers only)")
    print(f"  ours / reference: {result['all_cores'] / result['reference']:8.2f}x")
    return result


if __name__ == "__main__":
    main()
