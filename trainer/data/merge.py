"""A dataset version made of the one before it and new examples (`label.pull`'s): the
previous version's records, less the images the new examples label again, and the new ones,
split by split. An image labelled again keeps the split it had, so a model never meets a
test image in training because a person corrected it. Records are copied as bytes, never
decoded (no TensorFlow); the conversion report is made to count the merged whole.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Iterator
from pathlib import Path

from trainer.common import files
from trainer.data.tfrecord import TFRecordWriter, parse_example, records

FILENAME, SHA256, CLASS_TEXT = "image/filename", "image/key/sha256", "image/object/class/text"


def keys(example: dict) -> set[bytes]:
    """What makes two examples one image: its file name (label.pull names each image by
    its bytes' digest) or its stored image's digest (the same JPEG from another tool)."""
    return {b"name:" + v for v in example.get(FILENAME, ()) if v} | \
        {b"sha:" + v for v in example.get(SHA256, ()) if v}


def shards(folder: Path, split: str) -> list[Path]:
    return sorted(folder.glob(files.shard_glob(split)))


def examples(folder: Path, split: str) -> Iterator[tuple[bytes, dict]]:
    for shard in shards(folder, split):
        for record in records(shard):
            yield record, parse_example(record)


def merge(previous: Path, new: Path) -> dict:
    """Rewrites the converted `new` version in place as `previous` plus `new`: each split's
    shards are the new examples (moved to the split their image had before, if it had one)
    and then the previous version's, less those the new ones label again. What was kept,
    replaced and moved."""
    splits = [s for s in files.EVERY_SPLIT if shards(previous, s) or shards(new, s)]
    before: dict[bytes, str] = {}
    for split in splits:
        for _, example in examples(previous, split):
            before.update(dict.fromkeys(keys(example), split))
    pulled: dict[str, list[bytes]] = collections.defaultdict(list)
    relabelled: set[bytes] = set()
    moved = 0
    for split in splits:
        for record, example in examples(new, split):
            found = keys(example) & before.keys()
            home = before[min(found)] if found else split
            moved += home != split
            relabelled |= found
            pulled[home].append(record)
    for split in splits:
        for shard in shards(new, split):
            shard.unlink()
    counts: dict[str, dict] = {}
    kept = replaced = 0
    for split in splits:
        old = shards(previous, split)
        total = 1 + len(old)
        tally = Tally()
        with TFRecordWriter(new / files.shard_name(split, 0, total)) as out:
            for record in pulled[split]:
                out.write(record)
                tally.add(parse_example(record))
        for index, shard in enumerate(old, start=1):
            with TFRecordWriter(new / files.shard_name(split, index, total)) as out:
                for record in records(shard):
                    example = parse_example(record)
                    if keys(example) & relabelled:
                        replaced += 1
                        continue
                    out.write(record)
                    tally.add(example)
                    kept += 1
        counts[split] = {"examples": tally.examples, "classes": tally.classes}
    return {"from": previous.name, "kept": kept, "replaced": replaced,
            "moved_to_their_split": moved, "splits": counts}


class Tally:
    """A split's examples, and each class's images and objects (the report's `classes`)."""

    def __init__(self) -> None:
        self.examples = 0
        self.classes: dict[str, dict[str, int]] = {}

    def add(self, example: dict) -> None:
        self.examples += 1
        names = [v.decode("utf-8", "replace") for v in example.get(CLASS_TEXT, ())]
        for name, count in collections.Counter(names).items():
            entry = self.classes.setdefault(name, {"images": 0, "objects": 0})
            entry["images"] += 1
            entry["objects"] += count


def rewrite_report(folder: Path, final: Path, merged: dict | None) -> dict:
    """The conversion report of a version converted in `folder` that will be `final`: its
    paths under `final`, and with a merge (`merge`'s answer) its counts of the whole."""
    path = folder / files.CONVERSION_REPORT_FILE
    report = json.loads(path.read_text())
    report.update(label_map=str(final / files.DATA_LABEL_MAP_FILE),
                  report_path=str(final / files.CONVERSION_REPORT_FILE))
    if merged is not None:
        report["merged"] = {k: v for k, v in merged.items() if k != "splits"}
        report["classes"] = {s: c["classes"] for s, c in merged["splits"].items()}
        report["written"] = sum(c["examples"] for c in merged["splits"].values())
        report["splits"] = {s: {"examples": c["examples"]} for s, c in merged["splits"].items()}
    for split, entry in report.get("splits", {}).items():
        entry["pattern"] = str(final / files.shard_glob(split))
    path.write_text(json.dumps(report, indent=2) + "\n")
    return report
