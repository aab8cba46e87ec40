"""What every format's planning produces and shares: the examples to convert (`Source`), by
split (`SplitPlan`), the split rule, and the checks on the names a dataset lists.

The converter's core (`trainer.data.convert`) takes a `SplitPlan` and nothing format-specific;
the formats (`trainer.data.formats`) make one from their files.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from trainer.common.errors import SettingsError
from trainer.common.files import TEST, TRAIN, VAL
from trainer.common.options import number
from trainer.data import defaults
from trainer.data.problems import Problem, ProblemLog

if TYPE_CHECKING:
    from trainer.data.annotation import Annotation

SPLIT_SEED = 42  # the Object Detection API's create_pet_tf_record seed
TRAIN_FRACTION = 0.7
# The converter's flags these checks name, as `trainer.args.ConvertArgs` shows them
SPLIT_FLAG, MAX_OBJECTS_FLAG = "--split", "--max-objects"


@dataclasses.dataclass(frozen=True)
class Limits:
    """The caps every format's planner and the converter's core share, so that whatever a
    dataset holds, one example costs a bounded amount of memory and time.

    An image over `max_pixels` (a file over `max_file_bytes()`) is refused unread. A label
    file (VOC's XML, YOLO's .txt, LabelMe's JSON outside its embedded image) over
    `max_label_bytes`, or of more than `max_objects` objects (every YOLO line and LabelMe
    shape is one, polygons too), is skipped and named before its objects are made. Planning
    reads one label file at a time and keeps counts, never objects (COCO, whose one JSON is
    the dataset, keeps its parse, bounded by coco.MAX_JSON_BYTES); the process that writes an
    example parses its labels again. So a process holds at most one label file's bytes and
    its parse: at most PARSE_FACTOR x `max_label_bytes` (measured on the worst shapes by
    tests/test_convert_hostile.py), plus, for LabelMe, the file's embedded image."""

    max_pixels: int = defaults.MAX_PIXELS
    max_objects: int = defaults.MAX_OBJECTS
    max_label_bytes: int = defaults.MAX_LABEL_BYTES

    PARSE_FACTOR: ClassVar[int] = 30

    def __post_init__(self) -> None:
        if problem := defaults.max_pixels_problem(self.max_pixels):
            raise SettingsError(problem)
        if self.max_objects < 1:
            raise SettingsError(f"{MAX_OBJECTS_FLAG} must be at least 1, got "
                                f"{self.max_objects}")
        if self.max_label_bytes < 1:
            raise SettingsError(f"max_label_bytes must be at least 1, got "
                                f"{self.max_label_bytes}")

    def max_file_bytes(self) -> int:
        """No image within the pixel cap needs more bytes than its raw RGBA pixels (plus
        headers): a larger file is refused before it is read."""
        return 4 * self.max_pixels + (1 << 20)

    def max_embedding_bytes(self) -> int:
        """The largest file that embeds an image (LabelMe's imageData): the image's file in
        base64 (4/3 of its bytes) and the labels. The one limit the planner and the
        converter apply to such a file."""
        return -(-self.max_file_bytes() // 3) * 4 + self.max_label_bytes


@dataclasses.dataclass(frozen=True)
class Split:
    """How examples are split when a dataset has no split of its own, or when `--split`
    re-splits one (`given`): a seeded shuffle, the first `fraction` train, the rest val; or,
    with `val_fraction` (`--split TRAIN,VAL`), the next `val_fraction` val and the rest a
    held-out test split. The defaults are the Object Detection API's Pets split."""

    fraction: float = TRAIN_FRACTION
    seed: int = SPLIT_SEED
    given: bool = False  # --split: re-split even a dataset that has its own split
    val_fraction: float | None = None  # --split TRAIN,VAL: the rest is test

    @property
    def names(self) -> tuple[str, ...]:
        """The splits it makes."""
        return (TRAIN, VAL) if self.val_fraction is None else (TRAIN, VAL, TEST)

    def shown(self) -> str:
        """As `--split` takes it: 0.7, or 0.7,0.2."""
        return f"{self.fraction:g}" + ("" if self.val_fraction is None
                                       else f",{self.val_fraction:g}")


def parse_split(value: str | float, flag: str = SPLIT_FLAG) -> tuple[float, float | None]:
    """`--split` as typed: the train fraction (`0.8`: train and val), or the train and val
    fractions (`0.7,0.2`: the rest, 10%, a held-out test split); each strictly between 0 and
    1, two summing to less than 1. Anything else (nan, inf, 1e400, `0.7,`, three values) is
    one SettingsError naming `flag`."""
    text = value if isinstance(value, str) else repr(value)
    parts = text.split(",")
    if len(parts) > 2:
        raise SettingsError(f"{flag} takes the train fraction (0.8) or the train and val "
                            f"fractions (0.7,0.2), not {len(parts)} values: got {text[:80]!r}")
    fractions = []
    for part in parts:
        try:
            fraction = number(part.strip(), float, flag)
        except SettingsError:
            if len(parts) == 1:
                raise  # the one number reader's words: must be a number, got 'nan'
            fraction = None
        if fraction is None or not 0 < fraction < 1:
            if len(parts) == 1 and fraction is not None:
                raise SettingsError(f"{flag} is the train fraction, between 0 and 1 (0.8: 80% "
                                    f"train), got {fraction:g}")
            raise SettingsError(f"{flag} is the train fraction (0.8: 80% train, 20% val) or "
                                "the train and val fractions (0.7,0.2: 10% test), each "
                                f"between 0 and 1, got {text[:80]!r}")
        fractions.append(fraction)
    if len(fractions) == 1:
        return fractions[0], None
    train, val = fractions
    if train + val >= 1 or math.isclose(train + val, 1):
        raise SettingsError(f"{flag} {text[:80]} leaves no test split: the train and val "
                            "fractions must sum to less than 1 (0.7,0.2: 10% test)")
    return train, val


@dataclasses.dataclass(frozen=True)
class Source:
    """One example to convert: where its files are and how it is identified."""

    name: str
    image_path: Path
    xml_path: Path | None  # the annotation file (VOC XML unless `read`); None: `annotation`
    source_id: int  # decimal integer: Model Garden and COCO evaluation cast it to int64
    root: Path  # the data directory, resolved: every file read must stay inside it
    class_name: str | None = None  # Pets: the breed from the file name; VOC: each <name>
    trimap_path: Path | None = None
    annotation: Annotation | None = None  # the image's objects, read while planning (COCO)
    # the format's reader of `xml_path` (YOLO's labels, LabelMe's JSON), called where the
    # example is written, so that planning keeps no objects; None: VOC XML
    read: Callable[[Path, Limits], Annotation] | None = None
    masks: bool = False  # instance masks from each object's segmentation
    # LabelMe: the image is inside `image_path` (its JSON); this takes it out of the bytes
    embedded: Callable[[bytes], bytes] | None = None
    record_name: str | None = None  # `image/filename` (default: the image file's name)
    # labelled as showing no object (YOLO's empty or missing label file, LabelMe's empty
    # shapes): written without objects, a background image, rather than skipped
    background: bool = False


@dataclasses.dataclass(frozen=True)
class SplitPlan:
    """The examples of each split, and what planning had to fix in the split lists."""

    splits: dict[str, list[Source]]
    problems: ProblemLog = dataclasses.field(default_factory=ProblemLog)  # (split, name)
    masks: bool = False  # every example written gets instance masks (`--masks`)


def split_names(names: Sequence, split: Split | None = None) -> dict[str, list]:
    """The Object Detection API's Pets split: seeded shuffle, first 70% train, the rest val
    (or `split`'s fraction and seed); with `split.val_fraction`, the next part val and the
    rest test."""
    split = split or Split()
    shuffled = list(names)
    random.Random(split.seed).shuffle(shuffled)
    num_train = int(split.fraction * len(shuffled))
    if split.val_fraction is None:
        return {TRAIN: shuffled[:num_train], VAL: shuffled[num_train:]}
    num_val = int(split.val_fraction * len(shuffled))
    return {TRAIN: shuffled[:num_train], VAL: shuffled[num_train:num_train + num_val],
            TEST: shuffled[num_train + num_val:]}


def resplit_names(lists: Mapping[str, Sequence], split: Split) -> dict[str, list]:
    """A dataset's lists split again by `split`: one fraction re-splits the train and val
    names (in that order) and keeps the dataset's own test list as it is, held out; two
    fractions re-split every name, test's too."""
    test = list(lists.get(TEST) or ())
    if split.val_fraction is not None:
        return split_names([name for names in lists.values() for name in names], split)
    found = split_names([name for key, names in lists.items() if key != TEST
                         for name in names], split)
    return {**found, TEST: test} if test else found


def resplit(plan: SplitPlan, split: Split) -> SplitPlan:
    """The plan's examples (train, then val, in order) split again by `split` (test kept,
    or re-split too with two fractions: `resplit_names`)."""
    return dataclasses.replace(plan, splits=resplit_names(plan.splits, split))


def check_split(plan: SplitPlan, split: Split) -> None:
    """A `--split` that leaves the train or the val split (or with two fractions the test
    split) without an image, given the images planned, is refused before anything is
    written (an empty train split trains on nothing); a dataset's own split, or one that is
    not `--split`, is taken as it is."""
    counts = {name: len(sources) for name, sources in plan.splits.items()}
    total = sum(counts.values())
    if not split.given or not total or all(counts.get(name) for name in split.names):
        return
    empty = next(name for name in split.names if not counts.get(name))
    least = math.ceil(1000 / total) / 1000  # 3 decimals that still give one image to train
    fix = "add images" if total < len(split.names) else \
        f"give a fraction of at least {least:g}, below 1" if split.val_fraction is None else \
        f"give fractions of at least {least:g} each, summing to at most {1 - least:g}"
    found = ", ".join(f"{counts.get(name, 0)} {name}" for name in split.names)
    raise SettingsError(f"{SPLIT_FLAG} {split.shown()} leaves the {empty} "
                        f"split empty ({total} image{'s' if total > 1 else ''}: {found}): "
                        f"{fix}")


def source_ids(names: Iterable[str]) -> dict[str, int]:
    return {name: index for index, name in enumerate(sorted(set(names)), start=1)}


def invalid_name(name: str) -> bool:
    """A name is one file name: no separators (no traversal, no aliases), no NUL."""
    return any(c in name for c in "/\\\0") or name in (".", "..")


def invalid_path(name: str) -> bool:
    """A relative path below a data directory (COCO's file_name may have folders): no
    leading '/', no '..', '.' or empty segment, no backslash, no NUL."""
    return name.startswith("/") or any(c in name for c in "\\\0") or \
        any(part in ("", ".", "..") for part in name.split("/"))


def unlabelled_test(test: Sequence[str], labelled: Callable[[str], bool], reason: str,
                    lacking: str) -> Problem | None:
    """The one rule for a dataset's own test list: its images are the test split when at
    least half of them have labels (`labelled`); a test list of mostly unlabelled images (the
    benchmarks' withheld ones: Oxford-IIIT Pets' test.txt, VOC2012's test devkit, COCO's
    test-dev, a Kaggle test set) would be a test split of images without objects, and is
    none: the flagged Problem (`reason`) that says so, `lacking` what its images lack. None
    when the list is empty or labelled enough."""
    if not test:
        return None
    count = sum(1 for name in test if labelled(name))
    if 2 * count >= len(test):
        return None
    return Problem(reason, "flagged", f"{len(test) - count} of its {len(test)} images have "
                                      f"{lacking}: it is not converted as a test split")


def _identity(path: Path) -> Path:
    """The file a path names, through symlinks; a symlink loop is its own identity (and is
    named when the example is converted)."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return path


def deduplicate(lists: Mapping[str, Sequence[str]], image_of: Callable[[str], Path],
                listed_in: str, invalid: Callable[[str], bool] = invalid_name
                ) -> tuple[dict[str, list[str]], ProblemLog]:
    """Each image once (named directly, or through a symlink to it): a name listed twice is
    converted once, and no image is in two splits. The test list is read first, so that
    an image it holds is never trained or validated on (`in_test_split`); otherwise the
    first list that names an image keeps it."""
    first: dict[Path, tuple[str, str]] = {}
    kept: dict[str, list[str]] = {split: [] for split in lists}
    problems = ProblemLog()
    for split in sorted(lists, key=lambda split: split != TEST):  # stable: test first
        for name in lists[split]:
            if invalid(name):
                problems.add((split, name), Problem(
                    "invalid_name", "skipped", f"{listed_in}: {name!r} is not a plain "
                                               "relative file name (it has '..', a leading "
                                               "'/', '\\' or NUL)"))
                continue
            image = _identity(image_of(name))
            if image in first:
                where, other = first[image]
                same = f"{name!r}" if other == name else f"{name!r} (the image of {other!r})"
                reason = "duplicate_name" if where == split else \
                    "in_test_split" if where == TEST else "in_train_and_val"
                problems.add((split, name), Problem(
                    reason, "dropped", f"{listed_in}: {same} is listed again in {split}; "
                                        f"kept once, in {where}"))
                continue
            first[image] = (split, name)
            kept[split].append(name)
    return kept, problems


def inside(path: Path, root: Path) -> bool:
    """Whether `path` (through `..` and symlinks) stays below the resolved `root`."""
    return _identity(path).is_relative_to(root)
