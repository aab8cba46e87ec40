"""Changes to a dataset made while it converts, so nobody edits annotation files by hand:
`--classes FILE` renames, merges, drops or keeps classes, and several `--source`s merge into
one dataset with one label map (by class name), each image once (by its bytes).

The `--classes` file (YAML), every key optional:

    rename: {cat: feline, kitten: feline}   # old -> new; several olds to one new merge
    drop: [dog]                             # these (named after renaming) are not written
    keep: [feline, bird]                    # or: only these are written (not with drop)

Renaming applies first; `drop` and `keep` name classes as renamed. A class a source does not
have, a name both dropped and kept, or a change that leaves no class is refused in one line
naming `--classes`. The label map after the changes is numbered 1..N in the order of each
class's smallest id before them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from trainer.common import yamlfile
from trainer.common.errors import SettingsError
from trainer.common.files import TEST
from trainer.common.io import read_regular
from trainer.data.label_map import listed
from trainer.data.planning import Source, SplitPlan, inside
from trainer.data.problems import Problem, ProblemLog
from trainer.data.reasons import CORE

if TYPE_CHECKING:
    from trainer.data.formats import Input, Planned

MAX_CLASSES_FILE_BYTES = 1 << 20
KEYS = ("rename", "drop", "keep")
# the report keys of these changes: their meanings are the core's
REASONS = {key: CORE[key] for key in ("classes_dropped", "duplicate_image", "in_test_split")}


@dataclasses.dataclass(frozen=True)
class ClassChanges:
    """A `--classes` file, read and checked for shape (names are checked against the data
    in `apply`)."""

    where: str  # "--classes FILE", for messages
    rename: Mapping[str, str] = dataclasses.field(default_factory=dict)
    drop: frozenset[str] = frozenset()
    keep: frozenset[str] | None = None

    @classmethod
    def read(cls, path: str | Path) -> ClassChanges:
        where = f"--classes {path}"
        try:
            text = read_regular(path, MAX_CLASSES_FILE_BYTES)
        except OSError as error:
            raise SettingsError(f"{where}: {error.strerror or error}") from None
        if len(text) > MAX_CLASSES_FILE_BYTES:
            raise SettingsError(f"{where} is more than {MAX_CLASSES_FILE_BYTES:,} bytes")
        return cls.of(yamlfile.loads(text, where, SettingsError), where)

    @classmethod
    def of(cls, data: object, where: str) -> ClassChanges:
        if not isinstance(data, dict) or not data:
            raise SettingsError(f"{where} must be a mapping with any of {', '.join(KEYS)} "
                                "(see docs/guides/data.md, `--classes`)")
        if unknown := [str(k) for k in data if k not in KEYS]:
            raise SettingsError(f"{where}: unknown key {listed(unknown)}; the keys are "
                                f"{', '.join(KEYS)}")
        rename = data.get("rename") or {}
        if not isinstance(rename, dict) or not all(
                isinstance(k, str) and isinstance(v, str) and v.strip()
                for k, v in rename.items()):
            raise SettingsError(f"{where}: rename must map class names to new names "
                                "(rename: {old: new})")
        lists = {}
        for key in ("drop", "keep"):
            value = data.get(key)
            if value is not None and not (isinstance(value, list) and
                                          all(isinstance(v, str) for v in value)):
                raise SettingsError(f"{where}: {key} must be a list of class names "
                                    f"({key}: [a, b])")
            lists[key] = value
        if lists["drop"] and lists["keep"] is not None:
            raise SettingsError(f"{where}: give drop or keep, not both (keep names every "
                                "class that stays)")
        return cls(where, {k: v.strip() for k, v in rename.items()},
                   frozenset(lists["drop"] or ()),
                   frozenset(lists["keep"]) if lists["keep"] is not None else None)

    def apply(self, label_map: Mapping[str, int]
              ) -> tuple[dict[str, int], dict[str, str], frozenset[str]]:
        """The label map after the changes, each renamed data class -> its new name, and
        the data classes dropped."""
        if unknown := set(self.rename) - set(label_map):
            raise SettingsError(f"{self.where}: rename names {listed(unknown)}, which the data "
                                f"does not have (its classes: {listed(label_map)})")
        final = {name: self.rename.get(name, name) for name in label_map}
        named = set(final.values())
        for key, names in (("drop", self.drop), ("keep", self.keep or frozenset())):
            if unknown := names - named:
                renamed = names & set(self.rename)
                hint = f" ({listed(renamed)} renamed: name the new names)" if renamed else ""
                raise SettingsError(f"{self.where}: {key} names {listed(unknown)}, not a class "
                                    f"after renaming{hint} (the classes: {listed(named)})")
        dropped_names = self.drop if self.keep is None else named - self.keep
        if dropped_names == named:
            raise SettingsError(f"{self.where} drops every class: keep at least one")
        order: dict[str, int] = {}
        for name, class_id in sorted(label_map.items(), key=lambda item: (item[1], item[0])):
            if final[name] not in dropped_names:
                order.setdefault(final[name], class_id)
        changed = {name: i for i, name in enumerate(
            sorted(order, key=lambda name: (order[name], name)), start=1)}
        aliases = {name: new for name, new in final.items()
                   if new != name and new not in dropped_names}
        return changed, aliases, frozenset(n for n in label_map if final[n] in dropped_names)


def merged_label_map(label_maps: Sequence[Mapping[str, int]]) -> dict[str, int]:
    """One label map of several sources' by class name: the first's ids kept; each class
    another adds numbered after the largest, in its id order."""
    merged = dict(label_maps[0])
    for label_map in label_maps[1:]:
        for name, _ in sorted(label_map.items(), key=lambda item: (item[1], item[0])):
            if name not in merged:
                merged[name] = max(merged.values(), default=0) + 1
    return merged


def image_digest(source: Source) -> str | None:
    """The SHA-256 of the example's image bytes, read in blocks; None when it is not a
    regular file inside the dataset or cannot be read (the converter names why when it gets
    to the example)."""
    path = source.image_path
    try:
        if not inside(path, source.root) or not stat.S_ISREG(path.stat().st_mode):
            return None
        if source.embedded:  # a LabelMe JSON: bounded by its reader
            return hashlib.sha256(source.embedded(path.read_bytes())).hexdigest()
        with open(path, "rb") as stream:
            return hashlib.file_digest(stream, "sha256").hexdigest()
    except (OSError, ValueError):
        return None


def merge(sources: Sequence[tuple[Input, Planned]]) -> tuple[SplitPlan, dict[str, int]]:
    """Several planned sources as one: source ids made unique (each source's numbered after
    the previous ones'), and an image whose bytes an earlier example has already (in any
    source or split) kept once (`duplicate_image`); the test splits' images come first, so
    that an image a source holds out for test is trained or validated on by none
    (`in_test_split`)."""
    entries = [(index, split, source) for index, (_, planned) in enumerate(sources)
               for split, planned_sources in planned.plan.splits.items()
               for source in planned_sources]
    seen: dict[str, tuple[str, str]] = {}  # sha256 -> (split, "source:name")
    dropped: dict[int, Problem] = {}  # by position in entries
    for position in sorted(range(len(entries)), key=lambda i: entries[i][1] != TEST):
        index, split, source = entries[position]  # test's first, then in order
        digest = image_digest(source)
        here = f"{sources[index][0]}: {source.name}"
        if digest is not None and digest in seen:
            where, other = seen[digest]
            held_out = where == TEST != split
            dropped[position] = Problem(
                "in_test_split" if held_out else "duplicate_image", "dropped",
                f"{here} has the same bytes as {other}{' (test)' if held_out else ''}; kept "
                "once")
        elif digest is not None:
            seen[digest] = (split, here)
    splits: dict[str, list[Source]] = {}
    problems = ProblemLog()
    positions = itertools.count()  # through entries, in their order
    offset = 0
    for _, planned in sources:
        problems.extend([planned.plan.problems])
        largest = 0
        for split, planned_sources in planned.plan.splits.items():
            for source in planned_sources:
                largest = max(largest, source.source_id)
                if problem := dropped.get(next(positions)):
                    problems.add((split, source.name), problem)
                    continue
                splits.setdefault(split, []).append(
                    dataclasses.replace(source, source_id=source.source_id + offset))
        offset += largest
    masks = any(planned.plan.masks for _, planned in sources)
    return (SplitPlan(splits, problems, masks),
            merged_label_map([planned.label_map for _, planned in sources]))


def _size(source: Source) -> int | None:
    """The image file's size, which equal bytes share; None for an image inside its label
    file (LabelMe's imageData: hashed whatever its size), -1 when it cannot be read."""
    if source.embedded:
        return None
    try:
        info = source.image_path.stat()
    except (OSError, ValueError):
        return -1
    return info.st_size if stat.S_ISREG(info.st_mode) else -1


def hold_out_test(plan: SplitPlan) -> SplitPlan:
    """No test image in train or val, by its bytes too (its name and its file are
    planning.deduplicate's): an example of train or val whose image has the bytes of a test
    example's is dropped there (`in_test_split`), the test one kept. Only images of a size
    both sides have are hashed, so that a large dataset is read once more only where two
    files may be one."""
    test = plan.splits.get(TEST)
    if not test:
        return plan
    others = [(split, source) for split, sources in plan.splits.items() if split != TEST
              for source in sources]
    sizes = {id(source): _size(source) for source in test} | \
        {id(source): _size(source) for _, source in others}
    test_sizes = {sizes[id(source)] for source in test}
    other_sizes = {sizes[id(source)] for _, source in others}

    def candidate(source: Source, against: set[int | None]) -> bool:
        size = sizes[id(source)]
        return size != -1 and (size is None or size in against or None in against)

    held: dict[str, str] = {}  # sha256 -> the test example's name
    for source in test:
        if candidate(source, other_sizes) and (digest := image_digest(source)) is not None:
            held.setdefault(digest, source.name)
    if not held:
        return plan
    kept: dict[str, list[Source]] = {split: [] for split in plan.splits}
    kept[TEST] = list(test)
    problems = ProblemLog()
    problems.extend([plan.problems])
    for split, source in others:
        digest = image_digest(source) if candidate(source, test_sizes) else None
        if digest in held:
            problems.add((split, source.name), Problem(
                "in_test_split", "dropped", f"{source.name!r} has the same bytes as test's "
                                            f"{held[digest]!r}; kept once, in test"))
            continue
        kept[split].append(source)
    return dataclasses.replace(plan, splits=kept, problems=problems)
