"""Decoding of fetched record sets into message batches for the application.

Runs in: toppar hosts (one decode per fetched slice; slices of different partitions decode in parallel on
different hosts). Owns ``FetchedSlice`` (what a broker actor hands a toppar: the raw record bytes of one
partition plus the response facts needed to interpret them) and turning it into one packed frame of
messages and events: records below the fetch offset are skipped (a batch, compressed ones especially, can
start before it), control records are never delivered, and under read_committed the records of aborted
transactions are hidden. Skipped records at the end of a slice leave a skip entry so that the application's
position still moves past them (librdkafka does the same with its control-message ops).

Aborted transactions: the broker lists (producer id, first offset) for every aborted transaction that
overlaps the fetched range. Walking the batches in order, a producer id becomes "aborted" once a
transactional batch of it reaches that first offset, and stays so until its ABORT control marker; its
transactional batches in between are dropped.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from kqactors.records import CONTROL_ABORT, BatchHeader, CorruptRecordError, decode_batch, iter_batch_headers
from kqactors.records.reader_v2 import v2_records_section

from . import packing as _packing
from .packing import MessageBatchWriter
from .settings import FetchSettings

__all__ = ["FetchedSlice", "DecodedBatch", "SliceDecoder", "decode_records_into", "iter_decoded"]


class FetchedSlice:
    """One partition's share of a Fetch response, stamped with the toppar version it was requested at.

    ``records`` holds complete entries only (the truncated tail is cut off by the broker actor's scan).
    ``eof_offset`` >= 0 asks the decoder to append a partition EOF event at that offset after the messages.
    Crosses from broker actor to toppar as ``payload()`` (msgpack) plus ``records`` as a raw frame.
    """

    __slots__ = ("topic", "partition", "version", "fetch_offset", "next_offset", "high_watermark",
                 "last_stable_offset", "log_start_offset", "aborted", "records", "eof_offset")

    def __init__(
        self,
        topic: str,
        partition: int,
        version: int,
        fetch_offset: int,
        next_offset: int,
        records: bytes | memoryview = b"",
        *,
        high_watermark: int = -1,
        last_stable_offset: int = -1,
        log_start_offset: int = -1,
        aborted: Sequence[tuple[int, int]] = (),
        eof_offset: int = -1,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.version = version
        self.fetch_offset = fetch_offset
        self.next_offset = next_offset
        self.records = records
        self.high_watermark = high_watermark
        self.last_stable_offset = last_stable_offset
        self.log_start_offset = log_start_offset
        #: (producer_id, first_offset) of aborted transactions (read_committed only).
        self.aborted = [tuple(pair) for pair in aborted]
        self.eof_offset = eof_offset

    def payload(self) -> dict[str, Any]:
        """Everything but the record bytes, as plain msgpack-able values."""
        return {
            "topic": self.topic, "partition": self.partition, "version": self.version,
            "fetch_offset": self.fetch_offset, "next_offset": self.next_offset,
            "high_watermark": self.high_watermark, "last_stable_offset": self.last_stable_offset,
            "log_start_offset": self.log_start_offset, "aborted": [list(p) for p in self.aborted],
            "eof_offset": self.eof_offset,
        }  # fmt: skip

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any], records: bytes | memoryview) -> FetchedSlice:
        return cls(
            payload["topic"], payload["partition"], payload["version"], payload["fetch_offset"],
            payload["next_offset"], records, high_watermark=payload["high_watermark"],
            last_stable_offset=payload["last_stable_offset"], log_start_offset=payload["log_start_offset"],
            aborted=payload["aborted"], eof_offset=payload["eof_offset"],
        )  # fmt: skip

    def __repr__(self) -> str:
        return (f"FetchedSlice({self.topic}[{self.partition}] v{self.version} {self.fetch_offset}.."
                f"{self.next_offset} {len(self.records)}B hwm={self.high_watermark} eof={self.eof_offset})")


class DecodedBatch:
    """The decoder's output for one slice: a packed frame plus counts for stats and prefetch credit."""

    __slots__ = ("topic", "partition", "version", "frame", "messages", "entries", "next_offset", "last_offset",
                 "skipped_aborted", "skipped_control", "errors", "final")

    def __init__(self, sl: FetchedSlice, writer: MessageBatchWriter, counts: _Counts) -> None:
        self.topic = sl.topic
        self.partition = sl.partition
        self.version = sl.version
        self.frame = writer.getvalue()
        self.messages = writer.messages
        self.entries = writer.count
        self.next_offset = sl.next_offset
        self.last_offset = writer.last_offset  # of the last message in the frame, -1 if none
        self.skipped_aborted = counts.aborted
        self.skipped_control = counts.control
        self.errors = counts.errors
        #: The slice's last batch: nothing more comes out of its decode_chunks().
        self.final = counts.final

    @property
    def nbytes(self) -> int:
        return len(self.frame)

    @property
    def is_empty(self) -> bool:
        """Nothing for the application (no message, no error, no EOF): need not be sent."""
        return self.entries == 0


class _Counts:
    __slots__ = ("aborted", "control", "errors", "final")

    def __init__(self) -> None:
        self.aborted = 0
        self.control = 0
        self.errors = 0
        self.final = False  # set on the last pair iter_decoded() yields


def _headers_until_corrupt(buf: bytes, failure: list[CorruptRecordError]) -> Iterator[BatchHeader]:
    """Batch headers in order; an impossible entry ends the walk (nothing after it can be located) and is
    left in ``failure``."""
    try:
        yield from iter_batch_headers(buf)
    except CorruptRecordError as exc:
        failure.append(exc)


def decode_records_into(
    writer: MessageBatchWriter,
    records: bytes | memoryview,
    fetch_offset: int,
    *,
    aborted: Sequence[tuple[int, int]] = (),
    read_committed: bool = True,
    check_crcs: bool = False,
    counts: _Counts | None = None,
) -> None:
    """Decode a record set into ``writer``: the messages at or after ``fetch_offset`` the app may see.

    A batch that cannot be decoded (bad CRC with ``check_crcs``, bad compression, malformed records)
    becomes an error event at its base offset, in order, and decoding continues with the next batch.
    Control records and hidden aborted data that no later message of the record set covers end in one skip
    entry, so the application's position still moves past them (a committed offset then need not re-read
    them).
    """
    for _ in iter_decoded(records, fetch_offset, aborted=aborted, read_committed=read_committed,
                          check_crcs=check_crcs, writer=writer, counts=counts):
        pass


def iter_decoded(
    records: bytes | memoryview,
    fetch_offset: int,
    *,
    aborted: Sequence[tuple[int, int]] = (),
    read_committed: bool = True,
    check_crcs: bool = False,
    chunk_bytes: int = 0,
    eof_offset: int = -1,
    writer: MessageBatchWriter | None = None,
    counts: _Counts | None = None,
) -> Iterator[tuple[MessageBatchWriter, _Counts]]:
    """``decode_records_into`` in pieces, decoded as they are asked for: a (writer, counts) pair comes out
    once the writer holds ``chunk_bytes`` or more (0: never) and a fresh pair carries on, so the first
    messages of a large record set can leave before the rest is decompressed. The last pair, which gets
    the partition EOF when ``eof_offset`` >= 0, always comes out, even empty. ``writer`` and ``counts``
    serve as the first pair when given."""
    writer = writer if writer is not None else MessageBatchWriter()
    counts = counts if counts is not None else _Counts()
    # Headers, CRCs, decompression and the native v2 packer read the slice in place; a bytes copy is made
    # (once) only for what decodes into Python objects: legacy messages, control markers, the pure-Python packer.
    view: bytes | memoryview = records if isinstance(records, bytes) else memoryview(records).cast("B")
    copied: list[bytes] = []

    def as_bytes() -> bytes:
        if isinstance(view, bytes):
            return view
        if not copied:
            copied.append(bytes(view))
        return copied[0]

    in_place = view if _packing._native_records is not None else as_bytes()
    pending = sorted(aborted, key=lambda pair: pair[1]) if read_committed else []
    next_pending = 0
    aborted_pids: set[int] = set()
    skip: tuple[int, int] | None = None  # (last offset, leader epoch) of skipped records not yet covered
    failure: list[CorruptRecordError] = []
    for header in _headers_until_corrupt(view, failure) if len(view) else ():
        if chunk_bytes and writer.nbytes >= chunk_bytes:
            yield writer, counts  # a skip still pending stays pending: later messages may yet cover it
            writer, counts = MessageBatchWriter(), _Counts()
        if read_committed and header.is_transactional:
            while next_pending < len(pending) and pending[next_pending][1] <= header.last_offset:
                aborted_pids.add(pending[next_pending][0])
                next_pending += 1
        try:
            if header.is_control:
                counts.control += 1
                if read_committed and header.producer_id in aborted_pids:
                    decode_batch(as_bytes(), header, verify_crc=check_crcs)
                    if header.control_type() == CONTROL_ABORT:
                        aborted_pids.discard(header.producer_id)
                elif check_crcs:
                    decode_batch(as_bytes(), header, verify_crc=True)  # check.crcs covers markers too
                if header.next_offset > fetch_offset:
                    skip = (header.last_offset, header.partition_leader_epoch)
                continue
            if read_committed and header.is_transactional and header.producer_id in aborted_pids:
                counts.aborted += max(header.record_count, 0)
                if header.next_offset > fetch_offset:
                    skip = (header.last_offset, header.partition_leader_epoch)
                continue
            if header.next_offset <= fetch_offset:
                continue  # wholly before the position: nothing to decode
            if header.magic == 2:
                _pack_v2_batch(writer, in_place, header, fetch_offset, check_crcs)
            else:
                decode_batch(as_bytes(), header, verify_crc=check_crcs)
                writer.add_records(header.records, header.timestamp_type + 1, header.partition_leader_epoch,
                                   fetch_offset)
                header.records = None  # the decoded tuples are in the frame now; let them go
        except CorruptRecordError as exc:
            if skip is not None:
                writer.add_skip(*skip)
                skip = None
            writer.add_error(header.base_offset, exc.code, str(exc))
            counts.errors += 1
            continue
        if skip is not None and writer.last_offset >= skip[0]:
            skip = None  # a later message moves the position further anyway
    if skip is not None:
        writer.add_skip(*skip)
    if failure:
        exc = failure[0]
        writer.add_error(exc.offset if exc.offset is not None else fetch_offset, exc.code, str(exc))
        counts.errors += 1
    if eof_offset >= 0:
        writer.add_eof(eof_offset)
    counts.final = True
    yield writer, counts


def _pack_v2_batch(writer: MessageBatchWriter, buf: bytes, header: BatchHeader, fetch_offset: int,
                   check_crcs: bool) -> None:
    """A v2 data batch straight into the frame: its records section copied once, one index entry per record
    (no per-record tuples or key/value copies on the toppar host)."""
    section, start, end = v2_records_section(buf, header, verify_crc=check_crcs)
    fixed_timestamp = header.max_timestamp if header.timestamp_type == 1 else -1
    try:
        writer.add_v2_records(section, start, end, header.record_count, header.base_offset,
                              header.base_timestamp, fixed_timestamp, header.timestamp_type + 1,
                              header.partition_leader_epoch, fetch_offset)
    except CorruptRecordError as exc:
        if exc.offset is None:
            raise CorruptRecordError(str(exc), offset=header.base_offset) from exc
        raise
    except (IndexError, UnicodeDecodeError) as exc:
        raise CorruptRecordError(f"truncated or malformed record: {exc}", offset=header.base_offset) from exc


class SliceDecoder:
    """Toppar-side decoder: FetchedSlice → DecodedBatch, per the consumer's isolation level and CRC setting."""

    __slots__ = ("read_committed", "check_crcs")

    def __init__(self, settings: FetchSettings) -> None:
        self.read_committed = settings.read_committed
        self.check_crcs = settings.check_crcs

    def decode(self, sl: FetchedSlice) -> DecodedBatch:
        """The whole slice as one batch."""
        return next(self.decode_chunks(sl))

    def decode_chunks(self, sl: FetchedSlice, chunk_bytes: int = 0) -> Iterator[DecodedBatch]:
        """The slice as batches of about ``chunk_bytes`` (0: one batch), each decoded when asked for; the
        last one carries the EOF event, if any, and may be empty."""
        for writer, counts in iter_decoded(
            sl.records, sl.fetch_offset, aborted=sl.aborted, read_committed=self.read_committed,
            check_crcs=self.check_crcs, chunk_bytes=chunk_bytes, eof_offset=sl.eof_offset,
        ):  # fmt: skip
            yield DecodedBatch(sl, writer, counts)
