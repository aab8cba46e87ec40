"""Download against a real HTTP server on 127.0.0.1: checksums, resume, safe extraction."""

from __future__ import annotations

import hashlib
import http.server
import io
import random
import tarfile
import threading
from pathlib import Path

import pytest

from trainer.common.errors import DownloadError
from trainer.data.download import Archive, download_pets, fetch, safe_extract


def tarball(members: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return buffer.getvalue()


def archive_for(filename: str, data: bytes) -> Archive:
    return Archive(filename, hashlib.sha256(data).hexdigest(), len(data))


class Server:
    """Serves `files` with HTTP Range support; records the Range headers it was sent."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files, self.ranges = files, []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                data = server.files.get(self.path.lstrip("/"))
                if data is None:
                    self.send_error(404)
                    return
                header = self.headers.get("Range")
                server.ranges.append(header)
                start = int(header.split("=")[1].rstrip("-")) if header else 0
                if start >= len(data):
                    self.send_error(416)
                    return
                self.send_response(206 if header else 200)
                self.send_header("Content-Length", str(len(data) - start))
                self.end_headers()
                self.wfile.write(data[start:])

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


IMAGES = tarball({"images/Abyssinian_1.jpg": b"\xff\xd8" + random.Random(0).randbytes(50_000)})
ANNOTATIONS = tarball({"annotations/trainval.txt": b"Abyssinian_1 1 1 1\n",
                       "annotations/xmls/Abyssinian_1.xml": b"<annotation/>"})
ARCHIVES = (archive_for("images.tar.gz", IMAGES), archive_for("annotations.tar.gz", ANNOTATIONS))


def test_downloads_verifies_and_extracts(tmp_path):
    with Server({"images.tar.gz": IMAGES, "annotations.tar.gz": ANNOTATIONS}) as server:
        root = download_pets(tmp_path, server.url, ARCHIVES, progress=False)
        assert (root / "images/Abyssinian_1.jpg").read_bytes().startswith(b"\xff\xd8")
        assert (root / "annotations/xmls/Abyssinian_1.xml").exists()
        before = len(server.ranges)
        download_pets(tmp_path, server.url, ARCHIVES, progress=False)  # verified: not refetched
        assert len(server.ranges) == before


def test_partial_download_resumes_with_a_range_request(tmp_path):
    (tmp_path / "images.tar.gz.partial").write_bytes(IMAGES[:1000])
    with Server({"images.tar.gz": IMAGES}) as server:
        fetch(f"{server.url}/images.tar.gz", tmp_path / "images.tar.gz", ARCHIVES[0], False)
    assert server.ranges == ["bytes=1000-"]
    assert (tmp_path / "images.tar.gz").read_bytes() == IMAGES
    assert not (tmp_path / "images.tar.gz.partial").exists()


def test_corrupt_partial_download_is_discarded_and_fetched_again(tmp_path):
    (tmp_path / "images.tar.gz.partial").write_bytes(b"garbage" * 100)
    with Server({"images.tar.gz": IMAGES}) as server:
        fetch(f"{server.url}/images.tar.gz", tmp_path / "images.tar.gz", ARCHIVES[0], False)
    assert server.ranges == ["bytes=700-", None]
    assert (tmp_path / "images.tar.gz").read_bytes() == IMAGES


def test_wrong_file_on_the_server_is_a_checksum_error(tmp_path):
    wrong = IMAGES[:100] + bytes(len(IMAGES) - 100)  # the expected size, another digest
    with Server({"images.tar.gz": wrong}) as server, \
            pytest.raises(DownloadError, match="checksum mismatch"):
        fetch(f"{server.url}/images.tar.gz", tmp_path / "images.tar.gz", ARCHIVES[0], False)
    assert server.ranges == [None, None]  # fetched again once from byte 0, then refused
    assert list(tmp_path.iterdir()) == []  # nothing half-written left behind


def test_a_shorter_file_on_the_server_is_named_as_such(tmp_path):
    with Server({"images.tar.gz": IMAGES[:-10]}) as server, \
            pytest.raises(DownloadError, match=f"the server's file ends at {len(IMAGES) - 10:,} "
                                               f"bytes, not the expected {len(IMAGES):,}"):
        fetch(f"{server.url}/images.tar.gz", tmp_path / "images.tar.gz", ARCHIVES[0], False)
    assert list(tmp_path.iterdir()) == []


class CuttingServer(Server):
    """Declares the whole length, then drops the connection after `cut` bytes, for the
    first `cuts` requests; `ranges=False` answers every request with the whole file (200)."""

    def __init__(self, files: dict[str, bytes], cut: int, cuts: int, ranges: bool = True):
        super().__init__(files)
        server, self.cuts = self, cuts

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                data = server.files[self.path.lstrip("/")]
                header = self.headers.get("Range")
                server.ranges.append(header)
                start = int(header.split("=")[1].rstrip("-")) if header and ranges else 0
                self.send_response(206 if header and ranges else 200)
                self.send_header("Content-Length", str(len(data) - start))
                self.end_headers()
                server.cuts -= 1
                self.wfile.write(data[start:start + cut] if server.cuts >= 0 else data[start:])
                self.close_connection = True

            def log_message(self, *args):
                pass

        self.httpd.RequestHandlerClass = Handler


def test_a_cut_download_resumes_where_it_stopped(tmp_path):
    """The connection drops mid-body twice: each short file is resumed from its end (HTTP
    Range), never called a different file, and the whole file's digest is checked."""
    with CuttingServer({"images.tar.gz": IMAGES}, cut=20_000, cuts=2) as server:
        fetch(f"{server.url}/images.tar.gz", tmp_path / "images.tar.gz", ARCHIVES[0], False)
    assert server.ranges == [None, "bytes=20000-", "bytes=40000-"]
    assert (tmp_path / "images.tar.gz").read_bytes() == IMAGES
    assert sorted(p.name for p in tmp_path.iterdir()) == ["images.tar.gz"]


def test_a_server_that_ignores_range_starts_over_from_its_answer(tmp_path):
    with CuttingServer({"images.tar.gz": IMAGES}, cut=20_000, cuts=1, ranges=False) as server:
        fetch(f"{server.url}/images.tar.gz", tmp_path / "images.tar.gz", ARCHIVES[0], False)
    assert server.ranges == [None, "bytes=20000-"]  # asked to resume; sent the whole file
    assert (tmp_path / "images.tar.gz").read_bytes() == IMAGES


def test_a_server_that_drops_every_connection_keeps_what_arrived(tmp_path):
    with CuttingServer({"images.tar.gz": IMAGES}, cut=0, cuts=100) as server, \
            pytest.raises(DownloadError, match=r"the connection dropped 20 times; 0 of "
                                               rf"{len(IMAGES):,} bytes are kept in .*\.partial: "
                                               "run the command again to resume"):
        fetch(f"{server.url}/images.tar.gz", tmp_path / "images.tar.gz", ARCHIVES[0], False)
    assert len(server.ranges) == 20


def test_a_complete_partial_file_is_checked_not_fetched_again(tmp_path):
    (tmp_path / "images.tar.gz.partial").write_bytes(IMAGES)
    with Server({"images.tar.gz": IMAGES}) as server:
        fetch(f"{server.url}/images.tar.gz", tmp_path / "images.tar.gz", ARCHIVES[0], False)
    assert server.ranges == [] and (tmp_path / "images.tar.gz").read_bytes() == IMAGES


def test_unreachable_server_is_a_clear_error(tmp_path):
    with Server({}) as server, pytest.raises(DownloadError, match="HTTP 404"):
        fetch(f"{server.url}/images.tar.gz", tmp_path / "x", ARCHIVES[0], False)


@pytest.mark.parametrize("members,links", [
    ({"../escape.txt": b"x"}, None),
    ({"/etc/evil": b"x"}, None),
    ({"images/ok.jpg": b"x"}, {"images/link": "../../outside"}),
])
def test_archives_escaping_the_directory_are_refused_whole(tmp_path, members, links):
    path = tmp_path / "evil.tar.gz"
    path.write_bytes(tarball({"images/first.jpg": b"x", **members}, links))
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(DownloadError, match="refusing to extract"):
        safe_extract(path, out)
    assert list(out.iterdir()) == []  # refused before anything was written


def test_not_a_tarball_is_a_clear_error(tmp_path):
    path = tmp_path / "images.tar.gz"
    path.write_bytes(b"<html>captive portal</html>")
    with pytest.raises(DownloadError, match="not a readable tar archive"):
        safe_extract(path, tmp_path)
    assert Path(path).exists()


class EndlessServer(Server):
    """Declares no length and streams until the client hangs up (at most 200 MB)."""

    def __init__(self) -> None:
        super().__init__({})
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                server.ranges.append(self.headers.get("Range"))
                self.send_response(200)
                self.end_headers()
                try:
                    for _ in range(200):
                        self.wfile.write(b"\0" * (1 << 20))
                except OSError:
                    pass

            def log_message(self, *args):
                pass

        self.httpd.RequestHandlerClass = Handler


@pytest.mark.parametrize("partial", [0, 1000])
def test_a_server_sending_more_than_the_declared_size_is_cut_off(tmp_path, partial):
    if partial:
        (tmp_path / "images.tar.gz.partial").write_bytes(IMAGES[:partial])
    with EndlessServer() as server, \
            pytest.raises(DownloadError, match=f"more than the expected {len(IMAGES)} bytes"):
        fetch(f"{server.url}/images.tar.gz", tmp_path / "images.tar.gz", ARCHIVES[0], False)
    assert list(tmp_path.iterdir()) == []  # the oversized partial file is gone


def test_a_partial_file_longer_than_the_archive_starts_over(tmp_path):
    (tmp_path / "images.tar.gz.partial").write_bytes(b"x" * (len(IMAGES) + 5))
    with Server({"images.tar.gz": IMAGES}) as server:
        fetch(f"{server.url}/images.tar.gz", tmp_path / "images.tar.gz", ARCHIVES[0], False)
    assert server.ranges == [None] and (tmp_path / "images.tar.gz").read_bytes() == IMAGES
