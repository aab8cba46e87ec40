"""A local stand-in for the serving image: an export served over TF Serving's REST API, the
contract Vertex AI forwards to (serving/contract.py), with TF Serving's server-side batching
and its warm-up, on 127.0.0.1. `invoke bench.endpoint` measures it where no TF Serving binary
or Docker engine runs, and the tests' Vertex AI fake runs the serving image's entrypoint
command on it.

- `GET /v1/models/NAME`: the model's status, once the warm-up requests have run;
- `POST /v1/models/NAME:predict` with `{"instances": [...]}` and an optional
  `signature_name`: `{"predictions": [...]}`, `{"b64": ...}` values as bytes; errors are
  `{"error": ...}` (400; 503 when the batch queue is full, as TF Serving answers UNAVAILABLE).

Batching (serving/batching.py's parameters, TF Serving's meaning): `num_batch_threads` threads
each take the oldest waiting request and add those of the same signature (and the same
shape) that arrive within `batch_timeout_micros`, up to `max_batch_size` instances, and run
them as one call; at most `max_enqueued_batches` batches wait. A request of more instances
than a batch holds is refused, as TF Serving refuses it.

What TF Serving does not do, the serving image's request front (serving/front.py) adds in
front of it, and the stand-in in front of the graph (docs/guides/serving.md, "A request's
pixel budget"): a pixel budget, the export's `max_pixels` (40 MP by default: what one image
at the graph's cap decodes). A request whose images' headers (read by serving/pixels.py, the
front's reader) add up to more is refused alone, before anything is decoded or queued, and a
batch takes a request only while the pixels of all it holds stay within the budget. A body
is read only up to MAX_BODY, and only with a Content-Length that says how long it is.
"""

from __future__ import annotations

import base64
import collections
import dataclasses
import json
import queue
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from serving import pixels as headers
from serving.batching import Batching
from serving.replies import read_body, send_json

WARMUP_FILE = "assets.extra/tf_serving_warmup_requests"  # trainer/export/warmup.py's FILE
MAX_BODY = 64 << 20


class Refused(ValueError):
    """A request TF Serving would answer with an error."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclasses.dataclass
class _Task:
    signature: str
    argument: str
    values: list
    key: tuple  # what may share a batch: the signature and each instance's shape
    pixels: int  # what its images decode to, from their headers
    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    outputs: list | None = None
    error: str | None = None


class ModelServer:
    """The export at `model_dir` as TF Serving serves model `name` on 127.0.0.1."""

    def __init__(self, model_dir: str | Path, name: str, batching: Batching | None = None,
                 port: int = 0) -> None:
        import tensorflow as tf

        self.name, self.batching = name, batching
        self.model = tf.saved_model.load(str(model_dir))
        self.pixel_budget = headers.budget_of(Path(model_dir))
        # each call's instances and pixels, newest last: what batching merged
        self.batches: collections.deque[tuple[int, int]] = collections.deque(maxlen=1000)
        self.warmed = self._warm_up(Path(model_dir) / WARMUP_FILE)
        limit = batching.max_enqueued_batches * batching.max_batch_size if batching else 0
        self.tasks: queue.Queue[_Task] = queue.Queue(maxsize=limit)
        self.workers = [threading.Thread(target=self._batches, daemon=True)
                        for _ in range(batching.num_batch_threads if batching else 0)]
        for worker in self.workers:
            worker.start()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/models/{self.name}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> ModelServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- TF Serving's behaviour --------------------------------------------------------------

    def _warm_up(self, path: Path) -> int:
        """Runs the export's warm-up requests as TF Serving does before the model is
        available: PredictLogs only, at most 1,000, any failure fails the load."""
        if not path.is_file():
            return 0
        import tensorflow as tf
        from tensorflow_serving.apis import prediction_log_pb2

        count = 0
        for record in tf.data.TFRecordDataset(str(path)):
            count += 1
            if count > 1000:
                raise Refused(f"{path}: more than 1000 warm-up records")
            log = prediction_log_pb2.PredictionLog.FromString(record.numpy())
            if log.WhichOneof("log_type") != "predict_log":
                raise Refused(f"{path}: Unsupported log_type for warmup: "
                              f"{log.WhichOneof('log_type')}")
            request = log.predict_log.request
            signature = self._signature(request.model_spec.signature_name or "serving_default")
            signature(**{key: tf.make_ndarray(value) for key, value in request.inputs.items()})
        return count

    def _signature(self, name: str):
        if name not in self.model.signatures:
            raise Refused(f"Serving signature name: \"{name}\" not found in signature def")
        return self.model.signatures[name]

    def status(self) -> dict:
        return {"model_version_status": [{
            "version": "1", "state": "AVAILABLE",
            "status": {"error_code": "OK", "error_message": ""}}]}

    def predict(self, body: dict) -> dict:
        import numpy as np
        import tensorflow as tf

        name = body.get("signature_name", "serving_default")
        signature = self._signature(name)
        (argument, spec), = signature.structured_input_signature[1].items()
        instances = body.get("instances")
        if not isinstance(instances, list) or not instances:
            raise Refused("Missing 'instances' key")
        values = [_decoded(instance) for instance in instances]
        if spec.dtype != tf.string:
            values = list(np.asarray(values, dtype=spec.dtype.as_numpy_dtype))
        pixels = sum(map(_pixels, values))
        if reason := headers.refusal(pixels, self.pixel_budget):
            raise Refused(reason)
        if self.batching is None:  # each request its own call, at once, as TF Serving runs them
            self.batches.append((len(values), pixels))
            return {"predictions": _rows(signature(**{argument: _tensor(values, spec)}))}
        if len(values) > self.batching.max_batch_size:
            raise Refused(f"Task size {len(values)} is larger than maximum batch size "
                          f"{self.batching.max_batch_size}")
        shapes = tuple(getattr(v, "shape", ()) for v in values)
        task = _Task(name, argument, values, (name, *set(shapes)), pixels)
        try:
            self.tasks.put_nowait(task)
        except queue.Full:
            raise Refused("The batch scheduling queue to which this task was submitted is "
                          "full", 503) from None
        task.done.wait()
        if task.error is not None:
            raise Refused(task.error)
        return {"predictions": task.outputs}

    def _batches(self) -> None:
        """One batch thread: the oldest task, and those that may join it within the timeout."""
        held: list[_Task] = []
        while True:
            first = held.pop(0) if held else self.tasks.get()
            batch, size, pixels = [first], len(first.values), first.pixels
            deadline = time.monotonic() + self.batching.batch_timeout_micros / 1e6
            while size < self.batching.max_batch_size:
                try:
                    task = self.tasks.get(timeout=max(0.0, deadline - time.monotonic())) \
                        if deadline > time.monotonic() else self.tasks.get_nowait()
                except queue.Empty:
                    break
                if task.key != first.key or size + len(task.values) > \
                        self.batching.max_batch_size or \
                        pixels + task.pixels > self.pixel_budget:
                    held.append(task)  # the next batch's
                    break
                batch.append(task)
                size, pixels = size + len(task.values), pixels + task.pixels
            self.batches.append((size, pixels))
            self._run(batch)

    def _run(self, batch: list[_Task]) -> None:
        signature = self._signature(batch[0].signature)
        (_, spec), = signature.structured_input_signature[1].items()
        values = [v for task in batch for v in task.values]
        try:
            rows = _rows(signature(**{batch[0].argument: _tensor(values, spec)}))
        except Exception as error:  # TF's errors too: each request of the batch hears it
            for task in batch:
                task.error = str(error).splitlines()[0][:500]
                task.done.set()
            return
        start = 0
        for task in batch:
            task.outputs = rows[start:start + len(task.values)]
            start += len(task.values)
            task.done.set()

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: a load test's connections are reused
            # headers and body leave as two writes: with Nagle's algorithm the body waited for
            # the client's delayed ACK, 40 ms a request on Linux
            disable_nagle_algorithm = True

            def do_GET(self) -> None:
                if self.path == f"/v1/models/{server.name}":
                    self._answer(200, server.status())
                else:
                    self._answer(404, {"error": f"Malformed request: GET {self.path}"})

            def do_POST(self) -> None:
                data = read_body(self, MAX_BODY)
                if data is None:
                    return
                if self.path != f"/v1/models/{server.name}:predict":
                    self._answer(404, {"error": f"Malformed request: POST {self.path}"})
                    return
                try:
                    self._answer(200, server.predict(json.loads(data)))
                except Refused as error:
                    self._answer(error.status, {"error": str(error)})
                except Exception as error:  # TF's errors too: the server answers them
                    self._answer(400, {"error": str(error).splitlines()[0][:500]})

            def _answer(self, status: int, body: dict) -> None:
                send_json(self, status, body)

            def log_message(self, *args) -> None:
                pass

        return Handler


def _tensor(values: list, spec):
    import numpy as np
    import tensorflow as tf

    return tf.constant(values) if spec.dtype == tf.string else \
        tf.constant(np.stack(values), dtype=spec.dtype)


def _rows(outputs: dict) -> list[dict]:
    """TF Serving's row format: one object of the outputs per instance, a string output's
    bytes as JSON text (IMAGE_ERROR's reasons)."""
    arrays = {k: v.numpy() for k, v in outputs.items()}
    count = len(next(iter(arrays.values())))
    return [{k: v[i].decode(errors="replace") if isinstance(v[i], bytes) else v[i].tolist()
             for k, v in arrays.items()} for i in range(count)]


def _pixels(value) -> int:
    """What decoding one instance costs, in pixels, from its header alone: an encoded
    image's width x height (0 for bytes that are no image: the graph refuses those without
    decoding them), an array's first two sides."""
    if isinstance(value, bytes):
        return headers.image_pixels(value)
    shape = getattr(value, "shape", ())
    return int(shape[0]) * int(shape[1]) if len(shape) >= 2 else 0


def _decoded(value):
    """TF Serving's JSON: `{"b64": ...}` is bytes, anywhere in an instance."""
    if isinstance(value, dict) and set(value) == {"b64"}:
        return base64.b64decode(value["b64"], validate=True)
    if isinstance(value, list):
        return [_decoded(v) for v in value]
    return value
