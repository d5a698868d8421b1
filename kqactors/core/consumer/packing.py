"""Packing of decoded messages (and per-partition events) from a toppar actor to the app's consumer queue.

Runs in: toppar hosts (``MessageBatchWriter``, filled by the decoder) and the app process (``MessageBatch``,
read lazily by poll()/consume()). Owns the byte layout of one fetched-messages frame.

Why this layout: the app pays per message, so building a Message must be one ``struct.iter_unpack`` step
(C speed, no per-field parsing) plus two slices; messages are only materialised when the application takes
them, so a batch waiting in the queue costs one bytes object. The data section is the decoded record bytes
themselves (a v2 batch's decompressed records section copied whole, ``add_v2_records``): entries point into
it, so the toppar copies each batch once instead of every key and value. Errors and partition EOF travel
inline, in order with the messages around them, so the application sees them exactly where they happened.

Frame layout, little-endian::

    uint32 count
    count × entry: int64 offset | int64 timestamp | int32 key_pos | int32 key_len | int32 value_pos
                   | int32 value_len | int32 headers_pos | uint8 kind | int32 leader_epoch
    data: record bytes the entries point into (positions are relative to the start of the data section)

``kind`` is the Message timestamp type (0 not available, 1 create time, 2 log append time) for a message,
KIND_ERROR for an error event (key_len holds the error code, the value is the utf-8 reason), KIND_EOF for
a partition EOF event and KIND_SKIP for records the application never sees (control records, aborted data)
that end at ``offset``: taking it moves the partition's position past them, as librdkafka's control-message
ops do, and yields no Message. Lengths are -1 for null; headers_pos is -1 for no headers, else the position of
headers in the RecordBatch v2 record encoding (varint count, then varint-length name and value per header).

Taking entries (``MessageBatch.take``) is the app's per-message work. Its per-entry loop has two twins with
the same results: ``_take_entries_py``, the reference, and the C ``kqactors.native._native.take_entries``, used
when kqactors.native chose the extension. The C one builds the Messages and their timestamp tuples
untracked by the cycle collector: the lists of up to a thousand Messages consume() hands out outlive young
collections, and tracked they got promoted and made full collections scan them all (20-30 % of the app's
CPU at 100 B). On a malformed frame the C twin raises CorruptRecordError where the Python one's slices would
quietly come up short (or its header decoder raise IndexError); the frames are this module's own, so that is
a bug either way.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator, Sequence

from kqactors.errors import KafkaError
from kqactors.message import Message
from kqactors.native import NATIVE
from kqactors.native import NATIVE_RECORDS as _native_records
from kqactors.records.reader_v2 import decode_record_headers, pack_v2_records
from kqactors.records.varint import encode_varint

Buffer = bytes | bytearray | memoryview  # what a frame may arrive as (the transport's views included)

__all__ = ["MessageBatchWriter", "MessageBatch", "KIND_ERROR", "KIND_EOF", "KIND_SKIP", "pack_headers",
           "unpack_headers"]

_COUNT = struct.Struct("<I")
_ENTRY = struct.Struct("<qqiiiiiBi")
_ENTRY_SIZE = _ENTRY.size

KIND_ERROR = 0x10
KIND_EOF = 0x11
KIND_SKIP = 0x12
_PARTITION_EOF = KafkaError._PARTITION_EOF
_NO_HEADERS = -1


def pack_headers(headers: Sequence[tuple[str, bytes | None]]) -> bytes:
    """Headers in the v2 record encoding, as the frame stores them (the caller skips empty lists)."""
    parts = [encode_varint(len(headers))]
    for name, value in headers:
        name_bytes = name.encode()
        parts.append(encode_varint(len(name_bytes)))
        parts.append(name_bytes)
        if value is None:
            parts.append(encode_varint(-1))
        else:
            parts.append(encode_varint(len(value)))
            parts.append(value)
    return b"".join(parts)


def unpack_headers(data: bytes | memoryview, pos: int = 0) -> list[tuple[str, bytes | None]]:
    """Inverse of ``pack_headers`` (also reads headers straight from a v2 record at ``pos``)."""
    return list(decode_record_headers(bytes(data) if isinstance(data, memoryview) else data, pos)[0])


class MessageBatchWriter:
    """Builds one frame of decoded messages and events for one partition (toppar side).

    The data section is kept as parts until ``getvalue``: a v2 batch's records section (decompressed, up to
    a MiB) is referenced, not copied, so it is copied once, into the frame; small pieces (legacy records,
    error texts) go to a bytearray tail.
    """

    __slots__ = ("_index", "_parts", "_parts_len", "_tail", "count", "messages", "last_offset")

    def __init__(self) -> None:
        self._index = bytearray()
        self._parts: list[bytes | bytearray | memoryview] = []  # records sections, finished tails: in order
        self._parts_len = 0
        self._tail = bytearray()
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
        data = self._tail
        base = self._parts_len
        pack = _ENTRY.pack
        added = 0
        offset = -1
        for offset, timestamp, key, value, headers in records:
            if offset < min_offset:
                continue
            if key is None:
                key_pos = key_len = -1
            else:
                key_pos, key_len = base + len(data), len(key)
                data += key
            if value is None:
                value_pos = value_len = -1
            else:
                value_pos, value_len = base + len(data), len(value)
                data += value
            if headers:
                headers_pos = base + len(data)
                data += pack_headers(headers)
            else:
                headers_pos = _NO_HEADERS
            index += pack(offset, timestamp, key_pos, key_len, value_pos, value_len, headers_pos, timestamp_type,
                          leader_epoch)
            added += 1
        if added:
            self.count += added
            self.messages += added
            self.last_offset = offset
        return added

    def add_v2_records(
        self,
        records: bytes,
        pos: int,
        end: int,
        count: int,
        base_offset: int,
        base_timestamp: int,
        fixed_timestamp: int,
        timestamp_type: int,
        leader_epoch: int,
        min_offset: int = 0,
    ) -> int:
        """Append the ``count`` v2 records in ``records[pos:end]`` (a batch's records section, decompressed)
        with offset >= ``min_offset``: the section is copied once and entries point into it.

        Raises CorruptRecordError (and leaves the writer unchanged) if the records are malformed.
        Returns how many records were appended. The index is written by the C twin of ``pack_v2_records``
        when it is built and not switched off (kqactors/native/__init__.py); both write the same entries.
        """
        if self._tail:  # the section goes after it
            self._parts.append(self._tail)
            self._parts_len += len(self._tail)
            self._tail = bytearray()
        index_mark, data_mark = len(self._index), self._parts_len
        self._parts.append(memoryview(records)[pos:end])
        self._parts_len += end - pos
        native = _native_records
        try:
            if native is None:
                added, last = pack_v2_records(
                    self._index, _ENTRY.pack, records, pos, end, count, data_mark - pos, base_offset,
                    base_timestamp, fixed_timestamp, timestamp_type, leader_epoch, min_offset,
                )  # fmt: skip
            else:
                added, last = native.pack_v2_records(
                    self._index, records, pos, end, count, data_mark - pos, base_offset, base_timestamp,
                    fixed_timestamp, timestamp_type, leader_epoch, min_offset,
                )  # fmt: skip
        except BaseException:
            del self._index[index_mark:]
            self._drop_last_part(data_mark)
            raise
        if added:
            self.count += added
            self.messages += added
            self.last_offset = last
        else:
            self._drop_last_part(data_mark)
        return added

    def _drop_last_part(self, data_mark: int) -> None:
        self._parts.pop()
        self._parts_len = data_mark

    def add_error(self, offset: int, code: int, reason: str) -> None:
        """An error event at ``offset`` (delivered as a Message whose error() is set)."""
        encoded = reason.encode()
        position = self._parts_len + len(self._tail)
        self._index += _ENTRY.pack(offset, 0, -1, code, position, len(encoded), _NO_HEADERS, KIND_ERROR, -1)
        self._tail += encoded
        self.count += 1

    def add_skip(self, offset: int, leader_epoch: int) -> None:
        """Records up to and including ``offset`` were skipped (control records, aborted data): the position
        moves past them when the application takes this entry."""
        self._index += _ENTRY.pack(offset, 0, -1, -1, -1, -1, _NO_HEADERS, KIND_SKIP, leader_epoch)
        self.count += 1

    def add_eof(self, offset: int) -> None:
        """A partition EOF event: the consumer reached ``offset``, the end of the partition."""
        self._index += _ENTRY.pack(offset, 0, -1, -1, -1, -1, _NO_HEADERS, KIND_EOF, -1)
        self.count += 1

    @property
    def nbytes(self) -> int:
        return _COUNT.size + len(self._index) + self._parts_len + len(self._tail)

    def getvalue(self) -> bytes:
        """The frame (one allocation of its full size)."""
        return b"".join((_COUNT.pack(self.count), self._index, *self._parts, self._tail))


def _event_message(
    topic: str, partition: int, offset: int, kind: int, code: int, reason: bytes | None
) -> Message:
    """The Message of an error event (KIND_ERROR: ``code`` and the utf-8 ``reason``) or a partition EOF event
    (any other event kind). Shared by both take twins: events are rare, so the C one calls back here."""
    if kind == KIND_ERROR:
        return Message(topic, partition, offset, error=KafkaError(code, (reason or b"").decode()))
    error = KafkaError(_PARTITION_EOF, f"Fetch reached end of partition at offset {offset}")
    return Message(topic, partition, offset, error=error)


def _take_entries_py(
    frame: Buffer, start: int, stop: int, base: int, topic: str, partition: int, event: Callable[..., Message]
) -> tuple[list[Message], int, tuple[int, int] | None]:
    """Entries ``start`` .. ``stop - 1`` of ``frame`` (data section at ``base``) as Messages, with how many
    were message entries and the (offset, leader epoch) of the last KIND_SKIP entry, or None.

    The pure-Python reference of ``MessageBatch.take``'s per-entry loop; the C twin is
    ``kqactors.native._native.take_entries``. Events are built by ``event`` (``_event_message``). ``frame`` is any
    bytes-like object; keys, values and reasons come out as bytes of their own.
    """
    out: list[Message] = []
    append = out.append
    messages = 0
    skipped = None
    view = memoryview(frame)
    header_source: bytes | None = None  # the header decoder reads bytes: converted once, if any entry has some
    entries = _ENTRY.iter_unpack(view[_COUNT.size + start * _ENTRY_SIZE : _COUNT.size + stop * _ENTRY_SIZE])
    for offset, timestamp, key_pos, key_len, value_pos, value_len, headers_pos, kind, epoch in entries:
        if kind < KIND_ERROR:
            if headers_pos < 0:
                headers = None
            else:
                if header_source is None:
                    header_source = frame if isinstance(frame, bytes) else bytes(view)
                headers = list(decode_record_headers(header_source, base + headers_pos)[0])
            append(Message(
                topic, partition, offset,
                None if key_len < 0 else bytes(view[base + key_pos : base + key_pos + key_len]),
                None if value_len < 0 else bytes(view[base + value_pos : base + value_pos + value_len]),
                headers, None, (kind, timestamp), None, None if epoch < 0 else epoch,
            ))  # fmt: skip
            messages += 1
        elif kind == KIND_SKIP:
            skipped = (offset, epoch)
        else:
            reason = bytes(view[base + value_pos : base + value_pos + value_len]) if kind == KIND_ERROR else None
            append(event(topic, partition, offset, kind, key_len, reason))
    return out, messages, skipped


class MessageBatch:
    """A received frame, turned into Message objects only as the application takes them (app side).

    ``version`` is the toppar version the data was fetched at; the app drops batches older than the
    partition's current version before taking anything from them. ``skipped`` is the (offset, leader epoch)
    of the last KIND_SKIP entry the latest take() passed, or None: the position moves past that offset.
    """

    __slots__ = ("topic", "partition", "version", "_frame", "count", "_cursor", "_data_start", "_paid",
                 "skipped")

    #: The per-entry loop of take(): the C twin when kqactors.native chose the extension, else the reference.
    _take_entries = staticmethod(_take_entries_py if NATIVE is None else NATIVE.take_entries)

    def __init__(self, topic: str, partition: int, frame: Buffer, version: int = 0) -> None:
        frame = frame if isinstance(frame, bytes) else memoryview(frame).cast("B")  # len() counts bytes
        if len(frame) < _COUNT.size:
            raise ValueError("message batch frame shorter than its count field")
        (count,) = _COUNT.unpack_from(frame, 0)
        if _COUNT.size + count * _ENTRY_SIZE > len(frame):
            raise ValueError(f"message batch frame of {len(frame)} bytes cannot hold {count} entries")
        self.topic = topic
        self.partition = partition
        self.version = version
        self._frame = frame
        self.count = count
        self._cursor = 0
        self._data_start = _COUNT.size + count * _ENTRY_SIZE
        #: frame bytes already reported as used (prefetch credit)
        self._paid = 0
        self.skipped: tuple[int, int] | None = None

    def __len__(self) -> int:
        """Entries not yet taken."""
        return self.count - self._cursor

    @property
    def nbytes(self) -> int:
        return len(self._frame)

    @property
    def remaining_bytes(self) -> int:
        """Frame bytes of the entries not yet taken (what prefetch credit has not been paid for yet)."""
        return len(self._frame) - self._paid

    def mark(self) -> tuple[int, int, tuple[int, int] | None]:
        """Where the batch stands (cursor, bytes paid, skipped): ``rewind`` undoes the takes since."""
        return self._cursor, self._paid, self.skipped

    def rewind(self, mark: tuple[int, int, tuple[int, int] | None]) -> None:
        """Back to ``mark``: the entries taken since will be taken again (their Messages were never handed out)."""
        self._cursor, self._paid, self.skipped = mark

    def take(self, max_count: int | None = None) -> tuple[list[Message], int, int]:
        """Up to ``max_count`` next entries as Messages, with the message count and frame bytes they used.

        The two numbers are what the app returns as prefetch credit once it has handed these out; the bytes
        of all takes of a batch add up to its ``nbytes`` (each take pays its entries' share of the data).
        """
        start = self._cursor
        stop = self.count if max_count is None else min(self.count, start + max_count)
        frame = self._frame
        self.skipped = None
        if stop <= start:
            used = len(frame) - self._paid
            self._paid = len(frame)
            return [], 0, used
        base = self._data_start
        out, messages, self.skipped = self._take_entries(frame, start, stop, base, self.topic, self.partition,
                                                         _event_message)
        self._cursor = stop
        if stop == self.count:
            used = len(frame) - self._paid
        else:
            used = (stop - start) * (_ENTRY_SIZE + (len(frame) - base) // self.count)
        self._paid += used
        return out, messages, used

    def __iter__(self) -> Iterator[Message]:
        """Take every remaining entry, one Message at a time (convenience; take() is cheaper in bulk)."""
        while self._cursor < self.count:
            yield from self.take(256)[0]
