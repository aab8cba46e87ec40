"""The serving image's copy of the model (serving/fetch.py): a local
directory is copied without following a link, regular files only, up to a size bound; Cloud
Storage's transient answers (408, 429, 5xx, a reset or cut-off connection) are tried again
with a bounded exponential backoff, and every other answer fails at once."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from serving.fetch import Backoff, FetchError, Quota, Storage, copy_local, fetch

QUICK = Backoff(tries=4, first=0.001)  # the schedule's shape, without its seconds


def model(folder: Path) -> Path:
    (folder / "variables").mkdir(parents=True)
    (folder / "saved_model.pb").write_bytes(b"graph")
    (folder / "variables" / "variables.index").write_bytes(b"index")
    return folder


def test_a_local_copy_takes_files_and_folders(tmp_path):
    source = model(tmp_path / "model")
    assert copy_local(str(source), tmp_path / "copy") == 2
    assert (tmp_path / "copy" / "variables" / "variables.index").read_bytes() == b"index"


@pytest.mark.parametrize("target", ["outside.txt", "/dev/zero", "outside-folder", "missing"])
def test_a_local_copy_refuses_a_symbolic_link_by_name(tmp_path, target):
    """A link to a file outside the model directory was copied in as that file; one to
    /dev/zero was read until the disk was full. Each is refused, naming the link."""
    (tmp_path / "outside.txt").write_text("secret")
    (tmp_path / "outside-folder").mkdir()
    (tmp_path / "outside-folder" / "key").write_text("secret")
    source = model(tmp_path / "model")
    link = source / "variables" / "variables.data-00000-of-00001"
    link.symlink_to(target if target.startswith("/") else tmp_path / target)
    with pytest.raises(FetchError) as refused:
        copy_local(str(source), tmp_path / "copy")
    assert str(refused.value) == (
        f"{link} is a symbolic link: the serving copy follows none (it could name a file "
        "outside the model directory, or /dev/zero); copy what it points to into the "
        "directory")
    assert not [p for p in (tmp_path / "copy").rglob("*") if p.is_file() and
                p.read_bytes() == b"secret"]


def test_a_local_copy_refuses_a_fifo_without_waiting_for_a_writer(tmp_path):
    source = model(tmp_path / "model")
    os.mkfifo(source / "pipe")
    with pytest.raises(FetchError, match=r"pipe is not a regular file \(a device, a FIFO or "
                                         "a socket\\): the serving copy takes files and "
                                         "folders only"):
        copy_local(str(source), tmp_path / "copy")


def test_a_local_copy_stops_at_its_size_bound(tmp_path):
    """The bound holds however large a file is: the copy stops within a chunk of it."""
    source = model(tmp_path / "model")
    (source / "large").write_bytes(bytes(3 << 20))
    with pytest.raises(FetchError, match=r"holds more than 0\.00195312 GiB: the serving copy "
                                         "stops there"):
        copy_local(str(source), tmp_path / "copy", Quota(str(source), max_bytes=2 << 20))
    assert copy_local(str(source), tmp_path / "whole") == 3  # the default bound: 4 GiB


class Bucket:
    """A Cloud Storage JSON API on 127.0.0.1 that answers each path as `script` says, one
    step a request (the last step repeats): an int is that status, "reset" closes the
    connection unanswered, "cut" sends half the body it promised, "endless" streams zeros
    without a length, bytes is the body."""

    def __init__(self, script: dict[str, list]) -> None:
        self.script = script
        self.asked: list[str] = []
        bucket = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                kind = "media" if "alt=media" in self.path else "list"
                bucket.asked.append(kind)
                steps = bucket.script[kind]
                step = steps[min(bucket.asked.count(kind), len(steps)) - 1]
                if step == "reset":
                    self.close_connection = True
                    return
                if isinstance(step, int):
                    body = json.dumps({"error": {"message": f"status {step}"}}).encode()
                    self.send_response(step)
                elif step == "endless":
                    self.send_response(200)
                    self.end_headers()
                    try:
                        while True:
                            self.wfile.write(bytes(1 << 16))
                    except OSError:  # the client stopped reading
                        return
                else:
                    body = step if step != "cut" else b"x" * 10
                    self.send_response(200)
                self.send_header("Content-Length", str(len(body) * (2 if step == "cut" else 1)))
                self.end_headers()
                self.wfile.write(body)
                self.close_connection = True

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.environ = {"STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{self.server.server_port}"}

    @contextmanager
    def serving(self) -> Iterator[Bucket]:
        thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.server.shutdown()
            self.server.server_close()
            thread.join(10)


LISTING = json.dumps({"items": [{"name": "m/saved_model.pb"}]}).encode()


def test_transient_answers_are_tried_again_until_the_copy_is_whole(tmp_path):
    """One 503 listing, then a 429, a reset connection and a body cut short for the
    object: the copy still ends whole, and a replica starts."""
    bucket = Bucket({"list": [503, LISTING], "media": [429, "reset", "cut", b"graph"]})
    with bucket.serving():
        assert fetch("gs://b/m", tmp_path / "copy", bucket.environ, QUICK) == 1
    assert (tmp_path / "copy" / "saved_model.pb").read_bytes() == b"graph"
    assert bucket.asked == ["list", "list", "media", "media", "media", "media"]
    assert [p.name for p in (tmp_path / "copy").iterdir()] == ["saved_model.pb"]  # no partial


@pytest.mark.parametrize("status", [408, 500, 502, 503, 504])
def test_a_transient_error_that_lasts_fails_after_the_bounded_tries(tmp_path, status):
    bucket = Bucket({"list": [LISTING], "media": [status]})
    with bucket.serving(), pytest.raises(FetchError) as failed:
        fetch("gs://b/m", tmp_path / "copy", bucket.environ, QUICK)
    assert str(failed.value) == (f"Cloud Storage answered {status} to GET /storage/v1/b/b/o/"
                                 f"m%2Fsaved_model.pb?alt=media: status {status} (tried 4 "
                                 "times)")
    assert bucket.asked == ["list"] + ["media"] * 4


@pytest.mark.parametrize("status", [400, 401, 403, 404])
def test_a_permanent_error_fails_at_once(tmp_path, status):
    bucket = Bucket({"list": [status, LISTING]})
    with bucket.serving(), pytest.raises(FetchError, match=f"answered {status} to GET"):
        fetch("gs://b/m", tmp_path / "copy", bucket.environ, QUICK)
    assert bucket.asked == ["list"]


def test_an_endless_object_stops_at_the_size_bound(tmp_path):
    """Cloud Storage's answer is data too: a body without an end stops at the bound, and
    no partial file stays."""
    bucket = Bucket({"media": ["endless"]})
    with bucket.serving(), pytest.raises(FetchError, match="holds more than"):
        Storage(bucket.environ, QUICK).download("b", "m/x", tmp_path / "x",
                                                Quota("gs://b/m", max_bytes=4 << 20))
    assert bucket.asked == ["media"] and not list(tmp_path.iterdir())


def test_the_backoff_doubles_with_up_to_its_first_wait_of_jitter_and_is_truncated():
    """Google's truncated exponential backoff: 1, 2, 4, 8, 16 s, each plus under a second,
    never more than the longest wait; six tries in all by default."""
    waits: list[float] = []

    def fails() -> None:
        from serving.fetch import Transient

        raise Transient("503")

    with pytest.raises(FetchError, match=r"^503 \(tried 6 times\)$"):
        Backoff().run(fails, sleep=waits.append)
    assert [int(wait) for wait in waits] == [1, 2, 4, 8, 16]
    assert sum(waits) < 36
    waits.clear()
    with pytest.raises(FetchError):
        Backoff(tries=9, longest=20).run(fails, sleep=waits.append)
    assert max(waits) == 20 and len(waits) == 8
