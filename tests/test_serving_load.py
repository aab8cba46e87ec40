"""The shared export under TF Serving's behaviour (issue 41 items 2 and 3): its warm-up file read
with TF Serving's own protos, the local stand-in warming up, batching and refusing as TF
Serving does, and the load test's sweep against it, bounded to a few seconds."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from launch.errors import InputError
from launch.features.serving import loadtest
from launch.features.serving.standin import ModelServer
from serving.batching import Batching, for_machine

SIGNATURES = {"serving_default", "serving_bytes", "serving_uint8"}


def held_out(exported: Path, count: int = 4) -> list[bytes]:
    """Encoded images as the warm-up file carries them (the run's validation records)."""
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    images = []
    for record in tf.data.TFRecordDataset(str(exported / "assets.extra" /
                                              "tf_serving_warmup_requests")):
        request = prediction_log_pb2.PredictionLog.FromString(record.numpy()).predict_log.request
        if request.inputs["inputs"].dtype == tf.string.as_datatype_enum:
            images.append(request.inputs["inputs"].string_val[0])
    return images[:count]


@pytest.mark.slow  # the shared trained export
def test_every_export_carries_warm_up_requests_tf_serving_reads(exported):
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    path = exported / "assets.extra" / "tf_serving_warmup_requests"
    logs = [prediction_log_pb2.PredictionLog.FromString(r.numpy())
            for r in tf.data.TFRecordDataset(str(path))]
    assert 0 < len(logs) <= 1000  # TF Serving fails a load with more
    assert {log.WhichOneof("log_type") for log in logs} == {"predict_log"}
    requests = [log.predict_log.request for log in logs]
    named = {request.model_spec.signature_name for request in requests}
    with ModelServer(exported, "detector") as server:  # TF Serving's load: warm-up first
        assert server.warmed == len(logs)
    model = server.model
    assert named == SIGNATURES == set(model.signatures)  # every serving signature warms up
    info = json.loads((exported / "export.json").read_text())
    assert info["warmup"]["requests"] == len(logs)
    assert "val" in info["warmup"]["images"]  # held-out images: the validation records
    for request in requests:
        (key,) = request.inputs
        tensor = tf.make_ndarray(request.inputs[key])
        kind = info["signatures"][request.model_spec.signature_name]
        assert (tensor.dtype, tensor.ndim) == ((object, 1) if kind == "bytes" else
                                               (tf.uint8.as_numpy_dtype, 4))
        # each request runs through its signature, as TF Serving runs it at load
        outputs = model.signatures[request.model_spec.signature_name](**{key: tensor})
        assert int(outputs["num_detections"].numpy()[0]) >= 0


@pytest.mark.slow  # the shared trained export
def test_the_load_test_sweeps_the_stand_in_and_reports_each_level(exported):
    """Two levels, six requests each, a few seconds: every request answered, percentiles in
    order, a rate, and the price of 1,000 images from a replica's hourly price."""
    images = held_out(exported)
    with ModelServer(exported, "detector", for_machine(2, "cpu")) as server:
        send = loadtest.rest_sender(f"{server.url}:predict", "serving_bytes")
        answered = []
        levels = loadtest.sweep(send, images, (1, 2), loadtest.Bounds(requests=6, seconds=20),
                                on_level=lambda n: lambda: answered.append(n))
    assert [level.concurrency for level in levels] == [1, 2]
    assert answered == [1] * 6 + [2] * 6
    for level in levels:
        assert (level.answered, level.errors) == (6, 0), level.first_error
        assert level.percentile(50) <= level.percentile(95) <= level.percentile(99)
        assert level.images_per_second() > 0
    rate = levels[1].images_per_second()
    assert loadtest.usd_per_1000(0.2186, rate) == pytest.approx(0.2186 / (rate * 3.6))
    table = loadtest.table(levels, 1, 0.2186).splitlines()
    assert table[0].split() == ["clients", "answered", "errors", "p50", "ms", "p95", "ms",
                                "p99", "ms", "images/s/replica", "USD/1000", "images"]
    assert len(table) == 3 and "unknown" in loadtest.table(levels, 1, None)


@pytest.mark.slow  # the shared trained export
def test_the_stand_in_refuses_as_tf_serving_does_and_the_sweep_counts_errors(exported):
    """A request larger than a batch, and a full queue (503), are errors the sweep counts
    and names; the stand-in answers the rest."""
    images = held_out(exported, 1)
    tight = Batching(max_batch_size=1, batch_timeout_micros=0, max_enqueued_batches=1,
                     num_batch_threads=1)
    with ModelServer(exported, "detector", tight) as server:
        send = loadtest.rest_sender(f"{server.url}:predict", "serving_bytes")
        with pytest.raises(loadtest.Unanswered, match="larger than maximum batch size 1"):
            _send_two(f"{server.url}:predict", images[0])
        level = loadtest.run_level(send, images, 8, loadtest.Bounds(requests=16, seconds=20))
    assert level.answered + level.errors == 16 and level.answered >= 1
    assert level.errors >= 1 and "503" in level.first_error and "full" in level.first_error


def _send_two(url: str, image: bytes) -> None:
    """Two instances in one request."""
    import base64
    import urllib.error
    import urllib.request

    body = json.dumps({"signature_name": "serving_bytes", "instances": [
        {"b64": base64.b64encode(image).decode()}] * 2}).encode()
    try:
        urllib.request.urlopen(urllib.request.Request(url, body), timeout=60).close()
    except urllib.error.HTTPError as error:
        raise loadtest.Unanswered(error.read().decode()) from None


@pytest.mark.slow  # the shared trained export
def test_the_stand_in_reads_no_body_past_its_cap(exported):
    """`Content-Length: -1` made it read the whole stream (96 MiB past a 64 MiB cap): a
    length that is missing, negative or over the cap is refused before a byte of the body
    is read (the client here sends none: a server that waits for it times out), and the
    connection closes after the answer."""
    import socket

    cases = [({"Content-Length": "-1"}, 400, "Content-Length '-1' is not a number of bytes"),
             ({}, 411, "send the body with a Content-Length, not without one"),
             ({"Transfer-Encoding": "chunked"}, 411,
              "send the body with a Content-Length, not without one"),
             ({"Content-Length": str((64 << 20) + 1)}, 413,
              "a body of 67,108,865 bytes is over the limit of 67,108,864")]
    with ModelServer(exported, "detector") as server:
        for headers, status, message in cases:
            with socket.create_connection(("127.0.0.1", server.port), timeout=20) as sock:
                head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
                sock.sendall(f"POST /v1/models/detector:predict HTTP/1.1\r\nHost: x\r\n"
                             f"{head}\r\n".encode())
                answer = sock.makefile("rb").read()  # to the end: the server closes
            first, _, rest = answer.partition(b"\r\n")
            assert first.split()[1] == str(status).encode(), headers
            assert json.loads(rest.partition(b"\r\n\r\n")[2]) == {"error": message}
            assert b"Connection: close" in rest


@pytest.mark.parametrize("text, message", [
    ("", "give whole numbers"), ("1,x", "give whole numbers"), ("4,2", "increasing"),
    ("0,1", "from 1 to 256"), ("1,1000", "from 1 to 256")])
def test_concurrency_levels_are_checked(text, message):
    with pytest.raises(InputError, match=message):
        loadtest.check_levels(text)


@pytest.mark.parametrize("bounds, message", [
    ({"requests": 0}, "--requests must be 1 to 100,000"),
    ({"seconds": float("nan")}, "--seconds must be more than 0"),
    ({"seconds": float("inf")}, "--seconds must be more than 0"),
    ({"seconds": 0}, "--seconds must be more than 0")])
def test_load_bounds_are_checked(bounds, message):
    with pytest.raises(InputError, match=message):
        loadtest.Bounds(**bounds)


def test_a_sweep_stops_at_its_time_bound():
    """A slow server: no new request after `seconds`, whatever `requests` allows."""
    release = threading.Event()

    def slow(image: bytes) -> None:
        release.wait(0.2)

    level = loadtest.run_level(slow, [b"x"], 2, loadtest.Bounds(requests=10_000, seconds=0.5))
    assert 2 <= level.answered <= 10 and level.seconds < 2


def test_the_sender_counts_an_image_the_server_could_not_read_as_an_error():
    """A 200 whose prediction carries `image_error` is a failed image, not a fast one."""
    from tests.fakes.json_http import json_server

    answers = iter([{"predictions": [{"num_detections": 0, "image_error": ""}]},
                    {"predictions": [{"num_detections": 0, "image_error": "cannot decode it"}]},
                    {"no": "predictions"}])
    with json_server(lambda request: next(answers)) as url:
        send = loadtest.rest_sender(f"{url}/v1/models/d:predict", timeout=10)
        send(b"image")
        with pytest.raises(loadtest.Unanswered, match=r"^200, but the image was not read: "
                                                      r"cannot decode it$"):
            send(b"image")
        with pytest.raises(loadtest.Unanswered, match=r"^200 without predictions"):
            send(b"image")
