"""Message packing between the app facade and toppar actors.

Runs in: the app process (``MessagePacker.append`` on every produce()) and toppar hosts (``pack_messages``
for callers holding tuples, ``unpack_messages`` for tools and tests). Owns writing a PRODUCE op's single
frame; the layout itself lives in ``kqactors.records.packed`` because the record encoder reads it directly.

Why a hand-made layout instead of msgpack: the app side pays per message, so appending must be one
``struct.pack`` plus a few list appends; the toppar side never cuts the frame into per-message objects —
it keeps whole frames as queue chunks and encodes records straight from them.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence

from kqactors.native import NATIVE
from kqactors.records.packed import ENTRY as _ENTRY
from kqactors.records.packed import HEADER as _HEADER
from kqactors.records.packed import HEADER_MAX_OVERHEAD, RECORD_MAX_OVERHEAD

__all__ = [
    "MessagePacker",
    "PyMessagePacker",
    "SEGMENT_BYTES",
    "pack_messages",
    "PackedMessage",
    "unpack_messages",
    "record_size_estimate",
    "RECORD_MAX_OVERHEAD",
    "HEADER_MAX_OVERHEAD",
]

_ENTRY_SIZE = _ENTRY.size
_ENTRY_PACK = _ENTRY.pack
_HEADER_SIZE = _HEADER.size

SEGMENT_BYTES = 64 * 1024
"""Frame bytes per segment (see ``MessagePacker.cuts``): small against batch.size's default of 1 MB, large
enough that a segment holds hundreds of small messages."""

Headers = Sequence[tuple[str, bytes | None]]
PackedMessage = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]] | None]
"""(timestamp_ms, key, value, headers) as handed to the toppar's queue."""


def record_size_estimate(key_len: int, value_len: int, headers_len: int) -> int:
    """Upper bound of one record's size inside a v2 batch; lengths of null fields count as 0."""
    return RECORD_MAX_OVERHEAD + key_len + value_len + headers_len


class PyMessagePacker:
    """Append-only buffer of packed messages for one toppar; ``take()`` hands the frame over.

    Parts are collected in a list and joined once in ``take()``: cheaper per message than growing a
    bytearray (no copy of the value until the join). Not thread-safe by itself: the facade appends and
    takes under its own lock.

    The pure-Python reference; ``MessagePacker`` is the C twin ``kqactors.native._native.Packer`` when it is built
    and enabled (see kqactors.native), which writes the same bytes (key, value and header values must be
    bytes or None there; other bytes-like objects raise TypeError).
    """

    __slots__ = ("_parts", "count", "first_msgid", "nbytes", "first_enq", "headers", "cuts", "_cut_at")

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self.count = 0
        self.first_msgid = 0
        self.nbytes = 0
        self.first_enq = 0.0
        self.headers = 0  # headers in the frame so far (the toppar's size estimate needs it)
        # Segment boundaries, cumulative [count, frame bytes, headers], every SEGMENT_BYTES: the toppar
        # queues each segment as its own chunk, so a batch can end between them without a frame walk.
        self.cuts: list[list[int]] = []
        self._cut_at = SEGMENT_BYTES

    def append(self, msgid: int, timestamp_ms: int, key: bytes | None, value: bytes | None,
               headers: Headers | None, enq_time: float) -> None:
        """Append one message; ``msgid`` must be the previous one + 1 (checked only for the first)."""
        parts = self._parts
        if self.count == 0:
            self.first_msgid = msgid
            self.first_enq = enq_time
        size = _ENTRY_SIZE
        if key is None:
            klen = -1
        else:
            klen = len(key)
            size += klen
        if value is None:
            vlen = -1
        else:
            vlen = len(value)
            size += vlen
        if headers:
            parts.append(_ENTRY_PACK(timestamp_ms, klen, vlen, len(headers)))
            self.headers += len(headers)
            if klen > 0:
                parts.append(key)
            if vlen > 0:
                parts.append(value)
            for name, hval in headers:
                raw_name = name.encode()
                hlen = -1 if hval is None else len(hval)
                parts.append(_HEADER.pack(len(raw_name), hlen))
                parts.append(raw_name)
                size += _HEADER_SIZE + len(raw_name)
                if hlen > 0:
                    parts.append(hval)
                    size += hlen
        else:
            parts.append(_ENTRY_PACK(timestamp_ms, klen, vlen, 0))
            if klen > 0:
                parts.append(key)
            if vlen > 0:
                parts.append(value)
        self.count += 1
        self.nbytes += size
        if self.nbytes >= self._cut_at:
            self.cuts.append([self.count, self.nbytes, self.headers])
            self._cut_at = self.nbytes + SEGMENT_BYTES

    def append_pending(self, msgid: int, timestamp_ms: int, key: bytes | None, value: bytes | None,
                       headers: Headers | None, enq_time: float, pending: dict, callback: object,
                       size: int) -> None:
        """append(), and record the message's pending entry (the layout ProducerBuffers reads):
        ``pending[msgid] = (key, value, headers, timestamp_ms, callback, enq_time, size)``."""
        self.append(msgid, timestamp_ms, key, value, headers, enq_time)
        pending[msgid] = (key, value, headers, timestamp_ms, callback, enq_time, size)

    def __len__(self) -> int:
        return self.count

    def byte_size(self) -> int:
        return self.nbytes

    def take(self) -> tuple[int, int, float, bytes]:
        """Return (first_msgid, count, first_enq_time, frame) and reset the buffer (read ``headers`` and
        ``cuts`` first if they are needed)."""
        result = (self.first_msgid, self.count, self.first_enq, b"".join(self._parts))
        self._parts = []
        self.count = 0
        self.first_msgid = 0
        self.nbytes = 0
        self.headers = 0
        self.cuts = []
        self._cut_at = SEGMENT_BYTES
        return result


MessagePacker: type[PyMessagePacker] = PyMessagePacker if NATIVE is None else NATIVE.Packer


def pack_messages(messages: Iterable[PackedMessage]) -> tuple[bytes, int, int]:
    """Pack (timestamp, key, value, headers) tuples into one frame; returns (frame, count, header count)."""
    packer = PyMessagePacker()  # not a hot path: the reference implementation
    for msgid, (timestamp, key, value, headers) in enumerate(messages):
        packer.append(msgid, timestamp, key, value, headers, 0.0)
    headers = packer.headers
    _first, count, _enq, frame = packer.take()
    return frame, count, headers


def unpack_messages(frame: bytes | memoryview, count: int) -> list[PackedMessage]:
    """Cut a PRODUCE frame back into ``count`` (timestamp, key, value, headers) tuples.

    Raises ValueError when the frame is truncated, has trailing bytes, or holds fewer entries.
    """
    data = bytes(frame)
    size = len(data)
    out: list[PackedMessage] = []
    append = out.append
    unpack_entry = _ENTRY.unpack_from
    pos = 0
    try:
        for _ in range(count):
            ts, klen, vlen, hcount = unpack_entry(data, pos)
            pos += _ENTRY_SIZE
            if klen < 0:
                key = None
            else:
                key = data[pos:pos + klen]
                pos += klen
            if vlen < 0:
                value = None
            else:
                value = data[pos:pos + vlen]
                pos += vlen
            headers = None
            if hcount:
                headers = []
                for _h in range(hcount):
                    nlen, hlen = _HEADER.unpack_from(data, pos)
                    pos += _HEADER_SIZE
                    name = data[pos:pos + nlen].decode()
                    pos += nlen
                    if hlen < 0:
                        hval = None
                    else:
                        hval = data[pos:pos + hlen]
                        pos += hlen
                    headers.append((name, hval))
            if pos > size:
                raise ValueError("packed message frame is truncated")
            append((ts, key, value, headers))
    except struct.error as exc:
        raise ValueError(f"packed message frame is truncated: {exc}") from None
    if pos != size:
        raise ValueError(f"packed message frame has {size - pos} trailing bytes after {count} messages")
    return out
