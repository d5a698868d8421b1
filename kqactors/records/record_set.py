"""Runs in: broker actors (cheap header scan of a fetched record set) and toppar hosts (full decode).

Owns walking a record set as brokers return it: a sequence of v2 batches and/or legacy messages whose last
entry may be cut short by the fetch size limit. Scanning reads only fixed header fields (no CRC, no
decompression); decoding dispatches each entry to the v2 or legacy reader.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from .errors import CorruptRecordError
from .legacy import decode_legacy_message, parse_legacy_header
from .reader_v2 import BatchHeader, Record, decode_v2_batch, parse_v2_header

#: Every entry, whatever its magic, starts with offset i64 and size i32 (bytes that follow the size)
#: and has its magic byte at position 16.
_ENTRY_PREFIX = struct.Struct(">qi")
_MAGIC_AT = 16
_MIN_PREFIX = 17  # enough to read offset, size and magic


class RecordSetScan:
    """Result of scanning a record set: the complete entries and what is left over at the end."""

    __slots__ = ("batches", "consumed", "partial_size")

    def __init__(self, batches: list[BatchHeader], consumed: int, partial_size: int) -> None:
        self.batches = batches
        #: Bytes covered by complete entries.
        self.consumed = consumed
        #: Full size of the truncated trailing entry (0 if none or its size is unreadable).
        self.partial_size = partial_size

    def next_offset(self, current: int) -> int:
        """Fetch position after these batches (``current`` when none is complete)."""
        return self.batches[-1].next_offset if self.batches else current

    @property
    def is_truncated(self) -> bool:
        return self.partial_size > 0


def _as_bytes(data: bytes | bytearray | memoryview) -> bytes:
    return data if isinstance(data, bytes) else bytes(data)


def _as_view(data: bytes | bytearray | memoryview) -> bytes | memoryview:
    """``data`` for reading headers only (struct.unpack_from and byte indexing): no copy of a fetched
    slice, which scanning a multi-MB Fetch answer per partition would cost."""
    return data if isinstance(data, bytes) else memoryview(data).cast("B")


def iter_batch_headers(data: bytes | bytearray | memoryview) -> Iterator[BatchHeader]:
    """Yield the header of every complete entry; stops silently at a truncated trailing entry.

    Raises CorruptRecordError for an entry whose size or magic is impossible. Reads ``data`` in place (the
    headers keep positions, not bytes of it).
    """
    buf = _as_view(data)
    pos = 0
    end = len(buf)
    while pos + _MIN_PREFIX <= end:
        offset, length = _ENTRY_PREFIX.unpack_from(buf, pos)
        size = 12 + length
        magic = buf[pos + _MAGIC_AT]
        if length < 14:
            raise CorruptRecordError(f"impossible entry length {length}", offset=offset)
        if magic > 2:
            raise CorruptRecordError(f"unknown magic byte {magic}", offset=offset)
        if pos + size > end:
            return
        if magic == 2:
            yield parse_v2_header(buf, pos, size)
        else:
            yield parse_legacy_header(buf, pos, size)
        pos += size


def scan_record_set(data: bytes | bytearray | memoryview) -> RecordSetScan:
    """Scan headers (no CRC check, no decompression) and report a truncated trailing entry."""
    buf = _as_view(data)
    batches = list(iter_batch_headers(buf))
    consumed = batches[-1].position + batches[-1].size if batches else 0
    partial_size = 0
    if consumed < len(buf) and len(buf) - consumed >= 12:
        partial_size = 12 + _ENTRY_PREFIX.unpack_from(buf, consumed)[1]
    return RecordSetScan(batches, consumed, partial_size)


def decode_batch(data: bytes, header: BatchHeader, *, verify_crc: bool = True) -> BatchHeader:
    """Decode one scanned entry in place (fills ``header.records``) and return it."""
    if header.magic == 2:
        return decode_v2_batch(data, header, verify_crc=verify_crc)
    return decode_legacy_message(data, header, verify_crc=verify_crc)


def decode_record_set(
    data: bytes | bytearray | memoryview, *, verify_crc: bool = True, skip_control: bool = False
) -> list[BatchHeader]:
    """Decode every complete entry of a fetched record set into BatchHeaders with ``records`` filled."""
    buf = _as_bytes(data)
    out = []
    for header in iter_batch_headers(buf):
        if skip_control and header.is_control:
            continue
        out.append(decode_batch(buf, header, verify_crc=verify_crc))
    return out


def iter_records(data: bytes | bytearray | memoryview, *, verify_crc: bool = True) -> Iterator[Record]:
    """Every data record (control batches skipped) of a record set as (offset, ts, key, value, headers)."""
    for batch in decode_record_set(data, verify_crc=verify_crc, skip_control=True):
        yield from batch.records
