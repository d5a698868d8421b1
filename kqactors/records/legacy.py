"""Runs in: toppar hosts, when a fetch returns pre-0.11 data (MessageSet magic 0 or 1).

Owns decoding legacy messages: offset i64, size i32, crc u32 (CRC-32 of magic..end), magic i8,
attributes i8 (codec bits 0-2, LogAppendTime bit 3 for magic 1), timestamp i64 (magic 1 only),
key and value as i32-length bytes (-1 = null). A compressed message is a wrapper whose value holds an
inner message set: absolute inner offsets for magic 0, offsets relative to the wrapper for magic 1.
Produce always writes v2, so there is no legacy encoder here.
"""

from __future__ import annotations

import struct
import zlib

from .compression import LZ4, NONE, decompress, lz4_decompress_legacy
from .errors import CompressionError, CorruptRecordError
from .reader_v2 import BatchHeader, Record

LEGACY_PREFIX = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_TIMESTAMP = struct.Struct(">q")
_LENGTH = struct.Struct(">i")
_LOG_APPEND_TIME = 0x08
_EMPTY_HEADERS: tuple = ()


def parse_legacy_header(data: bytes, pos: int, size: int) -> BatchHeader:
    """Scan-level header of the legacy message of ``size`` bytes at ``pos``."""
    offset, _size, crc, magic, attributes = LEGACY_PREFIX.unpack_from(data, pos)
    minimum = 26 if magic == 0 else 34  # prefix + (timestamp) + two null lengths
    if size < minimum:
        raise CorruptRecordError(
            f"magic {magic} message of {size} bytes is shorter than {minimum}", offset=offset
        )
    count = 1 if attributes & 0x07 == NONE else -1
    return BatchHeader(offset, offset, count, attributes, magic, crc, pos, size)


def _read_bytes(data: bytes, pos: int, end: int, what: str) -> tuple[bytes | None, int]:
    if pos + 4 > end:
        raise CorruptRecordError(f"truncated {what} length")
    (length,) = _LENGTH.unpack_from(data, pos)
    pos += 4
    if length == -1:
        return None, pos
    if length < 0 or pos + length > end:
        raise CorruptRecordError(f"{what} length {length} out of bounds")
    return data[pos : pos + length], pos + length


def _read_message(
    data: bytes, pos: int, end: int, verify_crc: bool = True
) -> tuple[int, int, int, int, bytes | None, bytes | None]:
    """One message in data[pos:end]: (offset, magic, attributes, timestamp, key, value)."""
    offset, size, crc, magic, attributes = LEGACY_PREFIX.unpack_from(data, pos)
    message_end = pos + 12 + size
    if message_end > end:
        raise CorruptRecordError("message overruns its message set", offset=offset)
    if verify_crc and (actual := zlib.crc32(memoryview(data)[pos + 16 : message_end])) != crc:
        raise CorruptRecordError(
            f"CRC-32 mismatch: stored {crc:#010x}, computed {actual:#010x}", offset=offset
        )
    pos += 18
    if magic == 0:
        timestamp = -1
    elif magic == 1:
        if pos + 8 > message_end:
            raise CorruptRecordError("truncated timestamp", offset=offset)
        (timestamp,) = _TIMESTAMP.unpack_from(data, pos)
        pos += 8
    else:
        raise CorruptRecordError(f"unexpected magic {magic} in a legacy message set", offset=offset)
    key, pos = _read_bytes(data, pos, message_end, "key")
    value, pos = _read_bytes(data, pos, message_end, "value")
    if pos != message_end:
        raise CorruptRecordError("message size does not match its fields", offset=offset)
    return offset, magic, attributes, timestamp, key, value


def _decode_inner(
    payload: bytes, wrapper_offset: int, wrapper_magic: int, wrapper_ts: int | None, verify_crc: bool
) -> list[Record]:
    inner = []
    pos = 0
    end = len(payload)
    while pos < end:
        if pos + 12 > end:
            raise CorruptRecordError("truncated inner message header", offset=wrapper_offset)
        (size,) = _LENGTH.unpack_from(payload, pos + 8)
        if size < 14:
            raise CorruptRecordError(f"inner message size {size} too small", offset=wrapper_offset)
        message = _read_message(payload, pos, end, verify_crc)
        if message[2] & 0x07 != NONE:
            raise CorruptRecordError("nested compressed message", offset=wrapper_offset)
        inner.append(message)
        pos += 12 + size
    if not inner:
        raise CorruptRecordError("compressed message holds no messages", offset=wrapper_offset)
    records: list[Record] = []
    if wrapper_magic == 0:
        for offset, _m, _a, timestamp, key, value in inner:
            records.append((offset, timestamp, key, value, _EMPTY_HEADERS))
    else:
        shift = wrapper_offset - inner[-1][0]  # the wrapper carries the last inner message's absolute offset
        for relative, _m, _a, timestamp, key, value in inner:
            ts = wrapper_ts if wrapper_ts is not None else timestamp
            records.append((shift + relative, ts, key, value, _EMPTY_HEADERS))
    return records


def decode_legacy_message(data: bytes, header: BatchHeader, *, verify_crc: bool = True) -> BatchHeader:
    """Decode the legacy entry described by ``header`` (a plain message or compressed wrapper)."""
    start = header.position
    end = start + header.size
    try:
        offset, magic, attributes, timestamp, key, value = _read_message(data, start, end, verify_crc)
        codec = attributes & 0x07
        if codec == NONE:
            header.records = [(offset, timestamp, key, value, _EMPTY_HEADERS)]
            return header
        if value is None:
            raise CorruptRecordError("compressed message has a null value", offset=offset)
        if codec == LZ4 and magic == 0:
            payload = lz4_decompress_legacy(value)
        elif codec > LZ4:
            raise CompressionError(f"compression codec {codec} is not valid for magic {magic} messages")
        else:
            payload = decompress(codec, value)
        wrapper_ts = timestamp if magic == 1 and attributes & _LOG_APPEND_TIME else None
        records = _decode_inner(payload, offset, magic, wrapper_ts, verify_crc)
    except CorruptRecordError as exc:
        if exc.offset is None:
            raise type(exc)(str(exc), offset=header.base_offset) from exc
        raise
    except (struct.error, IndexError) as exc:
        raise CorruptRecordError(f"malformed legacy message: {exc}", offset=header.base_offset) from exc
    header.records = records
    header.base_offset = records[0][0]
    header.record_count = len(records)
    return header
