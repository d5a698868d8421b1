"""Runs in: toppar hosts (batch building on produce) and the idempotence/transaction code that re-stamps.

Owns writing RecordBatch v2 (magic 2): the hand-tuned record encoder, batch header and CRC32C, control
(commit/abort marker) batches, and re-stamping producer id / epoch / base sequence on an already encoded
(and compressed) batch by patching those fields and recomputing only the CRC.

Batch header layout (big-endian; offsets in bytes): baseOffset@0 i64, batchLength@8 i32 (bytes after this
field), partitionLeaderEpoch@12 i32, magic@16 i8, crc@17 u32 (CRC32C of bytes 21..end), attributes@21 i16,
lastOffsetDelta@23 i32, baseTimestamp@27 i64, maxTimestamp@35 i64, producerId@43 i64, producerEpoch@51 i16,
baseSequence@53 i32, recordCount@57 i32, records@61.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Sequence

from kqactors.native import NATIVE_RECORDS as _native_records

from .compression import NONE, compress, effective_level
from .crc import crc32c
from .packed import ENTRY as _PACKED_ENTRY
from .packed import HEADER as _PACKED_HEADER
from .varint import SMALL_LIMIT, encode_varint, small_varint_table

BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
BATCH_HEADER_SIZE = BATCH_HEADER.size  # 61
CRC_OFFSET = 17
CRC_COVERS_FROM = 21  # attributes onwards
PRODUCER_FIELDS = struct.Struct(">qhi")  # producerId, producerEpoch, baseSequence
PRODUCER_FIELDS_OFFSET = 43
_BASE_OFFSET = struct.Struct(">q")
_ATTRIBUTES = struct.Struct(">h")
_CRC = struct.Struct(">I")
_LENGTH_AFTER_LENGTH_FIELD = BATCH_HEADER_SIZE - 12

MAGIC_V2 = 2
CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08  # set: LogAppendTime
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20

CREATE_TIME = 0
LOG_APPEND_TIME = 1

CONTROL_ABORT = 0
CONTROL_COMMIT = 1

#: One message to encode: (timestamp_ms, key, value, headers). headers: sequence of (str, bytes | None).
Message = tuple[int, "bytes | None", "bytes | None", "Sequence[tuple[str, bytes | None]] | None"]

_SMALL = small_varint_table()
_NULL = _SMALL[0]  # varint -1
_ZERO = _SMALL[1]  # varint 0


def now_ms() -> int:
    return int(time.time() * 1000)


def _encode_headers(headers: Sequence[tuple[str, bytes | None]]) -> bytes:
    parts = [encode_varint(len(headers))]
    for name, value in headers:
        name_bytes = name.encode() if isinstance(name, str) else bytes(name)
        parts.append(encode_varint(len(name_bytes)))
        parts.append(name_bytes)
        if value is None:
            parts.append(_NULL)
        else:
            if isinstance(value, str):
                value = value.encode()
            parts.append(encode_varint(len(value)))
            parts.append(value)
    return b"".join(parts)


def _packed_headers(frame: bytes, pos: int, count: int) -> tuple[bytes, int]:
    """Encode ``count`` packed headers starting at ``pos``; returns (record header bytes, next position)."""
    unpack_header = _PACKED_HEADER.unpack_from
    step = _PACKED_HEADER.size
    parts = [encode_varint(count)]
    for _ in range(count):
        name_len, value_len = unpack_header(frame, pos)
        pos += step
        parts.append(encode_varint(name_len))
        parts.append(frame[pos:pos + name_len])
        pos += name_len
        if value_len < 0:
            parts.append(_NULL)
        else:
            parts.append(encode_varint(value_len))
            parts.append(frame[pos:pos + value_len])
            pos += value_len
    return b"".join(parts), pos


class RecordBatchBuilder:
    """Accumulates records for one partition and builds a v2 batch.

    Records are encoded as they are appended into one bytearray; ``build()`` compresses that section once
    and prepends the header. Not reusable after ``build()``.
    """

    __slots__ = (
        "_records",
        "_count",
        "_base_timestamp",
        "_max_timestamp",
        "codec",
        "level",
        "base_offset",
        "timestamp_type",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "transactional",
        "control",
        "partition_leader_epoch",
    )

    def __init__(
        self,
        *,
        codec: int = NONE,
        level: int = -1,
        base_offset: int = 0,
        timestamp_type: int = CREATE_TIME,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        transactional: bool = False,
        control: bool = False,
        partition_leader_epoch: int = -1,
    ) -> None:
        effective_level(codec, level)  # validates codec and level early
        self._records = bytearray()
        self._count = 0
        self._base_timestamp: int | None = None
        self._max_timestamp = -1
        self.codec = codec
        self.level = level
        self.base_offset = base_offset
        self.timestamp_type = timestamp_type
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.transactional = transactional
        self.control = control
        self.partition_leader_epoch = partition_leader_epoch

    def __len__(self) -> int:
        return self._count

    @property
    def uncompressed_size(self) -> int:
        """Header plus encoded records so far (an upper bound for the built batch of codec none)."""
        return BATCH_HEADER_SIZE + len(self._records)

    def append(
        self,
        timestamp: int | None,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
    ) -> int:
        """Append one record; returns its offset delta. ``timestamp`` None means now."""
        self.append_many(((timestamp, key, value, headers),))
        return self._count - 1

    def append_many(self, messages: Iterable[Message]) -> None:
        """Append (timestamp_ms, key, value, headers) tuples; the hot path of the producer.

        A None timestamp means "now" (read once per call).
        """
        records = self._records
        small = _SMALL
        limit = SMALL_LIMIT
        null = _NULL
        zero = _ZERO
        offset_delta = self._count
        base_ts = self._base_timestamp
        max_ts = self._max_timestamp
        now = None
        for timestamp, key, value, headers in messages:
            if timestamp is None:
                if now is None:
                    now = now_ms()
                timestamp = now
            if base_ts is None:
                base_ts = timestamp
            if timestamp > max_ts:
                max_ts = timestamp
            delta = timestamp - base_ts
            ts_bytes = small[delta + 1] if -1 <= delta < limit else encode_varint(delta)
            od_bytes = small[offset_delta + 1] if offset_delta < limit else encode_varint(offset_delta)
            if key is None:
                key_len_bytes = null
                key = b""
            else:
                key_len = len(key)
                key_len_bytes = small[key_len + 1] if key_len < limit else encode_varint(key_len)
            if value is None:
                value_len_bytes = null
                value = b""
            else:
                value_len = len(value)
                value_len_bytes = small[value_len + 1] if value_len < limit else encode_varint(value_len)
            header_bytes = _encode_headers(headers) if headers else zero
            body = b"".join(
                (zero, ts_bytes, od_bytes, key_len_bytes, key, value_len_bytes, value, header_bytes)
            )
            body_len = len(body)
            records += small[body_len + 1] if body_len < limit else encode_varint(body_len)
            records += body
            offset_delta += 1
        self._count = offset_delta
        self._base_timestamp = base_ts
        self._max_timestamp = max_ts

    def append_packed(self, frame: bytes, start: int, end: int) -> int:
        """Append the messages packed in ``frame[start:end]`` (layout: ``kqactors.records.packed``); the
        producer's hot path. Returns how many were appended.

        Runs the C twin ``kqactors.native._native_records.append_packed`` when it is built and not switched off
        (kqactors/native/__init__.py), else ``append_packed_py``; both append the same bytes. Raises ValueError (and
        appends nothing) if the range does not end on an entry or a timestamp delta overflows 64 bits.
        """
        native = _native_records
        if native is None:
            return self.append_packed_py(frame, start, end)
        added, self._base_timestamp, self._max_timestamp = native.append_packed(
            self._records, frame, start, end, self._count, self._base_timestamp, self._max_timestamp
        )
        self._count += added
        return added

    def append_packed_py(self, frame: bytes, start: int, end: int) -> int:
        """``append_packed`` in Python, the reference of the C twin.

        The common record shape (no headers) is encoded without building any per-message tuple; key and
        value are sliced once from the frame.
        """
        if not 0 <= start <= end <= len(frame):
            raise ValueError(f"packed range {start}..{end} is not inside a frame of {len(frame)} bytes")
        records = self._records
        mark = len(records)
        small = _SMALL
        limit = SMALL_LIMIT
        null = _NULL
        zero = _ZERO
        empty = b""
        join = empty.join
        unpack_entry = _PACKED_ENTRY.unpack_from
        entry_size = _PACKED_ENTRY.size
        first_delta = offset_delta = self._count
        base_ts = self._base_timestamp
        max_ts = self._max_timestamp
        pos = start
        try:
            while pos < end:
                timestamp, key_len, value_len, header_count = unpack_entry(frame, pos)
                pos += entry_size
                if base_ts is None:
                    base_ts = timestamp
                if timestamp > max_ts:
                    max_ts = timestamp
                delta = timestamp - base_ts
                ts_bytes = small[delta + 1] if -1 <= delta < limit else encode_varint(delta)
                od_bytes = small[offset_delta + 1] if offset_delta < limit else encode_varint(offset_delta)
                if key_len < 0:
                    key_len_bytes = null
                    key = empty
                else:
                    key_len_bytes = small[key_len + 1] if key_len < limit else encode_varint(key_len)
                    key = frame[pos:pos + key_len]
                    pos += key_len
                if value_len < 0:
                    value_len_bytes = null
                    value = empty
                else:
                    value_len_bytes = small[value_len + 1] if value_len < limit else encode_varint(value_len)
                    value = frame[pos:pos + value_len]
                    pos += value_len
                if header_count:
                    header_bytes, pos = _packed_headers(frame, pos, header_count)
                else:
                    header_bytes = zero
                body = join((zero, ts_bytes, od_bytes, key_len_bytes, key, value_len_bytes, value, header_bytes))
                body_len = len(body)
                records += small[body_len + 1] if body_len < limit else encode_varint(body_len)
                records += body
                offset_delta += 1
            if pos != end:
                raise ValueError(f"packed message range ends {pos - end} bytes past its boundary")
        except struct.error as exc:
            del records[mark:]  # all or nothing, like the C twin: the builder stays consistent
            raise ValueError(f"packed message frame is truncated: {exc}") from None
        except ValueError:
            del records[mark:]
            raise
        self._count = offset_delta
        self._base_timestamp = base_ts
        self._max_timestamp = max_ts
        return offset_delta - first_delta

    def build(self) -> bytearray:
        """Compress the records and return the complete batch (CRC filled in)."""
        if self._count == 0:
            raise ValueError("cannot build an empty record batch")
        payload = self._records if self.codec == NONE else compress(self.codec, self._records, self.level)
        attributes = self.codec
        if self.timestamp_type == LOG_APPEND_TIME:
            attributes |= TIMESTAMP_TYPE_MASK
        if self.transactional:
            attributes |= TRANSACTIONAL_MASK
        if self.control:
            attributes |= CONTROL_MASK
        batch = bytearray(
            BATCH_HEADER.pack(
                self.base_offset,
                _LENGTH_AFTER_LENGTH_FIELD + len(payload),
                self.partition_leader_epoch,
                MAGIC_V2,
                0,
                attributes,
                self._count - 1,
                self._base_timestamp,
                self._max_timestamp,
                self.producer_id,
                self.producer_epoch,
                self.base_sequence,
                self._count,
            )
        )
        batch += payload
        _CRC.pack_into(batch, CRC_OFFSET, crc32c(memoryview(batch)[CRC_COVERS_FROM:]))
        return batch


def build_batch(messages: Iterable[Message], **options: object) -> bytearray:
    """One-shot: encode ``messages`` into a v2 batch. ``options`` are RecordBatchBuilder's keywords."""
    builder = RecordBatchBuilder(**options)  # type: ignore[arg-type]
    builder.append_many(messages)
    return builder.build()


def build_control_batch(
    commit: bool,
    *,
    producer_id: int,
    producer_epoch: int,
    timestamp: int | None = None,
    base_offset: int = 0,
    coordinator_epoch: int = 0,
    partition_leader_epoch: int = -1,
) -> bytearray:
    """A transaction marker batch: one control record, key = (version 0, type), value = (0, coord epoch)."""
    key = struct.pack(">hh", 0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = struct.pack(">hi", 0, coordinator_epoch)
    builder = RecordBatchBuilder(
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=True,
        control=True,
        partition_leader_epoch=partition_leader_epoch,
    )
    builder.append(timestamp, key, value)
    return builder.build()


def _check_v2(batch: bytes | bytearray | memoryview) -> None:
    if len(batch) < BATCH_HEADER_SIZE:
        raise ValueError(f"record batch too short to re-stamp: {len(batch)} bytes")
    if batch[16] != MAGIC_V2:
        raise ValueError(f"only magic 2 batches can be re-stamped, got magic {batch[16]}")


def restamp(
    batch: bytes | bytearray | memoryview,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    *,
    base_offset: int | None = None,
    transactional: bool | None = None,
) -> bytearray:
    """Set producer id/epoch/base sequence (and optionally base offset, transactional bit) on an encoded batch.

    The compressed payload is left untouched; only the CRC (which covers these fields) is recomputed. A
    bytearray is modified in place and returned; bytes or a memoryview are copied first.
    """
    _check_v2(batch)
    out = batch if isinstance(batch, bytearray) else bytearray(batch)
    PRODUCER_FIELDS.pack_into(out, PRODUCER_FIELDS_OFFSET, producer_id, producer_epoch, base_sequence)
    if base_offset is not None:
        _BASE_OFFSET.pack_into(out, 0, base_offset)  # not covered by the CRC
    if transactional is not None:
        (attributes,) = _ATTRIBUTES.unpack_from(out, CRC_COVERS_FROM)
        attributes = attributes | TRANSACTIONAL_MASK if transactional else attributes & ~TRANSACTIONAL_MASK
        _ATTRIBUTES.pack_into(out, CRC_COVERS_FROM, attributes)
    _CRC.pack_into(out, CRC_OFFSET, crc32c(memoryview(out)[CRC_COVERS_FROM:]))
    return out
