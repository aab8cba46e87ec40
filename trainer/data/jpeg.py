"""Will training's JPEG decoder read this file to the end? A walk over the JPEG's structure,
with libjpeg's own checks, instead of a decode.

TensorFlow decodes images with libjpeg(-turbo), which stops on broken structure (a truncated
or zero-filled file, a bad table, an unknown marker, a scan that names what the frame lacks)
but only warns about damaged entropy-coded data (and decodes it to grey or noise). So the
walk checks each header segment as libjpeg's jdmarker.c, jdhuff.c, jdphuff.c and jdinput.c
do, and finds the end of each scan's entropy-coded data with a byte search, in C. It costs a
scan of the bytes instead of a decode of every coefficient (a third of the time of even a
1/8-scale decode), and `tests/test_convert_hostile.py` checks it against TensorFlow's decoder
on damaged copies of JPEGs of every kind.
"""

from __future__ import annotations

import dataclasses
import functools
import re

# Markers (ITU T.81 B.1.1.3): the next one after 0xFF fill bytes and any stray bytes, as
# libjpeg finds it; inside entropy-coded data 0xFF00 is a stuffed byte and RSTn belong to it.
_NEXT_MARKER = re.compile(rb"\xff[^\x00\xff]")
_END_OF_SCAN = re.compile(rb"\xff[^\x00\xff\xd0-\xd7]")
_EOI, _SOS, _DQT, _DHT, _DAC, _DRI = 0xD9, 0xDA, 0xDB, 0xC4, 0xCC, 0xDD
_STANDALONE = frozenset({0x01, *range(0xD0, 0xD8)})  # TEM and RSTn carry no length
# The frame types libjpeg(-turbo) decodes: baseline, extended, progressive; Huffman or
# arithmetic. Lossless and hierarchical frames, like unknown markers, stop it.
_FRAMES = frozenset({0xC0, 0xC1, 0xC2, 0xC9, 0xCA})
_PROGRESSIVE = frozenset({0xC2, 0xCA})
_ARITHMETIC = frozenset({0xC9, 0xCA})
_KNOWN = _FRAMES | {_SOS, _DQT, _DHT, _DAC, _DRI, 0xDC, 0xFE, *range(0xE0, 0xF0)}
MAX_BLOCKS_IN_MCU = 10  # libjpeg's D_MAX_BLOCKS_IN_MCU


@dataclasses.dataclass
class JpegHeaders:
    """What libjpeg has read so far: the frame, the tables defined, the scans begun."""

    width: int = 0
    height: int = 0
    # component id -> (quantization table, horizontal and vertical sampling factors)
    components: dict[int, tuple[int, int, int]] = dataclasses.field(default_factory=dict)
    quant_tables: set[int] = dataclasses.field(default_factory=set)
    # Huffman tables as 0x00-0x03 (DC) and 0x10-0x13 (AC); a sequential scan may use the
    # standard ones for 0 and 1 without defining them (libjpeg-turbo's Motion-JPEG support)
    huffman_tables: set[int] = dataclasses.field(default_factory=set)
    progressive: bool = False
    arithmetic: bool = False
    scans: int = 0

    def read(self, marker: int, body: bytes) -> str | None:
        """Takes in one header segment; why libjpeg would refuse it, or None."""
        if marker in _FRAMES:
            return self._frame(marker, body)
        if marker == _SOS:
            return self._scan(body)
        if marker == _DQT:
            problem, tables = _quant_tables(body)
            self.quant_tables |= tables
            return problem
        if marker == _DHT:
            problem, tables = _huffman_tables(body)
            self.huffman_tables |= tables
            return problem
        if marker == _DAC:
            return _arithmetic_conditioning(body)
        return "bad length" if marker == _DRI and len(body) != 2 else None

    def _frame(self, marker: int, body: bytes) -> str | None:
        if self.components:
            return "a second frame header"
        if len(body) < 6 or len(body) != 6 + 3 * body[5]:
            return "bad length"
        precision, count = body[0], body[5]
        self.height, self.width = (int.from_bytes(body[i:i + 2], "big") for i in (1, 3))
        if precision != 8 or not self.height or not self.width or not 1 <= count <= 4:
            return (f"{precision}-bit, {self.width}x{self.height}, {count} components is not "
                    "decodable")
        for i in range(6, len(body), 3):
            component, sampling, table = body[i:i + 3]
            if component in self.components or not (1 <= sampling >> 4 <= 4 and
                                                     1 <= sampling & 15 <= 4) or table > 3:
                return "bad component"
            self.components[component] = (table, sampling >> 4, sampling & 15)
        for axis in (1, 2):  # each component's sampling must divide the largest one
            largest = max(c[axis] for c in self.components.values())
            if any(largest % c[axis] for c in self.components.values()):
                return "fractional sampling factors"
        self.progressive, self.arithmetic = marker in _PROGRESSIVE, marker in _ARITHMETIC
        return None

    def _scan(self, body: bytes) -> str | None:
        if not self.components:
            return "image data before the frame header"
        count = body[0] if body else 0
        if not 1 <= count <= 4 or len(body) != 4 + 2 * count:
            return "bad scan header"
        selected = body[1:1 + 2 * count:2]
        if len(set(selected)) != count or any(c not in self.components for c in selected):
            return "the scan names a component the frame does not have"
        if any(self.components[c][0] not in self.quant_tables for c in selected):
            return "a quantization table is not defined"
        if count > 1 and sum(self.components[c][1] * self.components[c][2]
                             for c in selected) > MAX_BLOCKS_IN_MCU:
            return f"more than {MAX_BLOCKS_IN_MCU} blocks in an MCU"
        tables = body[2:2 + 2 * count:2]
        if any(t & 0xCC for t in tables):
            return "bad table selector"
        start, end, approximation = body[-3:]
        high, low = approximation >> 4, approximation & 15
        band = (end != 0) if start == 0 else (start > end or end > 63 or count != 1)
        if self.progressive and (band or (high and low != high - 1) or low > 13):
            return f"invalid progressive parameters Ss={start} Se={end} Ah={high} Al={low}"
        if not self.arithmetic:
            dc = start == 0 and not (self.progressive and high)
            ac = not self.progressive or start > 0
            used = {t >> 4 for t in tables if dc} | {0x10 | t & 15 for t in tables if ac}
            defaults = set() if self.progressive else {0x00, 0x01, 0x10, 0x11}
            if missing := used - self.huffman_tables - defaults:
                return f"Huffman table 0x{min(missing):02X} is not defined"
        self.scans += 1
        return None


# Photos from one camera or encoder repeat their tables: each distinct segment is checked once.
@functools.lru_cache(maxsize=256)
def _quant_tables(body: bytes) -> tuple[str | None, frozenset[int]]:
    i, tables = 0, set()
    while i < len(body):
        precision, table = body[i] >> 4, body[i] & 15
        i += 1 + (128 if precision else 64)
        if table > 3 or i > len(body):
            return "bad quantization table", frozenset()
        tables.add(table)
    return None, frozenset(tables)


@functools.lru_cache(maxsize=256)
def _huffman_tables(body: bytes) -> tuple[str | None, frozenset[int]]:
    i, tables = 0, set()
    while i < len(body):
        kind, counts = body[i], body[i + 1:i + 17]
        symbols = body[i + 17:i + 17 + sum(counts)]
        i += 17 + sum(counts)
        if kind & 0xEC or len(counts) < 16 or sum(counts) > 256 or i > len(body) or \
                (kind < 0x10 and max(symbols, default=0) > 15):  # DC symbols count bits
            return "bad Huffman table", frozenset()
        code, longest = 0, max((b for b, n in enumerate(counts, 1) if n), default=0)
        for bits, count in enumerate(counts[:longest], 1):  # canonical codes, none all ones
            code += count
            if code >= 1 << bits:
                return "bad Huffman table", frozenset()
            code <<= 1
        tables.add(kind)
    return None, frozenset(tables)


def _arithmetic_conditioning(body: bytes) -> str | None:
    if len(body) % 2:
        return "bad length"
    for table, value in zip(body[::2], body[1::2], strict=True):
        if table >= 32 or not (1 <= value <= 63 if table >= 16 else value & 15 <= value >> 4):
            return "bad arithmetic conditioning"
    return None


def walk(data: bytes) -> tuple[str | None, JpegHeaders]:
    """Reads `data` as libjpeg would, to its end-of-image marker: why it would stop (None
    when it would not), and the headers read."""
    headers = JpegHeaders()
    if not data.startswith(b"\xff\xd8\xff"):  # TensorFlow's decoders sniff these 3 bytes
        return "no JPEG start-of-image marker", headers
    position = 2
    while match := _NEXT_MARKER.search(data, position):
        marker, position = match.group()[1], match.end()
        if marker == _EOI:
            return (None if headers.scans else "end-of-image marker before any image data",
                    headers)
        if marker in _STANDALONE:
            continue
        if marker not in _KNOWN:
            kind = "an unsupported frame type" if marker & 0xF0 == 0xC0 else "unknown"
            return f"marker 0x{marker:02X} is {kind}", headers
        length = int.from_bytes(data[position:position + 2], "big")
        if length < 2 or position + length > len(data):
            return (f"truncated: marker 0x{marker:02X}'s segment runs past the end of the file",
                    headers)
        if problem := headers.read(marker, data[position + 2:position + length]):
            return f"marker 0x{marker:02X}: {problem}", headers
        position += length
        if marker == _SOS:
            if (end := _END_OF_SCAN.search(data, position)) is None:
                break
            position = end.start()
    return "truncated: the file ends before the JPEG end-of-image marker", headers

