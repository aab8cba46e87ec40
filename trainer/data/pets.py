"""The Oxford-IIIT Pets directory layout, shared by sampling, download and conversion."""

from __future__ import annotations

import re
from pathlib import Path

from trainer.data.label_map import PETS_CLASSES, species_of

IMAGES_DIR = "images"
XMLS_DIR = "annotations/xmls"
TRIMAPS_DIR = "annotations/trimaps"
TRAINVAL_LIST = "annotations/trainval.txt"
TEST_LIST = "annotations/test.txt"
ALL_LIST = "annotations/list.txt"

_NAME = re.compile(r"^(?P<breed>.+)_(?P<number>\d+)$")


def breed_of(example_name: str) -> str | None:
    """`Russian_Blue_12` -> `Russian_Blue`; None when the name does not follow the Pets pattern."""
    match = _NAME.match(example_name)
    return match.group("breed") if match else None


def list_line(example_name: str) -> str:
    """A `list.txt` line: name, class id (1-37), species (1 cat, 2 dog), breed id within species."""
    breed = breed_of(example_name) or ""
    if breed not in PETS_CLASSES:
        return f"{example_name} 0 0 0"
    species = species_of(breed)
    same_species = [b for b in PETS_CLASSES if species_of(b) == species]
    return (
        f"{example_name} {PETS_CLASSES.index(breed) + 1} {1 if species == 'cat' else 2} "
        f"{same_species.index(breed) + 1}"
    )


def read_example_list(path: Path) -> list[str]:
    """Example names from a Pets split file: the first token of each non-comment line.

    A UTF-8 byte-order mark, CRLF line ends and trailing spaces are ignored. Bytes that are
    not UTF-8 are kept as surrogate escapes, so the name still finds its file on disk.
    """
    names = []
    text = path.read_bytes().decode("utf-8-sig", errors="surrogateescape")
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            names.append(line.split()[0])
    return names


def image_path(data_dir: Path, name: str) -> Path:
    return data_dir / IMAGES_DIR / f"{name}.jpg"


def xml_path(data_dir: Path, name: str) -> Path:
    return data_dir / XMLS_DIR / f"{name}.xml"


def trimap_path(data_dir: Path, name: str) -> Path:
    return data_dir / TRIMAPS_DIR / f"{name}.png"
