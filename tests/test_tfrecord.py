"""TFRecords written without TensorFlow (trainer/data/tfrecord.py): the bytes TensorFlow's own
Example serializer and TFRecordWriter give, and a conversion that never loads TensorFlow."""

from __future__ import annotations

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
    assert len(list((tmp_path / "out").glob("*.record-*"))) == 4
