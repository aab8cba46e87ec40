"""data.upload against the real fake-gcs-server: idempotent, no partial objects, clear errors."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time

import pytest

from launch.errors import InputError, MissingError
from launch.stores.gcs.upload import (
    StaleObjectsError,
    training_data_problems,
    upload_directory,
    upload_records,
)
from tests.conftest import REPO
from tests.fakes.gcs import FakeGcs


@pytest.fixture
def gcs(monkeypatch):
    with FakeGcs() as server:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", server.url)
        client = server.client()
        client.create_bucket("pets-data")
        yield client


@pytest.fixture
def records(tmp_path):
    root = tmp_path / "records"
    root.mkdir()
    rng = random.Random(0)
    for i in range(4):
        (root / f"train.record-0000{i}-of-00004").write_bytes(rng.randbytes(300_000))
    (root / "val.record-00000-of-00001").write_bytes(rng.randbytes(1000))
    (root / "pet_label_map.pbtxt").write_text("item { id: 1 name: 'Abyssinian' }\n")
    (root / "train.record-00009-of-00010.partial").write_bytes(b"unfinished conversion")
    return root


def test_upload_is_idempotent(gcs, records):
    first = upload_directory(gcs, "pets-data", records, "records")
    assert len(first.uploaded) == 6 and first.skipped == []
    names = sorted(b.name for b in gcs.list_blobs("pets-data"))
    assert names == sorted(f"records/{p.name}" for p in records.iterdir()
                           if not p.name.endswith(".partial"))
    blob = gcs.bucket("pets-data").blob("records/train.record-00001-of-00004")
    assert blob.download_as_bytes() == (records / "train.record-00001-of-00004").read_bytes()

    second = upload_directory(gcs, "pets-data", records, "records")
    assert second.uploaded == [] and len(second.skipped) == 6

    (records / "pet_label_map.pbtxt").write_text("item { id: 1 name: 'Bengal' }\n")
    third = upload_directory(gcs, "pets-data", records, "records")
    assert third.uploaded == ["records/pet_label_map.pbtxt"]


SIZE = 192 << 20  # 768 requests of 256 KiB: far more than 1.5 s of uploading


def test_a_killed_upload_leaves_no_partial_object(gcs, records):
    big = records / "train.record-00000-of-00004"
    big.write_bytes(random.Random(1).randbytes(SIZE))
    script = ("import sys; from tests.fakes.gcs import client_for; "
              "from launch.stores.gcs.upload import upload_directory; "
              "upload_directory(client_for(sys.argv[1]), 'pets-data', sys.argv[2], 'records', "
              "chunk_size=256 * 1024)")
    child = subprocess.Popen([sys.executable, "-c", script, os.environ["STORAGE_EMULATOR_HOST"],
                              str(records)], cwd=REPO)
    time.sleep(1.5)  # well into the resumable upload, 256 KiB per request
    assert child.poll() is None, "the upload finished before it could be interrupted"
    child.kill()  # the connection drops mid-object, as when a laptop lid closes
    child.wait(timeout=30)
    assert "records/train.record-00000-of-00004" not in {
        b.name for b in gcs.list_blobs("pets-data")}
    result = upload_directory(gcs, "pets-data", records, "records")
    assert "records/train.record-00000-of-00004" in result.uploaded
    blob = gcs.bucket("pets-data").get_blob("records/train.record-00000-of-00004")
    assert blob.size == SIZE


def test_missing_bucket_is_a_clear_error(gcs, records):
    with pytest.raises(MissingError, match="gs://nope does not exist"):
        upload_directory(gcs, "nope", records, "records")


def test_invoke_data_upload_reports_and_skips_on_rerun(gcs, records):
    env = {**os.environ, "PETS_PROJECT": "test", "PETS_BUCKET": "pets-data"}

    def run() -> str:
        result = subprocess.run([sys.executable, "-m", "invoke", "data.upload",
                                 f"--records-dir={records}"], cwd=REPO, env=env,
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        return result.stdout

    assert "uploaded 6, unchanged 0: gs://pets-data/records/" in run()
    assert "uploaded 0, unchanged 6" in run()


def reconvert_with_fewer_shards(records):
    for path in records.glob("train.record-*"):
        path.unlink()
    for i in range(2):
        (records / f"train.record-0000{i}-of-00002").write_bytes(random.Random(i).randbytes(999))


def remote(gcs) -> list[str]:
    return sorted(b.name.removeprefix("records/") for b in gcs.list_blobs("pets-data"))


def test_stale_shards_of_an_earlier_conversion_are_refused_or_pruned(gcs, records):
    upload_records(gcs, "pets-data", records, "records")
    reconvert_with_fewer_shards(records)
    before = remote(gcs)
    with pytest.raises(StaleObjectsError, match=r"holds 4 object\(s\) this conversion did not "
                                                r"write \(train\.record-00000-of-00004, .*"
                                                r"--prune"):
        upload_records(gcs, "pets-data", records, "records")
    assert remote(gcs) == before  # nothing uploaded, nothing deleted
    assert training_data_problems(gcs, "pets-data", "records") == []  # still the old, whole set

    result = upload_records(gcs, "pets-data", records, "records", prune=True)
    assert len(result.deleted) == 4
    assert remote(gcs) == sorted(p.name for p in records.iterdir() if p.is_file()
                                 and not p.name.endswith(".partial"))
    assert training_data_problems(gcs, "pets-data", "records") == []


def test_an_incomplete_or_linked_local_conversion_is_not_uploaded(gcs, records, tmp_path):
    (records / "train.record-00002-of-00004").unlink()
    with pytest.raises(InputError, match=r"not a complete conversion: it lacks "
                                         r"train\.record-00002-of-00004"):
        upload_records(gcs, "pets-data", records, "records")
    (records / "train.record-00002-of-00004").symlink_to(tmp_path / "secret")
    (tmp_path / "secret").write_text("ssh key")
    with pytest.raises(InputError, match="is a symlink"):
        upload_records(gcs, "pets-data", records, "records")
    assert remote(gcs) == []
