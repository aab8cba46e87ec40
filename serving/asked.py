"""Keeps a sample of the images a served model is asked about, for people to label
(`invoke label.push --asked NAME`, docs/guides/labelling.md): off unless the Model version
was uploaded with `--keep-asked RATE`, which sets the two variables below.

A kept image is gs://BUCKET/asked/NAME/YYYY-MM-DD/SHA256.EXT: its name made here from its
bytes and their format (never from the request), created only if new (the serving account
may create objects under asked/ and do nothing else there: infra/stack.py). Only an image in
a format the graph decodes, with a header that reads, is kept. The keeping runs on a thread
of its own, fed by a bounded queue: a request never waits for Cloud Storage and never fails
because of it; an image that finds the queue full is dropped and counted.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import queue
import random
import re
import threading
from collections.abc import Callable, Mapping

from serving import pixels
from serving.fetch import Backoff, FetchError, Storage

KEEP_RATE = "PETS_KEEP_ASKED"  # the fraction of requests whose images are kept
KEEP_URI = "PETS_ASKED_URI"  # gs://BUCKET/asked/NAME
# the data bucket's folder of kept images: trainer/common/files.py's ASKED_PREFIX (this image
# imports nothing of ours), which infra's grant and label.push name
ASKED_PREFIX = "asked"
QUEUE = 64  # images waiting to be kept (at most 128 MiB: MAX_BODY each); more are dropped
CONTENT_TYPES = {"jpg": "image/jpeg", "png": "image/png", "bmp": "image/bmp"}
NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}"  # a Model's display name as model.upload makes it
_URI = re.compile(rf"gs://(?P<bucket>[a-z0-9][a-z0-9._-]{{1,220}})/{ASKED_PREFIX}/"
                  rf"(?P<name>{NAME})/?")
# the name `object_name` gives a kept image, as `label.push --asked` reads it back
KEPT_NAME = re.compile(rf"{ASKED_PREFIX}/(?P<model>{NAME})/(?P<day>\d{{4}}-\d{{2}}-\d{{2}})/"
                       rf"(?P<sha>[0-9a-f]{{64}})\.(?P<kind>{'|'.join(CONTENT_TYPES)})")
_FEW = Backoff(tries=3)  # an image is not worth minutes of retrying


class KeepingError(ValueError):
    """A keeping variable this image cannot use; the message names it and the fix."""


@dataclasses.dataclass(frozen=True)
class Keeping:
    rate: float
    bucket: str
    folder: str  # asked/NAME

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Keeping | None:
        """The container's keeping, None when neither variable is set."""
        text, uri = environ.get(KEEP_RATE, ""), environ.get(KEEP_URI, "")
        if not text and not uri:
            return None
        try:
            rate = float(text)
        except ValueError:
            rate = float("nan")
        if not 0 < rate <= 1:  # nan and inf fail this too
            raise KeepingError(f"{KEEP_RATE}={text[:20]!r}: need the fraction of requests "
                               "whose images are kept, above 0 and at most 1 (0.05: one "
                               "in twenty); `model.upload --keep-asked` sets it")
        found = _URI.fullmatch(uri)
        if not found:
            raise KeepingError(f"{KEEP_URI}={uri[:100]!r}: need gs://BUCKET/{ASKED_PREFIX}/"
                               "NAME; `model.upload --keep-asked` sets it")
        return cls(rate, found["bucket"], f"{ASKED_PREFIX}/{found['name']}")


def object_name(folder: str, data: bytes, day: datetime.date) -> str | None:
    """Where an image is kept, or None for bytes that are no image the graph decodes."""
    kind = pixels.image_kind(data)
    if kind is None or pixels.image_pixels(data) == 0:
        return None
    return f"{folder}/{day.isoformat()}/{hashlib.sha256(data).hexdigest()}.{kind}"


class Keeper:
    """Offered each request's images, keeps those of `keeping.rate` of the requests."""

    def __init__(self, keeping: Keeping, environ: Mapping[str, str],
                 chance: Callable[[], float] = random.random,
                 today: Callable[[], datetime.date] = datetime.date.today) -> None:
        self.keeping, self.environ = keeping, dict(environ)
        self.chance, self.today = chance, today
        self.waiting: queue.Queue[bytes] = queue.Queue(QUEUE)
        self.counts = {"kept": 0, "known": 0, "dropped": 0, "failed": 0}
        self._lock = threading.Lock()
        threading.Thread(target=self._work, daemon=True).start()

    def offer(self, images: list[bytes]) -> None:
        """Queues a request's images (the front's `pixels.body_images`, read once) when the
        sample takes it, those of a format the graph reads; never raises, never waits."""
        if self.chance() >= self.keeping.rate:
            return
        for data in images:
            if pixels.image_kind(data) is None:
                continue
            try:
                self.waiting.put_nowait(data)
            except queue.Full:
                dropped = self._count("dropped")
                if str(dropped).strip("0") == "1":  # the 1st, 10th, 100th, ...: a log, not a flood
                    print(f"serving: {dropped} asked image(s) not kept so far: the queue of "
                          f"{QUEUE} waiting to be written was full", flush=True)

    def drain(self) -> dict[str, int]:
        """Waits until every queued image is kept or has failed; the counts so far."""
        self.waiting.join()
        with self._lock:
            return dict(self.counts)

    def _count(self, what: str) -> int:
        with self._lock:
            self.counts[what] += 1
            return self.counts[what]

    def _work(self) -> None:
        while True:
            data = self.waiting.get()
            try:
                self._keep(data)
            finally:
                self.waiting.task_done()

    def _keep(self, data: bytes) -> None:
        name = object_name(self.keeping.folder, data, self.today())
        if name is None:
            return
        try:
            created = Storage(self.environ, _FEW).create(
                self.keeping.bucket, name, data, CONTENT_TYPES[name.rsplit(".", 1)[1]])
        except FetchError as error:
            self._count("failed")
            print(f"serving: an asked image was not kept: {error}", flush=True)
            return
        self._count("kept" if created else "known")
