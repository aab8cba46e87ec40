"""Conversion throughput on photo-sized images: images/s and input MB/s with one process and
with all cores, the scaling efficiency between them, against the reference-style converter
(one process, image headers only, no validation); then what those figures mean for real
datasets on Vertex AI machines (launch/targets/vertex/capacity.py).

Two sizes of photo: Pets-like (~500x375, the sample's own JPEGs) and COCO-like (640x480
pixels on average, re-encoded at a high quality so each is ~140 KB, near COCO's ~156 KB
mean). Whether the cost is per image (files, annotation, example) or per byte (reading,
the JPEG walk) shows in how images/s and MB/s change between the two; the capacity model
takes the COCO-like figures and charges each dataset the larger of the two costs.
"""

from __future__ import annotations

import dataclasses
import io
import os
import tempfile
import time
from pathlib import Path

from PIL import Image

from benchmarks.reference_converter import convert_reference
from launch.targets.vertex import capacity
from trainer.data import pets
from trainer.data.convert import convert_directory
from trainer.data.sample import write_sample


@dataclasses.dataclass(frozen=True)
class Photos:
    name: str
    scale: float  # write_sample's: 2 gives Pets' typical photos, not the demo's small ones
    quality: int | None  # re-encode at this JPEG quality (None: keep the sample's)


PETS_LIKE = Photos("Pets-like", 2.0, None)
COCO_LIKE = Photos("COCO-like", 2.25, 98)
REPEATS = 3  # the fastest of these counts: the run other processes disturbed least


@dataclasses.dataclass(frozen=True)
class Rates:
    images: int
    input_bytes: int  # the images and annotations conversion reads
    record_bytes: int
    one_process: float  # seconds
    all_cores: float
    cores: int

    @property
    def speed(self) -> capacity.Speed:
        return capacity.Speed(self.images / self.one_process,
                              self.input_bytes / capacity.MB / self.one_process,
                              self.one_process / self.all_cores / self.cores,
                              self.record_bytes / self.input_bytes)

    def lines(self, name: str) -> list[str]:
        speed = self.speed
        mb = self.input_bytes / capacity.MB
        return [
            f"{name}: {self.images} images, {self.input_bytes / self.images / 1000:.0f} KB "
            f"each with its annotation, records {speed.records_per_input_byte:.3f}x the input",
            f"  1 process:      {self.images / self.one_process:8.1f} images/s  "
            f"{mb / self.one_process:7.1f} MB/s   (per core)",
            f"  {self.cores} processes:    {self.images / self.all_cores:8.1f} images/s  "
            f"{mb / self.all_cores:7.1f} MB/s   "
            f"({self.images / self.all_cores / self.cores:.1f} images/s a core)",
            f"  scaling efficiency: {speed.scaling_efficiency:.2f} "
            f"({self.one_process / self.all_cores:.2f}x on {self.cores} cores)",
        ]


def _reencode(data_dir: Path, quality: int) -> None:
    for path in (data_dir / pets.IMAGES_DIR).glob("*.jpg"):
        buffer = io.BytesIO()
        Image.open(path).save(buffer, format="JPEG", quality=quality)
        path.write_bytes(buffer.getvalue())


def _size(paths) -> int:
    return sum(path.stat().st_size for path in paths)


def timed_conversion(data_dir: Path, output_dir: Path, processes: int) -> tuple[float, int]:
    """The fastest of REPEATS conversions (seconds) and the examples written."""
    seconds = []
    for repeat in range(REPEATS):
        start = time.perf_counter()
        report = convert_directory(data_dir, output_dir / str(repeat), processes=processes,
                                   progress=False)
        seconds.append(time.perf_counter() - start)
    return min(seconds), report["written"]


def measure(photos: Photos, root: Path, num_images: int, cores: int) -> tuple[Rates, Path]:
    data = write_sample(root / photos.name, num_images=num_images, scale=photos.scale)
    if photos.quality is not None:
        _reencode(data, photos.quality)
    names = pets.read_example_list(data / pets.TRAINVAL_LIST)  # what conversion reads
    input_bytes = _size(pets.image_path(data, name) for name in names) + \
        _size(pets.xml_path(data, name) for name in names)
    convert_directory(data, root / f"{photos.name}-warmup", processes=1, progress=False)  # cache
    one, written = timed_conversion(data, root / f"{photos.name}-one", 1)
    many, _ = timed_conversion(data, root / f"{photos.name}-many", cores)
    records = _size((root / f"{photos.name}-many" / "0").glob("*.record-*"))
    return Rates(written, input_bytes, records, one, many, cores), data


def main(num_images: int = 2000) -> dict:
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        pets_rates, pets_data = measure(PETS_LIKE, root, num_images, cores)
        start = time.perf_counter()
        reference_written = convert_reference(pets_data, root / "reference")
        reference = reference_written / (time.perf_counter() - start)
        coco_rates, _ = measure(COCO_LIKE, root, num_images, cores)
    load = os.getloadavg()[0]
    print(f"\nconversion on {cores} cores (load average {load:.1f} at the end: other "
          "processes share these cores)")
    for photos, rates in ((PETS_LIKE, pets_rates), (COCO_LIKE, coco_rates)):
        print("\n".join(rates.lines(photos.name)))
    all_cores = pets_rates.images / pets_rates.all_cores
    print(f"  reference style:  {reference:8.1f} images/s (Pets-like, 1 process, headers only)")
    print(f"  ours / reference: {all_cores / reference:8.2f}x")
    speed = coco_rates.speed
    print("\nWhat the COCO-like figures mean on Vertex AI (launch/targets/vertex/capacity.py; "
          "record these in capacity.yaml's `measured`, then `invoke docs.reference` rewrites "
          "docs/reference/capacity.md):\n")
    print("\n".join(capacity.table(capacity.Capacity.load(), speed)))
    return {"pets": dataclasses.asdict(pets_rates), "coco": dataclasses.asdict(coco_rates),
            "reference": reference, "speed": dataclasses.asdict(speed), "load": load}


if __name__ == "__main__":
    main()
