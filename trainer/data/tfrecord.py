"""TFRecord files of `tf.train.Example`s, written and read without TensorFlow.

Conversion and `data.inspect` need only these two formats, both small and fixed: the Example
protobuf (a map from feature names to a list of bytes, floats or int64s) and TFRecord's
framing (a length and two masked CRC-32Cs around each record). Doing them here spares every
conversion process and the report TensorFlow's import (4 to 5 CPU seconds, 0.5 GB of memory
and its CUDA chatter, 2026-11-28); tf.data and `tf.train.Example` read what is written
(tests/test_tfrecord.py compares both ways with TensorFlow's own writer and parser).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import google_crc32c
import numpy as np

BYTES, FLOATS, INT64S = 1, 2, 3  # the Feature's `kind` fields: bytes_list, float_list, ...
_MASK_DELTA = 0xA282EAD8  # TFRecord's CRC mask (tensorflow/core/lib/hash/crc32c.h)


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # a negative int64 as protobuf encodes it: ten bytes
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _values(kind: int, values: Sequence) -> bytes:
    """A BytesList, FloatList or Int64List; floats and int64s packed, as protobuf packs them."""
    if kind == BYTES:
        return b"".join(_field(1, value) for value in values)
    if not len(values):
        return b""
    if kind == FLOATS:
        with np.errstate(over="ignore"):  # as float32 holds them: past its range, inf
            return _field(1, np.asarray(values, dtype="<f4").tobytes())
    return _field(1, b"".join(_varint(int(value)) for value in values))


def example(features: Iterable[tuple[str, int, Sequence]]) -> bytes:
    """A serialized tf.train.Example of (name, kind, values): the bytes TensorFlow's
    `SerializeToString(deterministic=True)` gives (features in name order); a kind with no
    values is still set, as `feature[name].float_list.value.extend([])` sets it."""
    entries = b"".join(
        _field(1, _field(1, name.encode()) + _field(2, _field(kind, _values(kind, values))))
        for name, kind, values in sorted(features, key=lambda feature: feature[0]))
    return _field(1, entries) if entries else b""  # no features: an unset message


def _masked_crc(data: bytes) -> bytes:
    crc = google_crc32c.value(data)
    return struct.pack("<I", ((crc >> 15 | crc << 17) + _MASK_DELTA) & 0xFFFFFFFF)


def framed(record: bytes) -> bytes:
    """One record as a TFRecord file holds it: length, its CRC, the bytes, their CRC."""
    length = struct.pack("<Q", len(record))
    return length + _masked_crc(length) + record + _masked_crc(record)


def records(path: str | Path) -> Iterator[bytes]:
    """The records of a TFRecord file, each checked against its CRCs: a file that is not one
    (or is cut short) is a ValueError saying where (the caller names the file)."""
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        while header := file.read(12):
            length = header[:8]
            if len(header) < 12 or _masked_crc(length) != header[8:]:
                raise ValueError(f"not a TFRecord file (a bad record header at byte "
                                 f"{file.tell() - len(header)})")
            declared = struct.unpack("<Q", length)[0]
            if declared > size - file.tell():  # never allocated: the file is shorter
                raise ValueError(f"a record of {declared:,} bytes where the file has "
                                 f"{size - file.tell():,} left (cut short, or corrupt)")
            record = file.read(declared)
            if _masked_crc(record) != file.read(4):
                raise ValueError("a record that fails its checksum (cut short, or corrupt)")
            yield record


def _read_varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while shift < 70:
        if position >= len(data):
            raise ValueError("not a tf.train.Example: a number is cut short")
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7
    raise ValueError("not a tf.train.Example: a number of more than ten bytes")


def _fields(data: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of a protobuf message."""
    position = 0
    while position < len(data):
        key, position = _read_varint(data, position)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, position = _read_varint(data, position)
        elif wire in (1, 2, 5):
            size, position = ((8, position) if wire == 1 else (4, position) if wire == 5
                              else _read_varint(data, position))
            value, position = data[position:position + size], position + size
            if position > len(data):
                raise ValueError("not a tf.train.Example: a field runs past its end")
        else:
            raise ValueError(f"not a tf.train.Example: wire type {wire}")
        yield number, wire, value


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _list_values(kind: int, listed: bytes) -> list:
    values: list = []
    for number, wire, value in _fields(listed):
        if number != 1:
            continue
        if kind == BYTES and wire == 2:
            values.append(value)
        elif kind == FLOATS and wire in (2, 5):  # packed, or one at a time
            if len(value) % 4:
                raise ValueError("not a tf.train.Example: floats of a length not 4 bytes each")
            values.extend(np.frombuffer(value, "<f4").tolist())
        elif kind == INT64S and wire == 2:
            position = 0
            while position < len(value):
                number, position = _read_varint(value, position)
                values.append(_signed(number))
        elif kind == INT64S and wire == 0:
            values.append(_signed(value))
    return values


def parse_example(data: bytes) -> dict[str, list]:
    """A serialized tf.train.Example as {name: its values} (bytes, floats or ints); a
    ValueError for bytes that are not one."""
    found: dict[str, list] = {}
    for number, wire, features in _fields(data):
        if number != 1 or wire != 2:
            continue
        for entry_number, entry_wire, entry in _fields(features):
            if entry_number != 1 or entry_wire != 2:
                continue
            parts = {n: v for n, w, v in _fields(entry) if w == 2}
            kinds = [(n, v) for n, w, v in _fields(parts.get(2, b"")) if w == 2]
            found[parts.get(1, b"").decode("utf-8", "replace")] = \
                _list_values(*kinds[-1]) if kinds else []
    return found


class TFRecordWriter:
    """`tf.io.TFRecordWriter` for a local file, uncompressed."""

    def __init__(self, path: str | Path) -> None:
        self._file = open(path, "wb")  # noqa: SIM115 (closed by __exit__)

    def write(self, record: bytes) -> None:
        self._file.write(framed(record))

    def __enter__(self) -> TFRecordWriter:
        return self

    def __exit__(self, *exc) -> None:
        self._file.close()
