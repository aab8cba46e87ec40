"""The yardstick for conversion speed: a converter in the style of the Object Detection API's
`create_pet_tf_record.py`. One process; it reads each image's header only (format and size),
parses the XML, builds the `tf.Example` as that script does (nested Feature objects) and
writes it. It validates nothing else, so a truncated image or a NaN in an XML reaches
training; ours aims to be at least as fast on the same cores.
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

from lxml import etree
from PIL import Image

from trainer.common import files
from trainer.data import pets
from trainer.data.label_map import pets_label_map
from trainer.data.planning import split_names


def _feature(kind: str, values: list):
    """`dataset_util.bytes_list_feature` and friends, as the reference script uses them."""
    import tensorflow as tf

    lists = {"bytes": tf.train.BytesList, "int64": tf.train.Int64List,
             "float": tf.train.FloatList}
    return tf.train.Feature(**{f"{kind}_list": lists[kind](value=values)})


def _example(data_dir: Path, name: str, source_id: int, label_map: dict[str, int]) -> bytes:
    import tensorflow as tf

    encoded = pets.image_path(data_dir, name).read_bytes()
    image = Image.open(io.BytesIO(encoded))  # reads the header: format and size only
    if image.format != "JPEG":
        raise ValueError("Image format not JPEG")
    key = hashlib.sha256(encoded).hexdigest()
    root = etree.fromstring(pets.xml_path(data_dir, name).read_bytes())
    width, height = int(root.findtext("size/width")), int(root.findtext("size/height"))
    breed = pets.breed_of(name)
    objects = root.findall("object")

    def side(tag: str, scale: int) -> list[float]:
        return [float(o.findtext(f"bndbox/{tag}")) / scale for o in objects]

    feature = {
        "image/height": _feature("int64", [height]),
        "image/width": _feature("int64", [width]),
        "image/filename": _feature("bytes", [f"{name}.jpg".encode()]),
        "image/source_id": _feature("bytes", [str(source_id).encode()]),
        "image/key/sha256": _feature("bytes", [key.encode()]),
        "image/encoded": _feature("bytes", [encoded]),
        "image/format": _feature("bytes", [b"jpeg"]),
        "image/object/bbox/xmin": _feature("float", side("xmin", width)),
        "image/object/bbox/xmax": _feature("float", side("xmax", width)),
        "image/object/bbox/ymin": _feature("float", side("ymin", height)),
        "image/object/bbox/ymax": _feature("float", side("ymax", height)),
        "image/object/class/text": _feature("bytes", [breed.encode()] * len(objects)),
        "image/object/class/label": _feature("int64", [label_map[breed]] * len(objects)),
        "image/object/difficult": _feature("int64", [int(o.findtext("difficult") or 0)
                                                     for o in objects]),
        "image/object/truncated": _feature("int64", [int(o.findtext("truncated") or 0)
                                                     for o in objects]),
        "image/object/view": _feature("bytes", [(o.findtext("pose") or "").encode()
                                                for o in objects]),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def convert_reference(data_dir: Path, output_dir: Path, num_shards: int = 10) -> int:
    """Converts like the reference script: returns the number of examples written; an
    example it cannot read is skipped (it logs a warning and goes on)."""
    import tensorflow as tf

    output_dir.mkdir(parents=True, exist_ok=True)
    label_map = pets_label_map()
    names = pets.read_example_list(data_dir / pets.TRAINVAL_LIST)
    written = 0
    for split, split_list in split_names(names).items():
        writers = [tf.io.TFRecordWriter(str(output_dir / files.shard_name(split, i, num_shards)))
                   for i in range(num_shards)]
        for index, name in enumerate(split_list):
            try:
                record = _example(data_dir, name, index + 1, label_map)
            except (OSError, ValueError, KeyError, TypeError, etree.XMLSyntaxError):
                continue
            writers[index % num_shards].write(record)
            written += 1
        for writer in writers:
            writer.close()
    return written
