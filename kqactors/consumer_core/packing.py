"""Packing of decoded messages (and per-partition events) from a toppar actor to the app's consumer queue.

Runs in: toppar hosts (``MessageBatchWriter``, filled by the decoder) and the app process (``MessageBatch``,
read lazily by poll()/consume()). Owns the byte layout of one fetched-messages frame.

Why this layout: the app pays per message, so building a Message must be one ``struct.iter_unpack`` step
(C speed, no per-field parsing) plus two slices; messages are only materialised when the application takes
them, so a batch waiting in the queue costs one bytes object. Errors and partition EOF travel inline, in
order with the messages around them, so the application sees them exactly where they happened.

Frame layout, little-endian::

    uint32 count
    count × entry: int64 offset | int64 timestamp | int32 key_len | int32 value_len | int32 headers_len
                   | uint8 kind | int32 leader_epoch
    data: for each entry in order, key bytes | value bytes | headers bytes

``kind`` is the Message timestamp type (0 not available, 1 create time, 2 log append time) for a message,
KIND_ERROR for an error event (key_len holds the error code, the value is the utf-8 reason) and KIND_EOF for
a partition EOF event. Lengths are -1 for null. Headers bytes: uint16 count, then per header
uint16 name_len | int32 value_len (-1 = null) | name utf-8 | value bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence

from kqactors.errors import ERROR_CODES, KafkaError
from kqactors.message import Message

__all__ = ["MessageBatchWriter", "MessageBatch", "KIND_ERROR", "KIND_EOF", "pack_headers", "unpack_headers"]

_COUNT = struct.Struct("<I")
_ENTRY = struct.Struct("<qqiiiBi")
_ENTRY_SIZE = _ENTRY.size
_HEADER_COUNT = struct.Struct("<H")
_HEADER = struct.Struct("<Hi")

KIND_ERROR = 0x10
KIND_EOF = 0x11
_PARTITION_EOF = ERROR_CODES["_PARTITION_EOF"]
_NO_HEADERS = -1


def pack_headers(headers: Sequence[tuple[str, bytes | None]]) -> bytes:
    """Headers as the frame stores them (the caller skips empty header lists)."""
    parts = [_HEADER_COUNT.pack(len(headers))]
    for name, value in headers:
        name_bytes = name.encode()
        if value is None:
            parts.append(_HEADER.pack(len(name_bytes), -1))
            parts.append(name_bytes)
        else:
            parts.append(_HEADER.pack(len(name_bytes), len(value)))
            parts.append(name_bytes)
            parts.append(value)
    return b"".join(parts)


def unpack_headers(data: bytes | memoryview) -> list[tuple[str, bytes | None]]:
    """Inverse of ``pack_headers``."""
    (count,) = _HEADER_COUNT.unpack_from(data, 0)
    pos = _HEADER_COUNT.size
    out: list[tuple[str, bytes | None]] = []
    for _ in range(count):
        name_len, value_len = _HEADER.unpack_from(data, pos)
        pos += _HEADER.size
        name = bytes(data[pos : pos + name_len]).decode()
        pos += name_len
        if value_len < 0:
            out.append((name, None))
        else:
            out.append((name, bytes(data[pos : pos + value_len])))
            pos += value_len
    return out


class MessageBatchWriter:
    """Builds one frame of decoded messages and events for one partition (toppar side)."""

    __slots__ = ("_index", "_data", "count", "messages", "last_offset")

    def __init__(self) -> None:
        self._index = bytearray()
        self._data = bytearray()
        #: Entries (messages and events).
        self.count = 0
        #: Message entries only (what prefetch credit counts).
        self.messages = 0
        #: Offset of the last message added (-1 if none).
        self.last_offset = -1

    def add_records(
        self,
        records: Iterable[tuple[int, int, bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]],
        timestamp_type: int,
        leader_epoch: int,
        min_offset: int = 0,
    ) -> int:
        """Append decoded ``(offset, timestamp, key, value, headers)`` records with offset >= ``min_offset``.

        ``timestamp_type`` is the Message constant (0/1/2). Returns how many records were appended.
        """
        index = self._index
        data = self._data
        pack = _ENTRY.pack
        added = 0
        offset = -1
        for offset, timestamp, key, value, headers in records:
            if offset < min_offset:
                continue
            if key is None:
                key_len = -1
            else:
                key_len = len(key)
                data += key
            if value is None:
                value_len = -1
            else:
                value_len = len(value)
                data += value
            if headers:
                packed = pack_headers(headers)
                headers_len = len(packed)
                data += packed
            else:
                headers_len = _NO_HEADERS
            index += pack(offset, timestamp, key_len, value_len, headers_len, timestamp_type, leader_epoch)
            added += 1
        if added:
            self.count += added
            self.messages += added
            self.last_offset = offset
        return added

    def add_error(self, offset: int, code: int, reason: str) -> None:
        """An error event at ``offset`` (delivered as a Message whose error() is set)."""
        encoded = reason.encode()
        self._index += _ENTRY.pack(offset, 0, code, len(encoded), _NO_HEADERS, KIND_ERROR, -1)
        self._data += encoded
        self.count += 1

    def add_eof(self, offset: int) -> None:
        """A partition EOF event: the consumer reached ``offset``, the end of the partition."""
        self._index += _ENTRY.pack(offset, 0, -1, -1, _NO_HEADERS, KIND_EOF, -1)
        self.count += 1

    @property
    def nbytes(self) -> int:
        return _COUNT.size + len(self._index) + len(self._data)

    def getvalue(self) -> bytes:
        """The frame (one allocation of its full size)."""
        return b"".join((_COUNT.pack(self.count), self._index, self._data))


class MessageBatch:
    """A received frame, turned into Message objects only as the application takes them (app side).

    ``version`` is the toppar version the data was fetched at; the app drops batches older than the
    partition's current version before taking anything from them.
    """

    __slots__ = ("topic", "partition", "version", "_frame", "_view", "count", "_cursor", "_data_pos",
                 "_count_paid")

    def __init__(self, topic: str, partition: int, frame: bytes, version: int = 0) -> None:
        if len(frame) < _COUNT.size:
            raise ValueError("message batch frame shorter than its count field")
        (count,) = _COUNT.unpack_from(frame, 0)
        if _COUNT.size + count * _ENTRY_SIZE > len(frame):
            raise ValueError(f"message batch frame of {len(frame)} bytes cannot hold {count} entries")
        self.topic = topic
        self.partition = partition
        self.version = version
        self._frame = frame
        self._view = memoryview(frame)
        self.count = count
        self._cursor = 0
        self._data_pos = _COUNT.size + count * _ENTRY_SIZE
        self._count_paid = False

    def __len__(self) -> int:
        """Entries not yet taken."""
        return self.count - self._cursor

    @property
    def nbytes(self) -> int:
        return len(self._frame)

    def take(self, max_count: int | None = None) -> tuple[list[Message], int, int]:
        """Up to ``max_count`` next entries as Messages, with the message count and frame bytes they used.

        The two numbers are what the app returns as prefetch credit once it has handed these out.
        """
        start = self._cursor
        stop = self.count if max_count is None else min(self.count, start + max_count)
        if stop <= start:
            if self._count_paid:
                return [], 0, 0
            self._count_paid = True
            return [], 0, _COUNT.size
        frame = self._frame
        topic = self.topic
        partition = self.partition
        pos = self._data_pos
        first_pos = pos
        out: list[Message] = []
        append = out.append
        entries = _ENTRY.iter_unpack(
            self._view[_COUNT.size + start * _ENTRY_SIZE : _COUNT.size + stop * _ENTRY_SIZE]
        )
        messages = 0
        for offset, timestamp, key_len, value_len, headers_len, kind, leader_epoch in entries:
            if kind < KIND_ERROR:
                if key_len < 0:
                    key = None
                else:
                    key = frame[pos : pos + key_len]
                    pos += key_len
                if value_len < 0:
                    value = None
                else:
                    value = frame[pos : pos + value_len]
                    pos += value_len
                if headers_len < 0:
                    headers = None
                else:
                    headers = unpack_headers(self._view[pos : pos + headers_len])
                    pos += headers_len
                append(Message(topic, partition, offset, key, value, headers, None, (kind, timestamp), None,
                               None if leader_epoch < 0 else leader_epoch))
                messages += 1
            elif kind == KIND_ERROR:
                reason = frame[pos : pos + value_len].decode()
                pos += value_len
                append(Message(topic, partition, offset, error=KafkaError(key_len, reason)))
            else:
                error = KafkaError(_PARTITION_EOF, f"Fetch reached end of partition at offset {offset}")
                append(Message(topic, partition, offset, error=error))
        self._cursor = stop
        self._data_pos = pos
        used = (stop - start) * _ENTRY_SIZE + pos - first_pos
        if not self._count_paid:
            self._count_paid = True
            used += _COUNT.size  # so that the credit returned for a whole batch equals its nbytes
        return out, messages, used

    def __iter__(self) -> Iterator[Message]:
        """Take every remaining entry, one Message at a time (convenience; take() is cheaper in bulk)."""
        while self._cursor < self.count:
            yield from self.take(256)[0]
