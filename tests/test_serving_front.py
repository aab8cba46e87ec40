"""The serving image's request front (serving/front.py) and its header reader
(serving/pixels.py): a request whose images add up past the export's pixel budget is refused
before TF Serving sees it, on the image itself, and everything else reaches
TF Serving and comes back unchanged. Servers listen on 127.0.0.1 and are stopped by the test."""

from __future__ import annotations

import base64
import datetime
import hashlib
import io
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from PIL import Image

from serving import contract, pixels
from serving.front import MAX_BODY, Front
from tests.conftest import REPO

TIMEOUT = 10  # seconds any one request here may take


def encoded(size: tuple[int, int], form: str, mode: str = "RGB", **options) -> bytes:
    buffer = io.BytesIO()
    Image.new(mode, size).save(buffer, form, **options)
    return buffer.getvalue()


def b64(data: bytes) -> dict:
    return {"b64": base64.b64encode(data).decode()}


def body_pixels(body: bytes) -> int:
    """What the front counts against the budget: each `{"b64": ...}` image, read once."""
    return pixels.pixels_of(pixels.body_images(body))


# --- the header reader ------------------------------------------------------------------------

def exif_before_the_frame() -> bytes:
    exif = Image.Exif()
    exif[0x010F] = "camera" * 2000  # Make: a 12 KB APP1 segment before SOF
    return encoded((37, 23), "JPEG", exif=exif.tobytes())


@pytest.mark.parametrize("data, size", [
    (encoded((640, 480), "PNG"), (640, 480)),
    (encoded((33, 17), "PNG", "I;16"), (33, 17)),  # 16-bit greyscale
    (encoded((1, 1), "PNG", "RGBA"), (1, 1)),
    (encoded((640, 480), "JPEG"), (640, 480)),
    (encoded((301, 199), "JPEG", progressive=True), (301, 199)),  # SOF2
    (exif_before_the_frame(), (37, 23)),
    (encoded((99, 45), "JPEG", "L", optimize=True), (99, 45)),
    (encoded((120, 75), "BMP"), (120, 75)),
    (encoded((7, 3), "BMP", "L"), (7, 3)),
])
def test_the_header_reader_reads_what_pillow_writes(data, size):
    assert Image.open(io.BytesIO(data)).size == size  # the file says what the test says
    assert pixels.image_pixels(data) == size[0] * size[1]


def test_a_jpeg_frame_inside_a_segment_is_skipped_and_a_top_down_bmp_counts():
    """An APP1 segment holding another JPEG's frame header (a thumbnail) is skipped whole, as
    libjpeg skips it; a BMP's negative height (rows top-down) is its size, as the graph's."""
    thumbnail = encoded((4000, 4000), "JPEG")[:200]
    segment = b"\xff\xe1" + (len(thumbnail) + 2).to_bytes(2, "big") + thumbnail
    photo = encoded((64, 48), "JPEG")
    assert pixels.image_pixels(photo[:2] + segment + photo[2:]) == 64 * 48
    bmp = bytearray(encoded((50, 20), "BMP"))
    bmp[22:26] = (-20).to_bytes(4, "little", signed=True)
    assert pixels.image_pixels(bytes(bmp)) == 1000


def test_hostile_headers_never_raise():
    """Truncated at every byte, huge declared sizes, bad segment lengths, garbage: a number,
    never an exception; a header that declares more than any budget counts all of it."""
    png, jpeg = encoded((300, 200), "PNG"), exif_before_the_frame()
    for whole in (png, jpeg, encoded((30, 20), "BMP")):
        for end in range(len(whole)):
            assert pixels.image_pixels(whole[:end]) >= 0
    assert pixels.image_pixels(png[:23]) == 0
    huge = bytearray(png)
    huge[16:24] = b"\xff" * 8
    assert pixels.image_pixels(bytes(huge)) == (2**32 - 1) ** 2
    frame = b"\xff\xc0\x00\x11\x08\xff\xff\xff\xff\x03"  # SOF0 of 65535 x 65535
    assert pixels.image_pixels(b"\xff\xd8" + frame) == 65535 * 65535
    assert pixels.image_pixels(b"\xff\xd8\xff\xe0\x00\x00" + frame) == 0  # length 0
    assert pixels.image_pixels(b"\xff\xd8\xff\xda\x00\x08" + frame) == 0  # scan first
    assert pixels.image_pixels(b"\xff\xd8" + b"\xff" * 100_000) == 0
    assert pixels.image_pixels(b"\xff\xd8\xff\xe0\xff\xff") == 0  # a segment past the end
    rng = random.Random(52)
    for _ in range(2000):
        junk = bytes(rng.randrange(256) for _ in range(rng.randrange(40)))
        for magic in (b"", b"\xff\xd8", b"BM", pixels.PNG_MAGIC):
            assert pixels.image_pixels(magic + junk) >= 0


def test_body_pixels_counts_every_b64_value_wherever_it_is():
    """`instances`, `inputs`, nested, and both of two duplicate keys (Python keeps the last
    one; a C++ reader may keep the first): every image is counted."""
    big, small = encoded((100, 100), "PNG"), encoded((2, 2), "PNG")
    assert body_pixels(json.dumps({"instances": [b64(big), b64(small)]}).encode()) \
        == 10_004
    assert body_pixels(json.dumps({"inputs": {"x": [b64(big)]}}).encode()) == 10_000
    twice = b'{"instances": [%s], "instances": [%s]}' % (
        json.dumps(b64(big)).encode(), json.dumps(b64(small)).encode())
    assert body_pixels(twice) == 10_004
    unpadded = base64.b64encode(big).decode().rstrip("=")
    padded = base64.b64encode(encoded((100, 101), "PNG")).decode()  # ends in "="
    assert padded.endswith("=")
    for sent in (unpadded, unpadded[:40] + "\n" + unpadded[40:], unpadded + " ",
                 padded.replace("=", "."), padded[:8] + "\r\n " + padded[8:]):
        # what TF Serving's decoder (absl) also reads: no padding, white space, `.` as pad
        assert body_pixels(json.dumps({"instances": [{"b64": sent}]}).encode()) in \
            (10_000, 10_100), repr(sent[-6:])
    assert body_pixels(b'{"instances": [{"b64": "!!!"}, {"b64": 3}]}') == 0
    for bad in (b"not json", b"[" * 100_000, b"\xff\xfe"):
        with pytest.raises(ValueError):
            body_pixels(bad)


def test_the_budget_and_its_file_are_the_exports(tmp_path):
    """serving/ imports nothing of ours: its copies of the export's names must agree."""
    from trainer.common.files import EXPORT_INFO_FILE
    from trainer.data.defaults import MAX_PIXELS

    assert (pixels.EXPORT_INFO, pixels.MAX_PIXELS) == (EXPORT_INFO_FILE, MAX_PIXELS)
    assert pixels.budget_of(tmp_path) == MAX_PIXELS
    for text, budget in (('{"max_pixels": 1234}', 1234), ('{"max_pixels": true}', MAX_PIXELS),
                         ('{"max_pixels": -5}', MAX_PIXELS), ("[]", MAX_PIXELS),
                         ("{", MAX_PIXELS)):
        (tmp_path / EXPORT_INFO_FILE).write_text(text)
        assert pixels.budget_of(tmp_path) == budget


# --- the front, before a TF Serving double ----------------------------------------------------

class Upstream(ThreadingHTTPServer):
    """TF Serving's place: records each request, answers with a body naming it (its sha256)
    and a header of its own."""

    daemon_threads = True
    request_queue_size = 1024  # as TF Serving's: a burst of the front's connections queues

    def __init__(self) -> None:
        self.received: list[tuple[str, str, bytes]] = []
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # as the stand-in: no delayed-ACK wait to measure

            def do_GET(self) -> None:
                upstream.received.append(("GET", self.path, b""))
                self._answer(404 if "other" in self.path else 200, b'{"status": "up"}')

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                upstream.received.append(("POST", self.path, body))
                self._answer(200, b'{"predictions": ["%s"]}\n' %
                             hashlib.sha256(body).hexdigest().encode())

            def _answer(self, status: int, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("X-Served-By", "double")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)


@pytest.fixture
def front():
    upstream = Upstream()
    front = Front(("127.0.0.1", 0), upstream.server_address[1], budget=10_000)
    for server in (upstream, front):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    front.received = upstream.received
    yield front
    for server in (front, upstream):
        server.shutdown()
        server.server_close()


def call(front: Front, path: str, body: bytes | None = None) -> tuple[int, dict, bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{front.port}{path}", data=body,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as answer:
            return answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


PREDICT = contract.predict_route()


def test_a_request_over_the_budget_is_refused_with_its_reason_and_never_forwarded(front):
    body = json.dumps({"instances": [b64(encoded((100, 60), "PNG"))] * 2}).encode()
    status, _, answer = call(front, PREDICT, body)
    assert status == 400
    assert json.loads(answer) == {"error": (
        "the request's images are 12,000 pixels (width x height in their headers, added up), "
        "over the budget of 10,000 a request: send fewer or smaller images")}
    # TF Serving's other paths to the same call, and its other verbs, are held to it too
    for path in (f"/v1/models/{contract.MODEL_NAME}/versions/1:predict",
                 f"/v1/models/{contract.MODEL_NAME}:classify"):
        assert call(front, path, body)[0] == 400
    assert call(front, PREDICT, b"{not json")[0] == 400
    assert front.received == []


def test_a_request_within_the_budget_is_forwarded_and_its_answer_relayed_unchanged(front):
    body = json.dumps({"instances": [b64(encoded((100, 100), "JPEG"))]}).encode()
    status, headers, answer = call(front, PREDICT, body)
    assert front.received == [("POST", PREDICT, body)]
    assert status == 200 and headers["X-Served-By"] == "double"
    assert answer == b'{"predictions": ["%s"]}\n' % hashlib.sha256(body).hexdigest().encode()
    status, headers, answer = call(front, contract.health_route())  # the health check
    assert (status, answer, headers["X-Served-By"]) == (200, b'{"status": "up"}', "double")
    assert call(front, "/v1/models/other")[0:3:2] == (404, b'{"status": "up"}')
    assert front.received[1:] == [("GET", contract.health_route(), b""),
                                  ("GET", "/v1/models/other", b"")]


def raw(front: Front, head: bytes) -> tuple[int, dict]:
    """A request written by hand (headers urllib would not send); the status and error."""
    with socket.create_connection(("127.0.0.1", front.port), timeout=TIMEOUT) as connection:
        connection.sendall(head)
        answer = b""
        while chunk := connection.recv(65536):  # the front closes after a refusal
            answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), json.loads(rest.partition(b"\r\n\r\n")[2])


@pytest.mark.parametrize("length, status, message", [
    (None, 411, "send the body with a Content-Length, not without one"),
    ("-1", 400, "Content-Length '-1' is not a number of bytes"),
    ("1e3", 400, "Content-Length '1e3' is not a number of bytes"),
    (str(MAX_BODY + 1), 413, f"a body of {MAX_BODY + 1:,} bytes is over the limit of "
                             f"{MAX_BODY:,}"),
])
def test_the_body_is_read_only_with_a_content_length_within_the_cap(front, length, status,
                                                                     message):
    header = b"" if length is None else b"Content-Length: %s\r\n" % length.encode()
    got = raw(front, b"POST %s HTTP/1.1\r\nHost: x\r\n%s\r\n{}" % (PREDICT.encode(), header))
    assert got == (status, {"error": message})
    chunked = (b"POST %s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"2\r\n{}\r\n0\r\n\r\n")
    assert raw(front, chunked % PREDICT.encode())[0] == 411
    assert front.received == []


def test_concurrent_clients_each_get_their_own_answer(front):
    """32 clients at once, a third over the budget: each refused alone, each other request
    answered with its own body's answer."""
    def one(index: int) -> tuple[int, int, bytes, bytes]:
        side = 120 if index % 3 == 0 else 10 + index  # 14,400 pixels: over
        body = json.dumps({"instances": [b64(encoded((side, side), "PNG"))],
                           "client": index}).encode()
        status, _, answer = call(front, PREDICT, body)
        return index, status, answer, body

    with ThreadPoolExecutor(32) as pool:
        results = list(pool.map(one, range(32)))
    for index, status, answer, body in results:
        if index % 3 == 0:
            assert status == 400 and b"over the budget of 10,000" in answer
        else:
            assert (status, answer) == (200, b'{"predictions": ["%s"]}\n' %
                                        hashlib.sha256(body).hexdigest().encode())
    assert sorted(body for _, _, body in front.received) == sorted(
        body for index, _, _, body in results if index % 3)


def test_a_tf_serving_that_is_not_up_yet_is_a_503(front):
    with socket.socket() as spare:
        spare.bind(("127.0.0.1", 0))
        front.upstream = spare.getsockname()[1]  # nothing listens there
        status, _, answer = call(front, contract.health_route())
    assert status == 503 and json.loads(answer)["error"].startswith("TF Serving did not answer")


# --- the entrypoint: the front before the process it starts -----------------------------------

FAKE_SERVER = '''#!{python}
"""tensorflow_model_server's place: answers its REST port on 127.0.0.1, logs each request,
exits 0 on SIGTERM."""
import json, re, signal, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

flags = dict(re.fullmatch(r"--(\\w+)=(.*)", arg).groups() for arg in sys.argv[1:])
log = open(sys.argv[0] + ".log", "a")

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        self.answer({{"model_version_status": [{{"state": "AVAILABLE"}}]}})
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        log.write(self.path + " " + str(len(body)) + "\\n"); log.flush()
        self.answer({{"predictions": [{{"size": len(body)}}]}})
    def answer(self, value):
        data = json.dumps(value).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
HTTPServer(("127.0.0.1", int(flags["rest_api_port"])), Handler).serve_forever()
'''

ENTRYPOINT = """import sys
from pathlib import Path
from serving import entrypoint
from os import environ
command, front = entrypoint.start(environ, Path(sys.argv[1]), "127.0.0.1", int(sys.argv[2]))
sys.exit(entrypoint.run(command, front))
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_entrypoint_puts_the_front_before_tf_serving(tmp_path):
    """The entrypoint as the image runs it, before a `tensorflow_model_server` of its own
    starting: the front answers the container's port with the export's budget (export.json's
    max_pixels), TF Serving's answers come through it, a request over the budget never
    reaches it, and SIGTERM stops both with TF Serving's status."""
    bin_dir, model = tmp_path / "bin", tmp_path / "model"
    bin_dir.mkdir()
    model.mkdir()
    server = bin_dir / "tensorflow_model_server"
    server.write_text(FAKE_SERVER.format(python=sys.executable))
    server.chmod(0o755)
    (model / "saved_model.pb").write_bytes(b"graph")
    (model / pixels.EXPORT_INFO).write_text(json.dumps({"max_pixels": 5000}))
    port = free_port()
    environ = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
               contract.PORT: str(port), contract.STORAGE_URI: str(model)}
    process = subprocess.Popen([sys.executable, "-c", ENTRYPOINT, str(tmp_path / "work"),
                                str(free_port())], cwd=REPO, env=environ,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + TIMEOUT
        while True:  # the health check, as Vertex AI sends it until TF Serving is up
            try:
                with urllib.request.urlopen(base + contract.health_route(), timeout=1) as answer:
                    assert json.loads(answer.read())["model_version_status"]
                    break
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() < deadline and process.poll() is None
                time.sleep(0.1)
        front = type("Address", (), {"port": port})
        within = json.dumps({"instances": [b64(encoded((70, 70), "PNG"))]}).encode()
        status, _, answer = call(front, PREDICT, within)
        assert (status, json.loads(answer)) == (200, {"predictions": [{"size": len(within)}]})
        over = json.dumps({"instances": [b64(encoded((50, 50), "PNG"))] * 3}).encode()
        status, _, answer = call(front, PREDICT, over)
        assert status == 400 and "over the budget of 5,000 a request" in answer.decode()
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=TIMEOUT)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 0, err
    assert "a request's pixel budget 5,000" in out and "--rest_api_port=" in out
    assert (bin_dir / "tensorflow_model_server.log").read_text() == \
        f"{PREDICT} {len(within)}\n"  # the refused request never reached it


# --- a sample of the asked images, kept for labelling -----------------------------------------

ASKED = "asked/pets-retinanet-mobilenet"
DAY = datetime.date(2026, 12, 3)


@pytest.fixture(scope="module")
def asked_bucket():
    from tests.fakes.gcs import FakeGcs

    with FakeGcs() as server:
        server.client().create_bucket("pets-data")
        yield server


def keeping_front(environ: dict, rate: float = 1.0, chance: float = 0.0, bucket="pets-data"):
    from serving.asked import Keeper, Keeping

    keeper = Keeper(Keeping(rate, bucket, ASKED), environ, chance=lambda: chance,
                    today=lambda: DAY)
    upstream = Upstream()
    front = Front(("127.0.0.1", 0), upstream.server_address[1], 10_000, keeper)
    for server in (upstream, front):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    return front, upstream


def stop(*servers) -> None:
    for server in servers:
        server.shutdown()
        server.server_close()


def test_a_sample_of_asked_images_is_kept_in_the_bucket_named_by_their_bytes(asked_bucket):
    """Every image of a sampled request that the graph could decode is created once under
    asked/NAME/DAY/, named by its sha256 and its format, bytes unchanged; what is no image, a
    request over the budget and a request the sample passes over keep nothing; every request
    is answered as before."""
    from serving.asked import KEPT_NAME

    jpeg, png = encoded((40, 30), "JPEG"), encoded((20, 10), "PNG")
    environ = {"STORAGE_EMULATOR_HOST": asked_bucket.url}
    front, upstream = keeping_front(environ)
    try:
        body = json.dumps({"instances": [b64(jpeg), b64(png), {"b64": "bm90IGFuIGltYWdl"},
                                         b64(b"\xff\xd8not-a-jpeg")]}).encode()
        assert call(front, PREDICT, body)[0] == 200
        assert call(front, PREDICT, json.dumps({"instances": [b64(jpeg)]}).encode())[0] == 200
        over = json.dumps({"instances": [b64(encoded((100, 101), "PNG"))]}).encode()
        assert call(front, PREDICT, over)[0] == 400
        assert front.keeper.drain() == {"kept": 2, "known": 1, "dropped": 0, "failed": 0}
    finally:
        stop(front, upstream)
    blobs = {blob.name: blob for blob in asked_bucket.client().list_blobs("pets-data")}
    assert sorted(blobs) == sorted(
        f"{ASKED}/2026-12-03/{hashlib.sha256(data).hexdigest()}.{kind}"
        for data, kind in ((jpeg, "jpg"), (png, "png")))
    for name, blob in blobs.items():
        assert KEPT_NAME.fullmatch(name)  # as label.push --asked reads it back
        assert blob.download_as_bytes() == (jpeg if name.endswith(".jpg") else png)
        assert blob.content_type == ("image/jpeg" if name.endswith(".jpg") else "image/png")
    front, upstream = keeping_front(environ, rate=0.5, chance=0.5)  # not this one
    try:
        assert call(front, PREDICT, json.dumps({"instances": [b64(png * 2)]}).encode())[0] == 200
        assert front.keeper.drain() == {"kept": 0, "known": 0, "dropped": 0, "failed": 0}
    finally:
        stop(front, upstream)


def test_keeping_that_cannot_write_never_fails_a_request_and_says_why(asked_bucket, capsys):
    front, upstream = keeping_front({"STORAGE_EMULATOR_HOST": asked_bucket.url},
                                    bucket="no-such-bucket")
    try:
        body = json.dumps({"instances": [b64(encoded((8, 8), "PNG"))]}).encode()
        status, _, answer = call(front, PREDICT, body)
        assert status == 200 and json.loads(answer)["predictions"]
        assert front.keeper.drain()["failed"] == 1
    finally:
        stop(front, upstream)
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("serving: an asked image was not kept: Cloud Storage answered 404 "
                           "to POST /upload/storage/v1/b/no-such-bucket/o?")


@pytest.mark.parametrize("rate, uri, wrong", [
    ("0", f"gs://pets-data/{ASKED}", "PETS_KEEP_ASKED='0'"),
    ("nan", f"gs://pets-data/{ASKED}", "PETS_KEEP_ASKED='nan'"),
    ("inf", f"gs://pets-data/{ASKED}", "PETS_KEEP_ASKED='inf'"),
    ("1.5", f"gs://pets-data/{ASKED}", "PETS_KEEP_ASKED='1.5'"),
    ("", f"gs://pets-data/{ASKED}", "PETS_KEEP_ASKED=''"),
    ("0.1", "gs://pets-data/runs/x", "PETS_ASKED_URI='gs://pets-data/runs/x'"),
    ("0.1", "gs://pets-data/asked/../runs", "PETS_ASKED_URI='gs://pets-data/asked/../runs'"),
    ("0.1", "gs://pets-data/asked/a/b", "PETS_ASKED_URI='gs://pets-data/asked/a/b'"),
    ("0.1", "", "PETS_ASKED_URI=''"),
])
def test_a_keeping_variable_the_image_cannot_use_stops_it_at_start_naming_it(
        tmp_path, rate, uri, wrong):
    from serving import asked
    from serving.asked import KEEP_RATE, KEEP_URI, Keeping
    from serving.entrypoint import ContractError, start
    from trainer.common import files

    environ = {KEEP_RATE: rate, KEEP_URI: uri, contract.STORAGE_URI: str(tmp_path / "none")}
    with pytest.raises(ContractError, match=re.escape(wrong)):
        start(environ, tmp_path / "work", "127.0.0.1")  # before the model is fetched
    assert not (tmp_path / "work").exists()
    assert Keeping.from_environ({}) is None
    assert asked.ASKED_PREFIX == files.ASKED_PREFIX  # the image imports nothing of ours
    assert Keeping.from_environ({KEEP_RATE: "0.05", KEEP_URI: f"gs://pets-data/{ASKED}/"}) == \
        Keeping(0.05, "pets-data", ASKED)


def test_a_slow_bucket_never_holds_a_request_and_a_full_queue_drops_and_says_so(capsys):
    """Cloud Storage that does not answer: requests are answered at once, QUEUE images wait,
    the rest are dropped and counted, with a line at the 1st, 10th, ... drop; once the bucket
    answers, the waiting ones are written."""
    from serving.asked import QUEUE, Keeper, Keeping

    release, created = threading.Event(), []

    class Bucket(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            release.wait(timeout=TIMEOUT * 6)
            created.append(body)
            send = b'{"name": "x"}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(send)))
            self.end_headers()
            self.wfile.write(send)

        def log_message(self, *args) -> None:
            pass

    bucket = ThreadingHTTPServer(("127.0.0.1", 0), Bucket)
    threading.Thread(target=bucket.serve_forever, daemon=True).start()
    keeper = Keeper(Keeping(1.0, "pets-data", ASKED),
                    {"STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{bucket.server_address[1]}"},
                    chance=lambda: 0.0, today=lambda: DAY)
    try:
        images = [encoded((8 + i, 8), "PNG") for i in range(QUEUE + 12)]
        keeper.offer(images[:1])
        while keeper.waiting.qsize():  # the writer holds the first, waiting on the bucket
            time.sleep(0.01)
        keeper.offer(images[1:])
        assert keeper.counts["dropped"] == 11 and keeper.waiting.qsize() == QUEUE
        release.set()
        assert keeper.drain() == {"kept": QUEUE + 1, "known": 0, "dropped": 11, "failed": 0}
    finally:
        release.set()
        bucket.shutdown()
        bucket.server_close()
    assert len(created) == QUEUE + 1
    assert capsys.readouterr().out.splitlines() == [
        f"serving: {n} asked image(s) not kept so far: the queue of {QUEUE} waiting to be "
        "written was full" for n in (1, 10)]
