"""What an endpoint delivers under load: a sweep of concurrency levels, each sending real
images as one-image requests from that many clients at once, bounded in requests and in
time; per level the latency percentiles, images a second per replica, errors, and what 1,000
images cost at the replica's price. `invoke bench.endpoint` runs it against a Vertex AI
endpoint or the local stand-in (standin.py); the sending is a function, so the sweep is the
same for both.
"""

from __future__ import annotations

import base64
import dataclasses
import http.client
import itertools
import json
import math
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from launch.errors import InputError
from trainer.export.saved_model import IMAGE_ERROR

LEVELS = (1, 2, 4, 8)
MAX_LEVELS = 16
MAX_CONCURRENCY = 256


@dataclasses.dataclass(frozen=True)
class Bounds:
    """How much one level sends: at most `requests`, and no new request after `seconds`."""

    requests: int = 200
    seconds: float = 60.0

    def __post_init__(self) -> None:
        if not 1 <= self.requests <= 100_000:
            raise InputError(f"--requests must be 1 to 100,000, got {self.requests}")
        if not (math.isfinite(self.seconds) and 0 < self.seconds <= 3600):
            raise InputError(f"--seconds must be more than 0 and at most 3600, got "
                             f"{self.seconds}")


@dataclasses.dataclass(frozen=True)
class Level:
    """One concurrency level's outcome."""

    concurrency: int
    latencies_ms: tuple[float, ...]  # the requests that succeeded
    errors: int
    seconds: float  # from the first request sent to the last answer
    first_error: str = ""

    @property
    def answered(self) -> int:
        return len(self.latencies_ms)

    def percentile(self, p: float) -> float | None:
        """The nearest-rank percentile of the successful requests' latencies."""
        if not self.latencies_ms:
            return None
        ordered = sorted(self.latencies_ms)
        return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]

    def images_per_second(self, replicas: int = 1) -> float:
        return self.answered / self.seconds / replicas if self.seconds > 0 else 0.0


def check_levels(text: str) -> tuple[int, ...]:
    """--concurrency "1,2,4,8": increasing whole numbers from 1 to 256."""
    try:
        levels = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise InputError(f"--concurrency {text[:60]!r}: give whole numbers separated by "
                         "commas, e.g. 1,2,4,8") from None
    if not levels or len(levels) > MAX_LEVELS or \
            any(not 1 <= n <= MAX_CONCURRENCY for n in levels) or list(levels) != sorted(
                set(levels)):
        raise InputError(f"--concurrency {text[:60]!r}: at most {MAX_LEVELS} increasing "
                         f"levels from 1 to {MAX_CONCURRENCY}, e.g. 1,2,4,8")
    return levels


class Unanswered(Exception):
    """A request the server answered with an error."""


def rest_sender(predict_url: str, signature: str | None = None, timeout: float = 60.0
                ) -> Callable[[bytes], None]:
    """Sends one image a request to TF Serving's REST predict route (`{"b64": ...}`), one
    kept-alive connection a client thread. An answer whose image the server could not read
    (its `image_error`, trainer/export/saved_model.py) is an error too, not a detection."""
    where = urllib.parse.urlsplit(predict_url)
    local = threading.local()

    def send(image: bytes) -> None:
        body = {"instances": [{"b64": base64.b64encode(image).decode("ascii")}],
                **({"signature_name": signature} if signature else {})}
        if getattr(local, "connection", None) is None:
            local.connection = http.client.HTTPConnection(where.hostname, where.port,
                                                          timeout=timeout)
        try:
            local.connection.request("POST", where.path, json.dumps(body),
                                     {"Content-Type": "application/json"})
            response = local.connection.getresponse()
            answer = response.read()
        except (OSError, http.client.HTTPException):
            local.connection.close()
            local.connection = None
            raise
        if response.status != 200:
            raise Unanswered(f"{response.status}: {answer[:200].decode(errors='replace')}")
        try:
            reasons = [str(row.get(IMAGE_ERROR) or "") for row in json.loads(answer)["predictions"]]
        except (ValueError, KeyError, TypeError, AttributeError):
            raise Unanswered(f"200 without predictions: {answer[:200]!r}") from None
        if any(reasons):
            raise Unanswered(f"200, but the image was not read: {max(reasons)[:200]}")

    return send


def run_level(send: Callable[[bytes], None], images: Sequence[bytes], concurrency: int,
              bounds: Bounds, on_answer: Callable[[], None] = lambda: None) -> Level:
    """`concurrency` clients, each sending the next image as soon as its last one answered,
    until `bounds.requests` were sent or `bounds.seconds` passed."""
    lock = threading.Lock()
    order = itertools.count()
    latencies: list[float] = []
    errors: list[str] = []
    start = time.perf_counter()
    deadline = start + bounds.seconds

    def client() -> None:
        while True:
            with lock:
                index = next(order)
            if index >= bounds.requests or time.perf_counter() >= deadline:
                return
            sent = time.perf_counter()
            try:
                send(images[index % len(images)])
            except Exception as error:  # a failed request is a figure, not the end
                with lock:
                    errors.append(f"{type(error).__name__}: {str(error)[:200]}")
            else:
                with lock:
                    latencies.append(1000 * (time.perf_counter() - sent))
            on_answer()

    with ThreadPoolExecutor(concurrency) as pool:
        for future in [pool.submit(client) for _ in range(concurrency)]:
            future.result()
    return Level(concurrency, tuple(latencies), len(errors), time.perf_counter() - start,
                 errors[0] if errors else "")


def sweep(send: Callable[[bytes], None], images: Sequence[bytes], levels: Sequence[int],
          bounds: Bounds, on_level: Callable[[int], Callable[[], None]] | None = None
          ) -> list[Level]:
    """Each level in turn; `on_level(concurrency)` gives the callback of each answer (a
    progress bar's advance)."""
    if not images:
        raise ValueError("no images to send")
    return [run_level(send, images, n, bounds,
                      on_level(n) if on_level else (lambda: None)) for n in levels]


def usd_per_1000(hourly_per_replica: float | None, images_per_second_per_replica: float
                 ) -> float | None:
    """What 1,000 images cost when a replica answers this many a second for its hour."""
    if hourly_per_replica is None or images_per_second_per_replica <= 0:
        return None
    return hourly_per_replica / (images_per_second_per_replica * 3600) * 1000


def table(levels: Sequence[Level], replicas: int, hourly_per_replica: float | None) -> str:
    """The sweep as a table: one row a level."""
    rows = [("clients", "answered", "errors", "p50 ms", "p95 ms", "p99 ms",
             "images/s/replica", "USD/1000 images")]
    for level in levels:
        rate = level.images_per_second(replicas)
        cost = usd_per_1000(hourly_per_replica, rate)
        rows.append((str(level.concurrency), str(level.answered), str(level.errors),
                     *(_ms(level.percentile(p)) for p in (50, 95, 99)), f"{rate:.2f}",
                     "unknown" if cost is None else f"{cost:.4f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True))
                     for row in rows)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"
