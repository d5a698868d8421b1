"""Runs in: unit tests. Hand-built legacy MessageSet v0/v1 entries, written from the format description.

offset i64 | size i32 | crc u32 (CRC-32 of magic..end) | magic i8 | attributes i8 | [timestamp i64 (v1)]
| key i32-length bytes (-1 = null) | value i32-length bytes (-1 = null)
"""

from __future__ import annotations

import struct
import zlib


def _length_prefixed(data: bytes | None) -> bytes:
    if data is None:
        return struct.pack(">i", -1)
    return struct.pack(">i", len(data)) + data


def legacy_message(
    offset: int,
    magic: int,
    key: bytes | None,
    value: bytes | None,
    *,
    timestamp: int = -1,
    attributes: int = 0,
) -> bytes:
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    body += _length_prefixed(key) + _length_prefixed(value)
    crc = zlib.crc32(body)
    return struct.pack(">qiI", offset, len(body) + 4, crc) + body
