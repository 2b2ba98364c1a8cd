"""Every distinct record of a MaxMind database, fast enough for a test.

Iterating a database with ``maxminddb`` builds every network and every record in full
(3.4 million networks for GeoLite2 City, minutes of CPU). A MaxMind writer stores each
distinct record once in the data section and the search tree's leaves point at them, so the
distinct records are the distinct leaf pointers of the tree: NumPy finds them in a second.
Each is then decoded here, reading only the fields location and residency use and skipping
the rest (names in eight languages, cities, subdivisions); the country and continent maps
the records point at are decoded once each.

The format: https://maxmind.github.io/MaxMind-DB/ (data section, control bytes, pointers).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import maxminddb
import numpy as np

FIELDS = ("country", "registered_country", "represented_country", "continent", "location",
          "traits")
_SEPARATOR = 16  # zero bytes between the search tree and the data section

_POINTER, _STRING, _DOUBLE, _BYTES, _UINT16, _UINT32, _MAP = 1, 2, 3, 4, 5, 6, 7
_INT32, _UINT64, _UINT128, _ARRAY, _CONTAINER, _END, _BOOLEAN, _FLOAT = range(8, 16)


def leaf_pointers(buffer: bytes, node_count: int, record_size: int) -> np.ndarray:
    """The distinct record values of the tree that point into the data section."""
    size = node_count * record_size * 2 // 8
    raw = np.frombuffer(buffer, dtype=np.uint8, count=size).astype(np.uint32)
    if record_size == 24:
        b = raw.reshape(-1, 3)
        values = (b[:, 0] << 16) | (b[:, 1] << 8) | b[:, 2]
    elif record_size == 28:
        b = raw.reshape(-1, 7)
        left = ((b[:, 3] >> 4) << 24) | (b[:, 0] << 16) | (b[:, 1] << 8) | b[:, 2]
        right = ((b[:, 3] & 0x0F) << 24) | (b[:, 4] << 16) | (b[:, 5] << 8) | b[:, 6]
        values = np.concatenate([left, right])
    elif record_size == 32:
        b = raw.reshape(-1, 4)
        values = (b[:, 0] << 24) | (b[:, 1] << 16) | (b[:, 2] << 8) | b[:, 3]
    else:
        raise ValueError(f"unsupported record size {record_size}")
    leaves = np.sort(values[values > node_count])  # np.unique hashes: 100x slower here
    return leaves[np.concatenate(([True], leaves[1:] != leaves[:-1]))]


class _Reader:
    """Decodes values of one data section, skipping what is not asked for."""

    def __init__(self, buffer: bytes, base: int):
        self.buffer = buffer
        self.base = base  # where the data section starts
        self.memo: dict[int, Any] = {}

    def _control(self, offset: int) -> tuple[int, int, int]:
        """(type, size or pointer payload, offset after the control bytes)."""
        buf = self.buffer
        ctrl = buf[offset]
        offset += 1
        kind = ctrl >> 5
        if kind == _POINTER:
            length = (ctrl >> 3) & 0x3
            low = ctrl & 0x7
            if length == 0:
                return kind, (low << 8) | buf[offset], offset + 1
            if length == 1:
                return kind, ((low << 16) | (buf[offset] << 8) | buf[offset + 1]) + 2048, \
                    offset + 2
            if length == 2:
                value = (low << 24) | int.from_bytes(buf[offset:offset + 3], "big")
                return kind, value + 526336, offset + 3
            return kind, int.from_bytes(buf[offset:offset + 4], "big"), offset + 4
        if kind == 0:
            kind = 7 + buf[offset]
            offset += 1
        size = ctrl & 0x1F
        if size == 29:
            size, offset = 29 + buf[offset], offset + 1
        elif size == 30:
            size, offset = 285 + int.from_bytes(buf[offset:offset + 2], "big"), offset + 2
        elif size == 31:
            size, offset = 65821 + int.from_bytes(buf[offset:offset + 3], "big"), offset + 3
        return kind, size, offset

    def skip(self, offset: int) -> int:
        """The offset after the value at ``offset`` (a loop over pending items, not a
        recursion: this runs for every field the walk does not read)."""
        buf = self.buffer
        pending = 1
        while pending:
            pending -= 1
            ctrl = buf[offset]
            kind = ctrl >> 5
            if kind == _POINTER:
                offset += 2 + ((ctrl >> 3) & 0x3)
                continue
            offset += 1
            if kind == 0:
                kind = 7 + buf[offset]
                offset += 1
            size = ctrl & 0x1F
            if size == 29:
                size, offset = 29 + buf[offset], offset + 1
            elif size == 30:
                size, offset = 285 + int.from_bytes(buf[offset:offset + 2], "big"), offset + 2
            elif size == 31:
                size, offset = 65821 + int.from_bytes(buf[offset:offset + 3], "big"), offset + 3
            if kind == _MAP:
                pending += 2 * size
            elif kind == _ARRAY:
                pending += size
            elif kind != _BOOLEAN:
                offset += size
        return offset

    def record(self, offset: int, fields: frozenset[str]) -> dict[str, Any] | None:
        """The map at ``offset`` with only ``fields`` (None if it is not a map): ``value``
        with the common cases inlined, since it runs once per record."""
        kind, size, after = self._control(offset)
        if kind != _MAP:
            return None
        buf, base, memo = self.buffer, self.base, self.memo
        out = {}
        for _ in range(size):
            ctrl = buf[after]
            if ctrl >> 5 == _POINTER:  # keys are mostly pointers to shared strings
                _, target, after = self._control(after)
                key = memo.get(base + target)
                if key is None:
                    key = memo[base + target] = self.value(base + target)[0]
            else:
                key, after = self.value(after)
            if key in fields:
                out[key], after = self.value(after)
            elif buf[after] >> 5 == _POINTER:
                after += 2 + ((buf[after] >> 3) & 0x3)
            else:
                after = self.skip(after)
        return out

    def value(self, offset: int, fields: tuple[str, ...] | None = None) -> tuple[Any, int]:
        """(the value at ``offset``, the offset after it); for a map, only ``fields``
        (None: every key), nested maps in full."""
        kind, size, after = self._control(offset)
        if kind == _POINTER:
            target = self.base + size
            cached = self.memo.get(target)
            if cached is None:
                cached = self.memo[target] = self.value(target, fields)[0]
            return cached, after
        buf = self.buffer
        if kind == _STRING:
            return buf[after:after + size].decode(), after + size
        if kind == _MAP:
            out = {}
            for _ in range(size):
                key, after = self.value(after)
                if fields is None or key in fields:
                    out[key], after = self.value(after)
                else:
                    after = self.skip(after)
            return out, after
        if kind == _ARRAY:
            items = []
            for _ in range(size):
                item, after = self.value(after)
                items.append(item)
            return items, after
        if kind == _DOUBLE:
            return struct.unpack(">d", buf[after:after + 8])[0], after + 8
        if kind == _FLOAT:
            return struct.unpack(">f", buf[after:after + 4])[0], after + 4
        if kind == _BOOLEAN:
            return bool(size), after
        if kind == _INT32:
            return int.from_bytes(buf[after:after + size].rjust(4, b"\0"), "big",
                                  signed=True), after + size
        if kind in (_UINT16, _UINT32, _UINT64, _UINT128):
            return int.from_bytes(buf[after:after + size], "big"), after + size
        if kind == _BYTES:
            return bytes(buf[after:after + size]), after + size
        raise ValueError(f"unexpected type {kind} at {offset}")


def distinct_records(path: str, fields: tuple[str, ...] = FIELDS) -> Iterator[dict[str, Any]]:
    """Every distinct record of the database at ``path``, with only ``fields`` (by default
    the location fields and traits; nested maps of those, such as a country's names, whole).
    Records that differ only in other fields come out alike, each time."""
    with open(path, "rb") as handle:
        buffer = handle.read()
    reader = maxminddb.open_database(path)
    try:
        meta = reader.metadata()
    finally:
        reader.close()
    tree = meta.node_count * meta.record_size * 2 // 8
    data = _Reader(buffer, tree + _SEPARATOR)
    wanted = frozenset(fields)
    for pointer in leaf_pointers(buffer, meta.node_count, meta.record_size).tolist():
        offset = pointer - meta.node_count + tree  # as maxminddb's reader resolves it
        record = data.record(offset, wanted)
        if record is not None:
            yield record
