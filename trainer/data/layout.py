"""A converted dataset's file names, in one place: `data convert` writes them, the trainer
reads them, and the launcher looks for them in the bucket before it starts a job."""

from __future__ import annotations

SPLITS = ("train", "val")
LABEL_MAP_FILENAME = "pet_label_map.pbtxt"


def shard_glob(split: str) -> str:
    return f"{split}.record-*"


def shard_name(split: str, index: int, num_shards: int) -> str:
    return f"{split}.record-{index:05d}-of-{num_shards:05d}"


def missing(names: list[str]) -> list[str]:
    """What a trainer's data directory lacks, given the file names in it."""
    needed = [shard_glob(split) for split in SPLITS] + [LABEL_MAP_FILENAME]
    return [want for want in needed
            if not any(name == want or (want.endswith("*") and name.startswith(want[:-1]))
                       for name in names)]
