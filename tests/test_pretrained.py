"""Pretrained checkpoints published as .tar.gz archives (Model Garden's COCO detectors):
fetched over HTTP from a server on 127.0.0.1, extracted once, the newest checkpoint found;
hostile archives refused."""

from __future__ import annotations

import functools
import http.server
import io
import tarfile
import threading
from pathlib import Path

import pytest

from trainer import pretrained
from trainer.errors import SettingsError


def archive(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


CHECKPOINTS = {"model/ckpt-9.index": b"i", "model/ckpt-9.data-00000-of-00001": b"d",
               "model/ckpt-33264.index": b"i", "model/ckpt-33264.data-00000-of-00001": b"d",
               "model/checkpoint": b'model_checkpoint_path: "ckpt-33264"\n'}


@pytest.fixture
def served(tmp_path):
    """A directory served over HTTP on 127.0.0.1 (stopped after the test)."""
    root = tmp_path / "www"
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join(timeout=10)


def test_an_archive_over_http_is_fetched_once_and_its_newest_checkpoint_used(served, tmp_path):
    root, url = served
    archive(root / "retinanet.tar.gz", CHECKPOINTS)
    cache = tmp_path / "cache"
    prefix = pretrained.extracted(f"{url}/retinanet.tar.gz", cache)
    assert prefix.endswith("/model/ckpt-33264")
    assert Path(f"{prefix}.index").read_bytes() == b"i"
    (root / "retinanet.tar.gz").unlink()  # the second run reads the extracted copy
    assert pretrained.extracted(f"{url}/retinanet.tar.gz", cache) == prefix
    assert [p.name for p in cache.iterdir()] == [Path(prefix).parents[1].name]  # no staging


def test_broken_missing_and_hostile_archives_are_one_line_errors(served, tmp_path):
    root, url = served
    cache = tmp_path / "cache"
    with pytest.raises(SettingsError, match="HTTP 404"):
        pretrained.extracted(f"{url}/missing.tar.gz", cache)
    with pytest.raises(SettingsError, match="no such archive"):
        pretrained.extracted(str(tmp_path / "nothing.tar.gz"), cache)
    archive(root / "empty.tar.gz", {"README": b"no checkpoint"})
    with pytest.raises(SettingsError, match="holds no checkpoint"):
        pretrained.extracted(f"{url}/empty.tar.gz", cache)
    archive(root / "evil.tar.gz", {"../../escaped.index": b"x"})
    with pytest.raises(SettingsError, match="outside"):
        pretrained.extracted(f"{url}/evil.tar.gz", cache)
    assert not (tmp_path / "escaped.index").exists()
    (root / "junk.tar.gz").write_bytes(b"not a tar file")
    with pytest.raises(SettingsError, match="not a readable tar archive"):
        pretrained.extracted(f"{url}/junk.tar.gz", cache)
    assert [p.name for p in cache.iterdir() if p.name.startswith("staging-")] == []
