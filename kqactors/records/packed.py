"""Runs in: the app process (writing, via ``kqactors.core.producer.packing``) and toppar hosts (reading).

Owns the byte layout of a packed-message frame, the one buffer a PRODUCE op carries from the app to a
toppar, and the cheap scan the toppar uses to cut a frame at a batch boundary. The record encoder
(``batch_v2.RecordBatchBuilder.append_packed``) reads the same layout straight into records, so a message
is never unpacked into Python objects on its way from produce() to the wire.

Layout, little-endian, one entry per message, msgids implicit (first_msgid + index)::

    int64 timestamp_ms | int32 key_len (-1 = null) | int32 value_len (-1 = null) | uint16 header_count
    key bytes | value bytes
    header_count × ( uint16 name_len | int32 value_len (-1 = null) | name utf-8 | value bytes )

Size estimate: a record of a v2 batch takes at most ``RECORD_MAX_OVERHEAD`` bytes of framing plus its key
and value, and ``HEADER_MAX_OVERHEAD`` plus name and value per header. A frame entry takes 20 + key + value
and 6 + name + value per header, so the estimate of a whole frame is exactly
``len(frame) + ENTRY_EXTRA * count + HEADER_EXTRA * headers`` — no walk needed.
"""

from __future__ import annotations

import struct

__all__ = [
    "ENTRY",
    "HEADER",
    "RECORD_MAX_OVERHEAD",
    "HEADER_MAX_OVERHEAD",
    "frame_size_estimate",
    "scan_packed",
]

ENTRY = struct.Struct("<qiiH")
HEADER = struct.Struct("<Hi")

RECORD_MAX_OVERHEAD = 36
"""Worst-case RecordBatch v2 per-record framing: length(5) attributes(1) timestamp delta(10)
offset delta(5) key length(5) value length(5) header count(5) varint bytes."""
HEADER_MAX_OVERHEAD = 10
"""Worst-case per-header framing: name length(5) + value length(5) varint bytes."""

ENTRY_EXTRA = RECORD_MAX_OVERHEAD - ENTRY.size
HEADER_EXTRA = HEADER_MAX_OVERHEAD - HEADER.size


def frame_size_estimate(frame_len: int, count: int, headers: int) -> int:
    """Upper bound of the encoded records of a frame of ``count`` messages holding ``headers`` headers."""
    return frame_len + ENTRY_EXTRA * count + HEADER_EXTRA * headers


def scan_packed(frame: bytes, pos: int, max_count: int, budget: int, take_one: bool,
                end_at: int | None = None) -> tuple[int, int, int]:
    """Walk entries from ``pos`` (up to ``end_at``, default the frame's end) while they fit: at most
    ``max_count`` messages and ``budget`` estimated bytes (the first one regardless when ``take_one``).
    Returns (messages, end position, estimated bytes).

    Raises ValueError when an entry runs past ``end_at``.
    """
    unpack_entry = ENTRY.unpack_from
    unpack_header = HEADER.unpack_from
    entry_size = ENTRY.size
    header_size = HEADER.size
    size_limit = len(frame) if end_at is None else end_at
    taken = 0
    used = 0
    try:
        while taken < max_count and pos < size_limit:
            _ts, klen, vlen, hcount = unpack_entry(frame, pos)
            end = pos + entry_size + (klen if klen > 0 else 0) + (vlen if vlen > 0 else 0)
            size = RECORD_MAX_OVERHEAD + end - pos - entry_size
            for _h in range(hcount):
                nlen, hlen = unpack_header(frame, end)
                step = header_size + nlen + (hlen if hlen > 0 else 0)
                end += step
                size += HEADER_EXTRA + step
            if end > size_limit:
                raise ValueError("packed message frame is truncated")
            if used + size > budget and not (take_one and taken == 0):
                break
            used += size
            taken += 1
            pos = end
    except struct.error as exc:
        raise ValueError(f"packed message frame is truncated: {exc}") from None
    return taken, pos, used
