"""Label maps in the Object Detection API's pbtxt text format (its Pets quick start's
`pet_label_map.pbtxt`)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from trainer.common.errors import LabelMapError
from trainer.common.io import NotRegularFile, read_text

# The 37 Oxford-IIIT Pets breeds with their ids in the Object Detection API's pet_label_map.pbtxt.
# Cat breeds are capitalised, dog breeds lower-case, exactly as in the dataset's file names.
PETS_CLASSES: tuple[str, ...] = (
    "Abyssinian", "american_bulldog", "american_pit_bull_terrier", "basset_hound", "beagle",
    "Bengal", "Birman", "Bombay", "boxer", "British_Shorthair", "chihuahua", "Egyptian_Mau",
    "english_cocker_spaniel", "english_setter", "german_shorthaired", "great_pyrenees",
    "havanese", "japanese_chin", "keeshond", "leonberger", "Maine_Coon", "miniature_pinscher",
    "newfoundland", "Persian", "pomeranian", "pug", "Ragdoll", "Russian_Blue", "saint_bernard",
    "samoyed", "scottish_terrier", "shiba_inu", "Siamese", "Sphynx",
    "staffordshire_bull_terrier", "wheaten_terrier", "yorkshire_terrier",
)  # fmt: skip


def pets_label_map() -> dict[str, int]:
    """Class name -> id (1-based; 0 is the background class)."""
    return {name: index for index, name in enumerate(PETS_CLASSES, start=1)}


def species_of(breed: str) -> str:
    """Pets convention: cat breeds are capitalised, dog breeds are not."""
    return "cat" if breed[:1].isupper() else "dog"


UNSAFE_NAME = re.compile(r"[\"'\\{}\x00-\x1f\x7f-\x9f]")
MAX_NAME = 200


def safe_name(name: str) -> str:
    """The name as the label map can hold it: no quote, backslash, brace or control character
    (each would end the item or the name early for `parse_label_map`), at most 200 long."""
    return UNSAFE_NAME.sub("_", name)[:MAX_NAME]


def listed(names: Iterable[str], most: int = 8) -> str:
    """Names for a one-line message: sorted, at most `most` of them and how many more."""
    names = sorted(names)
    return ", ".join(names[:most]) + (f" and {len(names) - most} more"
                                      if len(names) > most else "")


def alike(names: Iterable[str]) -> list[list[str]]:
    """The groups of names that differ only in case, spaces, '_' or '-' ('Great Pyrenees',
    'great_pyrenees'): likely one class named two ways, which merging by name keeps apart."""
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(re.sub(r"[\s_-]+", "", name).casefold(), []).append(name)
    return [sorted(group) for group in groups.values() if len(group) > 1]


def safe_names(items: Iterable[tuple[int, str]]) -> list[str]:
    """The label-map names of (id, name) pairs, in their order: each `safe_name`, and none
    that an earlier pair holds already, so two names that differ only in what cleaning
    replaces or cuts ('a{' and 'a}') stay two classes: a taken name gets '_ID' appended
    (then '_ID_2', ...), within MAX_NAME."""
    taken: set[str] = set()
    names = []
    for class_id, name in items:
        safe = base = safe_name(name)
        tries = 0
        while safe in taken:
            tries += 1
            suffix = f"_{class_id}" if tries == 1 else f"_{class_id}_{tries}"
            safe = base[:MAX_NAME - len(suffix)] + suffix
        taken.add(safe)
        names.append(safe)
    return names


def written_names(label_map: Mapping[str, int]) -> dict[str, str]:
    """Each name of `label_map` -> the name its written label map holds (in id order, so the
    first of two clashing names keeps it)."""
    items = sorted(label_map.items(), key=lambda item: (item[1], item[0]))
    return dict(zip([name for name, _ in items], safe_names((i, n) for n, i in items),
                    strict=True))


def format_label_map(label_map: Mapping[str, int]) -> str:
    """The pbtxt text; names made safe and unique here, once, so every reader parses what was
    written, a class for each id."""
    written = written_names(label_map)
    return "".join(f"item {{\n  id: {i}\n  name: '{written[name]}'\n}}\n\n"
                   for name, i in sorted(label_map.items(), key=lambda item: (item[1], item[0])))


def write_label_map(label_map: Mapping[str, int], path: str | Path) -> Path:
    path = Path(path)
    path.write_text(format_label_map(label_map), encoding="utf-8")
    return path


_ITEM = re.compile(r"item\s*\{(.*?)\}", re.DOTALL)
_ID = re.compile(r"\bid\s*:\s*(\d+)")
_NAME = re.compile(r"\b(?:display_)?name\s*:\s*[\"']([^\"']*)[\"']")


MAX_ID = 100_000  # LVIS has 1,203 classes, ImageNet-21k 21,841


def parse_label_map(text: str) -> dict[str, int]:
    """Parses the pbtxt label-map format (`item { id: 1 name: 'cat' }`)."""
    label_map: dict[str, int] = {}
    for body in _ITEM.findall(text):
        id_match, name_match = _ID.search(body), _NAME.search(body)
        if not (id_match and name_match):
            raise LabelMapError(f"label map item without id or name: {body.strip()!r}")
        label_map[name_match.group(1)] = int(id_match.group(1))
    if not label_map:
        raise LabelMapError("label map has no `item { id: N name: '...' }` entries")
    if 0 in label_map.values():
        raise LabelMapError("label map id 0 is reserved for the background class")
    if (largest := max(label_map.values())) > MAX_ID:
        raise LabelMapError(f"label map id {largest} is too large: the model gets one output "
                            f"per id up to the largest, so ids must be at most {MAX_ID:,}")
    return label_map


def read_label_map(path: str | Path) -> dict[str, int]:
    try:
        return parse_label_map(read_text(str(path)))
    except NotRegularFile as error:  # a FIFO would wait for a writer, /dev/zero never end
        raise LabelMapError(f"label map {path}: {error}") from None


def id_to_name(label_map: Mapping[str, int]) -> dict[int, str]:
    return {i: name for name, i in label_map.items()}
