"""Whether a directory's files are one complete converted dataset (their names are in
`trainer.common.files`): the trainer's --data-dir, or the bucket's records/ before a job starts.
Train and val are always there; a test split may be, and then is one complete set too."""

from __future__ import annotations

from trainer.common.files import (
    DATA_LABEL_MAP_FILE,
    DATA_LABEL_MAP_FILES,
    EVERY_SPLIT,
    SHARD,
    SPLITS,
    shard_glob,
    shard_name,
)


def missing(names: list[str]) -> list[str]:
    """What a trainer's data directory lacks, given the file names in it."""
    needed = [shard_glob(split) for split in SPLITS]
    missing = [want for want in needed
               if not any(name.startswith(want[:-1]) for name in names)]
    return missing + ([] if set(DATA_LABEL_MAP_FILES) & set(names) else [DATA_LABEL_MAP_FILE])


def _listed(items: list[str], most: int = 3) -> str:
    return ", ".join(items[:most]) + (f" and {len(items) - most} more" if len(items) > most
                                      else "")


def problems(names: list[str]) -> list[str]:
    """What keeps a directory's files from being exactly one complete conversion, as clauses
    ("has no ...", "mixes ..."). Training reads every file its split's glob matches, so a
    stale shard of an earlier conversion, or a missing one, would silently change the data."""
    found = [f"has no {', '.join(lacking)}"] if (lacking := missing(names)) else []
    for split in EVERY_SPLIT:  # test: none, or one complete set
        prefix = shard_glob(split).removesuffix("*")
        shards = {name: SHARD.fullmatch(name.removeprefix(prefix)) for name in names
                  if name.startswith(prefix)}
        if odd := sorted(name for name, match in shards.items() if match is None):
            found.append(f"has {_listed(odd)}, not named like {shard_name(split, 0, 1)}")
        sets = {int(m["total"]) for m in shards.values() if m}
        if len(sets) > 1:
            found.append(f"mixes {shard_glob(split)} sets of "
                         f"{' and '.join(map(str, sorted(sets)))} shards")
        elif sets:
            total, have = sets.pop(), {int(m["index"]) for m in shards.values() if m}
            if absent := [shard_name(split, i, total) for i in range(total) if i not in have]:
                found.append(f"lacks {_listed(absent)}")
            if beyond := [shard_name(split, i, total) for i in sorted(have) if i >= total]:
                found.append(f"has {_listed(beyond)}, beyond its set")
    return found
