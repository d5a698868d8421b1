"""Runs in: toppar hosts (decoding fetched batches) and broker actors (header scan for the next offset).

Owns reading RecordBatch v2: the batch header object shared with the scanner and legacy reader, CRC32C
verification, decompression and the hand-tuned record decoder producing plain tuples
``(offset, timestamp, key, value, headers)`` with headers a tuple of ``(str, bytes | None)``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from .batch_v2 import (
    BATCH_HEADER,
    BATCH_HEADER_SIZE,
    CODEC_MASK,
    CONTROL_MASK,
    CRC_COVERS_FROM,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
)
from .compression import NONE, decompress
from .crc import crc32c
from .errors import CompressionError, CorruptRecordError

#: Index of each field in a decoded record tuple.
OFFSET, TIMESTAMP, KEY, VALUE, HEADERS = range(5)

Record = tuple[int, int, "bytes | None", "bytes | None", "tuple[tuple[str, bytes | None], ...]"]

_EMPTY_HEADERS: tuple = ()
_CONTROL_KEY = struct.Struct(">hh")


class BatchHeader:
    """Header fields of one batch (any magic) and, once decoded, its records.

    For legacy (magic 0/1) entries ``base_offset`` equals ``last_offset`` (a compressed wrapper carries the
    offset of its last inner message) and ``record_count`` is -1 when unknown without decompressing.
    """

    __slots__ = (
        "base_offset",
        "last_offset",
        "record_count",
        "attributes",
        "magic",
        "crc",
        "partition_leader_epoch",
        "base_timestamp",
        "max_timestamp",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "position",
        "size",
        "records",
    )

    def __init__(
        self,
        base_offset: int,
        last_offset: int,
        record_count: int,
        attributes: int,
        magic: int,
        crc: int,
        position: int,
        size: int,
        partition_leader_epoch: int = -1,
        base_timestamp: int = -1,
        max_timestamp: int = -1,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
    ) -> None:
        self.base_offset = base_offset
        self.last_offset = last_offset
        self.record_count = record_count
        self.attributes = attributes
        self.magic = magic
        self.crc = crc
        self.position = position
        self.size = size
        self.partition_leader_epoch = partition_leader_epoch
        self.base_timestamp = base_timestamp
        self.max_timestamp = max_timestamp
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.records: list[Record] | None = None

    @property
    def codec(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def timestamp_type(self) -> int:
        """0 = CreateTime, 1 = LogAppendTime (-1: magic 0 has no timestamps)."""
        if self.magic == 0:
            return -1
        return 1 if self.attributes & TIMESTAMP_TYPE_MASK else 0

    @property
    def is_transactional(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & CONTROL_MASK)

    @property
    def next_offset(self) -> int:
        """The offset to fetch after this batch."""
        return self.last_offset + 1

    def control_type(self) -> int | None:
        """For a decoded control batch: 0 = abort, 1 = commit (None if not a control batch)."""
        if not self.is_control or not self.records:
            return None
        key = self.records[0][KEY]
        if key is None or len(key) < 4:
            raise CorruptRecordError("control record key shorter than 4 bytes", offset=self.base_offset)
        return _CONTROL_KEY.unpack_from(key)[1]

    def __repr__(self) -> str:
        return (
            f"BatchHeader(magic={self.magic}, offsets={self.base_offset}..{self.last_offset}, "
            f"count={self.record_count}, attributes={self.attributes:#x}, producer_id={self.producer_id}, "
            f"size={self.size})"
        )


def parse_v2_header(data: bytes, pos: int, size: int) -> BatchHeader:
    """Header of the v2 batch of ``size`` bytes at ``pos`` (caller checked the size)."""
    if size < BATCH_HEADER_SIZE:
        raise CorruptRecordError(
            f"v2 batch of {size} bytes is shorter than its {BATCH_HEADER_SIZE}-byte header"
        )
    (
        base_offset,
        _length,
        leader_epoch,
        _magic,
        crc,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    ) = BATCH_HEADER.unpack_from(data, pos)
    return BatchHeader(
        base_offset,
        base_offset + last_offset_delta,
        count,
        attributes,
        2,
        crc,
        pos,
        size,
        leader_epoch,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
    )


def _uvarint_slow(data: bytes, pos: int) -> tuple[int, int]:
    """Raw (not zig-zag decoded) varint at ``pos``; for the multi-byte slow path.

    The value must fit in 64 bits (a 10th byte of 0 or 1), as Kafka's varlongs do: every decoded delta is
    then an int64, so the C twins in kqactors/native/_native_records.c can use the same rule without big integers.
    """
    result = 0
    shift = 0
    for _ in range(9):
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
    byte = data[pos]
    if byte > 1:
        raise CorruptRecordError("varint longer than 10 bytes" if byte & 0x80 else "varint does not fit in 64 bits")
    return result | (byte << 63), pos + 1


def decode_record_headers(data: bytes, pos: int) -> tuple[tuple[tuple[str, bytes | None], ...], int]:
    """The headers of a v2 record starting at ``pos`` (varint count, then name/value pairs) and the end."""
    raw, pos = _uvarint_slow(data, pos)
    count = (raw >> 1) ^ -(raw & 1)
    if count < 0:
        raise CorruptRecordError(f"negative header count {count}")
    headers = []
    for _ in range(count):
        raw, pos = _uvarint_slow(data, pos)
        name_len = (raw >> 1) ^ -(raw & 1)
        if name_len < 0:
            raise CorruptRecordError("null or negative header key length")
        name = data[pos : pos + name_len].decode()
        pos += name_len
        raw, pos = _uvarint_slow(data, pos)
        value_len = (raw >> 1) ^ -(raw & 1)
        if value_len < 0:
            if value_len != -1:
                raise CorruptRecordError(f"invalid header value length {value_len}")
            value = None
        else:
            value = data[pos : pos + value_len]
            pos += value_len
        headers.append((name, value))
    return tuple(headers), pos


def decode_records(
    data: bytes, pos: int, end: int, count: int, base_offset: int, base_timestamp: int, fixed_timestamp: int
) -> list[Record]:
    """Decode ``count`` v2 records in ``data[pos:end]``. ``fixed_timestamp`` >= 0 overrides (LogAppendTime).

    The varint reads are inlined (one- and two-byte fast paths) because this loop is the consumer's hot path.
    """
    out: list[Record] = []
    append = out.append
    uvarint = _uvarint_slow
    empty = _EMPTY_HEADERS
    for _ in range(count):
        if pos >= end:
            raise CorruptRecordError(f"batch declares {count} records but holds only {len(out)}")
        # record length
        b = data[pos]
        if b < 0x80:
            raw = b
            pos += 1
        else:
            b2 = data[pos + 1]
            if b2 < 0x80:
                raw = (b & 0x7F) | (b2 << 7)
                pos += 2
            else:
                raw, pos = uvarint(data, pos)
        record_end = pos + ((raw >> 1) ^ -(raw & 1))
        if record_end > end or record_end <= pos:
            raise CorruptRecordError("record length out of bounds")
        pos += 1  # record attributes: unused
        # timestamp delta (varlong)
        b = data[pos]
        if b < 0x80:
            raw = b
            pos += 1
        else:
            raw, pos = uvarint(data, pos)
        timestamp = base_timestamp + ((raw >> 1) ^ -(raw & 1)) if fixed_timestamp < 0 else fixed_timestamp
        # offset delta
        b = data[pos]
        if b < 0x80:
            raw = b
            pos += 1
        else:
            b2 = data[pos + 1]
            if b2 < 0x80:
                raw = (b & 0x7F) | (b2 << 7)
                pos += 2
            else:
                raw, pos = uvarint(data, pos)
        offset = base_offset + ((raw >> 1) ^ -(raw & 1))
        # key
        b = data[pos]
        if b == 1:
            key = None
            pos += 1
        else:
            if b < 0x80:
                raw = b
                pos += 1
            else:
                raw, pos = uvarint(data, pos)
            if raw & 1:
                raise CorruptRecordError("invalid negative key length")
            key = data[pos : pos + (raw >> 1)]
            pos += raw >> 1
        # value
        b = data[pos]
        if b == 1:
            value = None
            pos += 1
        else:
            if b < 0x80:
                raw = b
                pos += 1
            else:
                b2 = data[pos + 1]
                if b2 < 0x80:
                    raw = (b & 0x7F) | (b2 << 7)
                    pos += 2
                else:
                    raw, pos = uvarint(data, pos)
            if raw & 1:
                raise CorruptRecordError("invalid negative value length")
            value = data[pos : pos + (raw >> 1)]
            pos += raw >> 1
        # headers
        if data[pos] == 0:
            headers = empty
            pos += 1
        else:
            headers, pos = decode_record_headers(data, pos)
        if pos != record_end:
            raise CorruptRecordError("record length does not match its fields")
        append((offset, timestamp, key, value, headers))
    if pos != end:
        raise CorruptRecordError(f"{end - pos} unexpected bytes after the last record")
    return out


def pack_v2_records(
    index: bytearray,
    pack: Callable[..., bytes],
    data: bytes,
    pos: int,
    end: int,
    count: int,
    delta: int,
    base_offset: int,
    base_timestamp: int,
    fixed_timestamp: int,
    timestamp_type: int,
    leader_epoch: int,
    min_offset: int,
) -> tuple[int, int]:
    """Walk ``count`` v2 records in ``data[pos:end]`` and append one index entry per record with offset >=
    ``min_offset`` to ``index``: ``pack(offset, timestamp, key_pos, key_len, value_pos, value_len,
    headers_pos, timestamp_type, leader_epoch)`` with positions in ``data`` shifted by ``delta``.

    The consumer's hot path: the same checks as ``decode_records`` but no per-record tuple or key/value copy
    (the caller copies the whole section once). Returns (entries added, offset of the last one added).

    Malformed records raise CorruptRecordError only (a read past the buffer, a header name that is not utf-8
    or an offset, timestamp or position that does not fit its index field included), after appending the
    entries of the records before the bad one. This is the reference of the C twin
    ``kqactors.native._native_records.pack_v2_records`` (the same entries and errors, see tests/unit/records).
    """
    if not 0 <= pos <= end <= len(data):
        raise ValueError(f"records range {pos}..{end} is not inside a buffer of {len(data)} bytes")
    uvarint = _uvarint_slow
    added = 0
    last = -1
    try:
        for done in range(count):
            if pos >= end:
                raise CorruptRecordError(f"batch declares {count} records but holds only {done}")
            b = data[pos]
            if b < 0x80:
                raw = b
                pos += 1
            else:
                b2 = data[pos + 1]
                if b2 < 0x80:
                    raw = (b & 0x7F) | (b2 << 7)
                    pos += 2
                else:
                    raw, pos = uvarint(data, pos)
            record_end = pos + ((raw >> 1) ^ -(raw & 1))
            if record_end > end or record_end <= pos:
                raise CorruptRecordError("record length out of bounds")
            pos += 1  # record attributes: unused
            b = data[pos]
            if b < 0x80:
                raw = b
                pos += 1
            else:
                b2 = data[pos + 1]
                if b2 < 0x80:
                    raw = (b & 0x7F) | (b2 << 7)
                    pos += 2
                else:
                    raw, pos = uvarint(data, pos)
            timestamp = base_timestamp + ((raw >> 1) ^ -(raw & 1)) if fixed_timestamp < 0 else fixed_timestamp
            b = data[pos]
            if b < 0x80:
                raw = b
                pos += 1
            else:
                b2 = data[pos + 1]
                if b2 < 0x80:
                    raw = (b & 0x7F) | (b2 << 7)
                    pos += 2
                else:
                    raw, pos = uvarint(data, pos)
            offset = base_offset + ((raw >> 1) ^ -(raw & 1))
            b = data[pos]
            if b == 1:
                key_pos = key_len = -1
                pos += 1
            else:
                if b < 0x80:
                    raw = b
                    pos += 1
                else:
                    raw, pos = uvarint(data, pos)
                if raw & 1:
                    raise CorruptRecordError("invalid negative key length")
                key_len = raw >> 1
                key_pos = pos + delta
                pos += key_len
            b = data[pos]
            if b == 1:
                value_pos = value_len = -1
                pos += 1
            else:
                if b < 0x80:
                    raw = b
                    pos += 1
                else:
                    b2 = data[pos + 1]
                    if b2 < 0x80:
                        raw = (b & 0x7F) | (b2 << 7)
                        pos += 2
                    else:
                        raw, pos = uvarint(data, pos)
                if raw & 1:
                    raise CorruptRecordError("invalid negative value length")
                value_len = raw >> 1
                value_pos = pos + delta
                pos += value_len
            if data[pos] == 0:
                headers_pos = -1
                pos += 1
            else:
                headers_pos = pos + delta
                pos = decode_record_headers(data, pos)[1]
            if pos != record_end:
                raise CorruptRecordError("record length does not match its fields")
            if offset >= min_offset:
                index += pack(offset, timestamp, key_pos, key_len, value_pos, value_len, headers_pos,
                              timestamp_type, leader_epoch)
                added += 1
                last = offset
        if pos != end:
            raise CorruptRecordError(f"{end - pos} unexpected bytes after the last record")
        return added, last
    except (IndexError, UnicodeDecodeError, struct.error) as exc:
        raise CorruptRecordError(f"truncated or malformed record: {exc}") from exc


def v2_records_section(data: bytes, header: BatchHeader, *, verify_crc: bool = True) -> tuple[bytes, int, int]:
    """Verify and decompress a v2 batch: ``(buffer, start, end)`` of its records section."""
    start = header.position
    end = start + header.size
    try:
        if verify_crc:
            actual = crc32c(memoryview(data)[start + CRC_COVERS_FROM : end])
            if actual != header.crc:
                raise CorruptRecordError(
                    f"CRC32C mismatch: stored {header.crc:#010x}, computed {actual:#010x}",
                    offset=header.base_offset,
                )
        if header.attributes & CODEC_MASK == NONE:
            return data, start + BATCH_HEADER_SIZE, end
        payload = decompress(header.attributes & CODEC_MASK, memoryview(data)[start + BATCH_HEADER_SIZE : end])
    except CompressionError as exc:
        if exc.offset is None:
            raise CompressionError(str(exc), offset=header.base_offset) from exc
        raise
    payload = payload if isinstance(payload, bytes) else bytes(payload)
    return payload, 0, len(payload)


def decode_v2_batch(data: bytes, header: BatchHeader, *, verify_crc: bool = True) -> BatchHeader:
    """Verify, decompress and decode the batch described by ``header``; fills ``header.records``."""
    start = header.position
    end = start + header.size
    try:
        if verify_crc:
            actual = crc32c(memoryview(data)[start + CRC_COVERS_FROM : end])
            if actual != header.crc:
                raise CorruptRecordError(
                    f"CRC32C mismatch: stored {header.crc:#010x}, computed {actual:#010x}",
                    offset=header.base_offset,
                )
        fixed_ts = header.max_timestamp if header.attributes & TIMESTAMP_TYPE_MASK else -1
        codec = header.attributes & CODEC_MASK
        if codec == NONE:
            header.records = decode_records(
                data, start + BATCH_HEADER_SIZE, end, header.record_count,
                header.base_offset, header.base_timestamp, fixed_ts,
            )  # fmt: skip
        else:
            payload = decompress(codec, memoryview(data)[start + BATCH_HEADER_SIZE : end])
            header.records = decode_records(
                payload,
                0,
                len(payload),
                header.record_count,
                header.base_offset,
                header.base_timestamp,
                fixed_ts,
            )
    except CompressionError as exc:
        if exc.offset is None:
            raise CompressionError(str(exc), offset=header.base_offset) from exc
        raise
    except CorruptRecordError as exc:
        if exc.offset is None:
            raise CorruptRecordError(str(exc), offset=header.base_offset) from exc
        raise
    except (IndexError, UnicodeDecodeError) as exc:
        raise CorruptRecordError(f"truncated or malformed record: {exc}", offset=header.base_offset) from exc
    return header
