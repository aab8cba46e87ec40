"""The images endpoints kept for labelling, gs://BUCKET/asked/MODEL/DAY/SHA256.EXT (written
by the serving image, serving/asked.py, for a version uploaded with `--keep-asked`), staged
here for `invoke label.push --asked MODEL`.

Their names are data, and anyone who can write the bucket could have put objects there: only
a name of that shape is taken, an object's size is checked before it is read, its bytes
against its name's digest after, and each file here is named by this code (the digest and the
format), never by the bucket. Anything else is skipped and named.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import re
from pathlib import Path

from launch.errors import InputError
from launch.stores.gcs.upload import list_blobs
from launch.text import printable
from serving.asked import KEPT_NAME, NAME
from serving.front import MAX_BODY
from trainer.common.files import ASKED_PREFIX

MAX_IMAGES = 5_000  # a push's worth, the newest days first; the rest wait for the next
MAX_IMAGE_BYTES = MAX_BODY  # no request the serving front took carried a larger image


@dataclasses.dataclass(frozen=True)
class Staged:
    images: list[Path]
    skipped: dict[str, str]  # an object's name, as shown -> why it was left out
    more: int  # kept images past MAX_IMAGES, left for a later push

    def lines(self, where: str) -> list[str]:
        said = [f"{len(self.images)} image(s) endpoints were asked about, kept in {where}"
                + (f"; {self.more} older one(s) wait for the next push" if self.more else "")]
        said += [f"skipped {name}: {why}" for name, why in list(self.skipped.items())[:10]]
        if len(self.skipped) > 10:
            said.append(f"and {len(self.skipped) - 10} more skipped")
        return said


def check_model(model: str) -> str:
    """--asked: a Model's name as `model.upload` gives it (its experiment's, with dashes)."""
    if not re.fullmatch(NAME, model):
        raise InputError(f"--asked {printable(model[:80])!r}: give the served Model's name, "
                         "as `invoke model.upload` names it (e.g. pets-retinanet-mobilenet)")
    return model


def check_since(since: str | None) -> datetime.date | None:
    """--since: a day, YYYY-MM-DD (the kept images' folders are named by theirs)."""
    if not since:
        return None
    try:
        return datetime.date.fromisoformat(since)
    except ValueError:
        raise InputError(f"--since {printable(since[:40])!r}: give a day as YYYY-MM-DD "
                         "(2026-12-01: the images kept that day and after)") from None


def stage(client, bucket: str, model: str, out: Path,
          since: datetime.date | None = None) -> Staged:
    """The kept images of `model` (those kept on `since` or after) in `out`, an empty folder
    of the caller's (labelling's `fresh`), newest first."""
    folder = f"{ASKED_PREFIX}/{check_model(model)}"
    wanted, skipped = [], {}
    for blob in list_blobs(client, bucket, folder):
        found = KEPT_NAME.fullmatch(blob.name)
        shown = f"gs://{bucket}/{printable(blob.name[:300])}"
        if found and since and found["day"] < since.isoformat():
            continue  # kept before --since: pushed before, as asked
        if not found or found["model"] != model:
            skipped[shown] = "not a name the serving image gives a kept image"
        elif blob.size is None or blob.size > MAX_IMAGE_BYTES:
            skipped[shown] = (f"{blob.size} bytes, more than any request carries "
                              f"({MAX_IMAGE_BYTES:,})")
        else:
            wanted.append((blob.name, found["sha"], found["kind"], blob))
    wanted.sort(key=lambda entry: entry[0], reverse=True)  # the day is in the name
    more = max(0, len(wanted) - MAX_IMAGES)
    images, seen = [], set()
    for name, sha, kind, blob in wanted[:MAX_IMAGES]:
        if sha in seen:  # the same image kept again on another day
            continue
        seen.add(sha)
        data = blob.download_as_bytes(start=0, end=MAX_IMAGE_BYTES - 1, timeout=60)
        if hashlib.sha256(data).hexdigest() != sha:
            skipped[f"gs://{bucket}/{printable(name)}"] = "its bytes are not what its name says"
            continue
        path = out / f"{sha}.{kind}"
        path.write_bytes(data)
        images.append(path)
    return Staged(images, skipped, more)
