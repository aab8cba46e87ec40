"""The Oxford-IIIT Pets directory layout, shared by sampling, download and conversion."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from trainer.data.label_map import PETS_CLASSES, species_of

if TYPE_CHECKING:
    import numpy as np
    from PIL import Image

IMAGES_DIR = "images"
XMLS_DIR = "annotations/xmls"
TRIMAPS_DIR = "annotations/trimaps"
TRAINVAL_LIST = "annotations/trainval.txt"
TEST_LIST = "annotations/test.txt"
ALL_LIST = "annotations/list.txt"
TRIMAP_BACKGROUND = 2  # a trimap's values: 1 pet, 2 background, 3 the border between them

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


def pet_mask(trimap: Image.Image) -> np.ndarray:
    """The pet's pixels in a trimap: the pet and its uncertain border (all but background),
    as the Object Detection API's create_pet_tf_record reads them."""
    import numpy as np

    return np.asarray(trimap.convert("L")) != TRIMAP_BACKGROUND


def mask_bounds(mask: np.ndarray) -> tuple[int, int, int, int] | None:
    """The box around a mask's pixels (xmin, ymin, xmax, ymax; max exclusive), in pixels;
    None when it has none."""
    import numpy as np

    rows, columns = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
    if not rows.size:
        return None
    return int(columns[0]), int(rows[0]), int(columns[-1]) + 1, int(rows[-1]) + 1
