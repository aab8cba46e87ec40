"""TFRecords written without TensorFlow (trainer/data/tfrecord.py): the bytes TensorFlow's own
Example serializer and TFRecordWriter give, and a conversion that never loads TensorFlow."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import HANG, REPO
from trainer.data import tfrecord
from trainer.data.tf_example import MASK_KEY, Box, detection_example

FEATURES = [  # every kind, empty lists, edges of each type, names out of order
    ("z/last", tfrecord.BYTES, [b"", b"\x00\xff" * 40, "café 🐈".encode()]),
    ("a/floats", tfrecord.FLOATS, [0.0, -0.0, 0.1, 1.0, 1e-45, 3.4028235e38, 1e40, -1e40]),
    ("m/int64s", tfrecord.INT64S, [0, 1, 127, 128, 300, 2**63 - 1, -1, -(2**63)]),
    ("empty/bytes", tfrecord.BYTES, []),
    ("empty/floats", tfrecord.FLOATS, []),
    ("empty/int64s", tfrecord.INT64S, []),
    ("ünïcode/name", tfrecord.INT64S, [7]),
]


def tensorflow_example(features) -> bytes:
    import tensorflow as tf

    kinds = {tfrecord.BYTES: "bytes_list", tfrecord.FLOATS: "float_list",
             tfrecord.INT64S: "int64_list"}
    example = tf.train.Example()
    for name, kind, values in features:
        getattr(example.features.feature[name], kinds[kind]).value.extend(values)
    return example.SerializeToString(deterministic=True)


def test_examples_are_the_bytes_tensorflow_serializes():
    assert tfrecord.example(FEATURES) == tensorflow_example(FEATURES)
    assert tfrecord.example([]) == tensorflow_example([])


@pytest.mark.parametrize("boxes, masks", [
    ([], None),
    ([Box(0.1, 0.2, 0.5, 0.9, "Abyssinian", 1), Box(0.0, 0.0, 1.0, 1.0, "chat 🐈", 38, 1, 0,
                                                      "Frontal", 1)], [b"png1", b"png2"])])
def test_a_detection_example_parses_as_what_tensorflow_built(boxes, masks):
    import tensorflow as tf

    serialized = detection_example(b"\xff\xd8jpeg", 640, 480, "a b.jpg", 123, boxes, masks)
    parsed = tf.train.Example.FromString(serialized)
    assert parsed.SerializeToString(deterministic=True) == serialized
    feature = parsed.features.feature
    assert feature["image/object/class/label"].int64_list.value == [b.class_label for b in boxes]
    assert list(feature["image/object/bbox/xmax"].float_list.value) == pytest.approx(
        [b.xmax for b in boxes])
    assert feature["image/object/bbox/xmin"].WhichOneof("kind") == "float_list"  # even empty
    assert (MASK_KEY in feature) is (masks is not None)


def test_files_are_the_bytes_tensorflows_writer_writes_and_tf_data_reads_them(tmp_path):
    import tensorflow as tf

    records = [b"", b"x", tfrecord.example(FEATURES), bytes(range(256)) * 300]
    with tfrecord.TFRecordWriter(tmp_path / "ours.record") as writer:
        for record in records:
            writer.write(record)
    with tf.io.TFRecordWriter(str(tmp_path / "theirs.record")) as writer:
        for record in records:
            writer.write(record)
    assert (tmp_path / "ours.record").read_bytes() == (tmp_path / "theirs.record").read_bytes()
    read = [r.numpy() for r in tf.data.TFRecordDataset(str(tmp_path / "ours.record"))]
    assert read == records


def test_a_conversion_process_never_loads_tensorflow(tmp_path):
    code = ("import sys; from trainer.data.sample import write_sample; "
            "from trainer.data.convert import convert_directory; "
            "convert_directory(write_sample(sys.argv[1], num_images=12), sys.argv[2], "
            "num_shards=2, processes=2, progress=False, masks=True); "
            "assert 'tensorflow' not in sys.modules, 'TensorFlow was imported'")
    ran = subprocess.run([sys.executable, "-c", code, str(tmp_path / "pets"),
                          str(tmp_path / "out")], cwd=REPO, capture_output=True, text=True,
                         timeout=HANG)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert len(list((tmp_path / "out").glob("*.record-*"))) == 6  # train, val, test: 2 each


def test_examples_and_files_read_back_as_tensorflow_reads_them(tmp_path):
    import tensorflow as tf

    ours = tfrecord.parse_example(tensorflow_example(FEATURES))
    theirs = tf.train.Example.FromString(tensorflow_example(FEATURES)).features.feature
    assert set(ours) == set(theirs)
    for name, kind, _ in FEATURES:
        listed = getattr(theirs[name], {1: "bytes_list", 2: "float_list", 3: "int64_list"}[kind])
        assert ours[name] == list(listed.value), name
    records = [b"", tensorflow_example(FEATURES), b"\x00" * 70_000]
    with tf.io.TFRecordWriter(str(tmp_path / "theirs.record")) as writer:
        for record in records:
            writer.write(record)
    assert list(tfrecord.records(tmp_path / "theirs.record")) == records


@pytest.mark.parametrize("damage, message", [
    (lambda data: data[:-3], "a record that fails its checksum"),
    (lambda data: data[:5], "not a TFRecord file"),
    (lambda data: b"x" * 12 + data, "not a TFRecord file"),
    (lambda data: data[:20] + bytes([data[20] ^ 1]) + data[21:],
     "a record that fails its checksum")])
def test_a_damaged_file_is_named_not_read(tmp_path, damage, message):
    path = tmp_path / "damaged.record"
    path.write_bytes(damage(tfrecord.framed(tfrecord.example(FEATURES))))
    with pytest.raises(ValueError, match=f"^{message}"):
        list(tfrecord.records(path))


def test_a_header_declaring_more_than_the_file_holds_is_refused_unread(tmp_path):
    """A length of 2^62 with its checksum right: named at once, nothing allocated for it."""
    import struct

    length = struct.pack("<Q", 1 << 62)
    path = tmp_path / "huge.record"
    path.write_bytes(length + tfrecord._masked_crc(length) + b"x" * 100)
    with pytest.raises(ValueError, match=r"^a record of 4,611,686,018,427,387,904 bytes where "
                                         r"the file has 100 left"):
        list(tfrecord.records(path))


@pytest.mark.parametrize("data", [b"\x0a\xff", b"\x0a\x05\x0a\x03\x0a\x01", b"\x0b",
                                  b"\x0a" + b"\xff" * 11,
                                  # a float list of 3 bytes
                                  tfrecord._field(1, tfrecord._field(1, tfrecord._field(
                                      1, b"a") + tfrecord._field(2, tfrecord._field(
                                          tfrecord.FLOATS, tfrecord._field(1, b"abc")))))])
def test_bytes_that_are_not_an_example_are_a_value_error(data):
    with pytest.raises(ValueError, match=r"^not a tf\.train\.Example"):
        tfrecord.parse_example(data)


def test_data_inspect_reads_records_without_tensorflow_and_names_a_bad_one(tmp_path):
    code = ("import sys; from pathlib import Path; "
            "from trainer.data.sample import write_sample; "
            "from trainer.data.convert import convert_directory; "
            "from launch.features.dataset_report import inspect; "
            "convert_directory(write_sample(sys.argv[1], num_images=12), sys.argv[2], "
            "num_shards=1, progress=False); "
            "print(inspect(sys.argv[2], 'pets_retinanet_mobilenet', Path(sys.argv[3]))); "
            "assert 'tensorflow' not in sys.modules, 'TensorFlow was imported'")
    ran = subprocess.run([sys.executable, "-c", code, str(tmp_path / "pets"),
                          str(tmp_path / "out"), str(tmp_path / "report")], cwd=REPO,
                         capture_output=True, text=True, timeout=HANG)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "report: " in ran.stdout and ran.stderr == ""  # no CUDA or absl line either
    from launch.errors import InputError
    from launch.features.dataset_report import inspect

    (shard,) = (tmp_path / "out").glob("val.record-*")
    intact = shard.read_bytes()
    with tfrecord.TFRecordWriter(shard) as writer:  # a width written as text
        writer.write(tfrecord.example([("image/width", tfrecord.BYTES, [b"wide"])]))
    with pytest.raises(InputError, match=f"^{re.escape(str(shard))}: image/width holds other "
                                         "than int values: not an Object Detection API"):
        inspect(str(tmp_path / "out"), "pets_retinanet_mobilenet", tmp_path / "report2")
    shard.write_bytes(intact[:-1])
    with pytest.raises(InputError, match=f"^{re.escape(str(shard))}: a record that fails its "
                                         "checksum"):
        inspect(str(tmp_path / "out"), "pets_retinanet_mobilenet", tmp_path / "report2")
