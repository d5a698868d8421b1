"""Queue chunks and message batches of one partition.

Runs in: toppar hosts. Owns the two shapes the partition core moves around: ``Chunk`` (the still-queued
part of one PRODUCE frame: a msgid range sharing one enqueue time) and ``Batch`` (consecutive messages cut
from the queue — slices of one or more frames — sent and possibly retried as one unit so an idempotent
retry carries exactly the same sequence range). Messages are never held as one Python object each.
"""

from __future__ import annotations

__all__ = ["Chunk", "Batch", "FrameSlice", "BATCH_OVERHEAD", "wrap_seq"]

BATCH_OVERHEAD = 61
"""RecordBatch v2 header size; counted against batch.size before the first record."""

_SEQ_MOD = 1 << 31

FrameSlice = tuple[bytes, int, int]
"""(frame, start, end): packed messages ``frame[start:end]`` (layout: ``kqactors.records.packed``)."""


def wrap_seq(seq: int) -> int:
    """Kafka sequences are non-negative int32 values that wrap to 0 after 2**31 - 1."""
    return seq % _SEQ_MOD


class Chunk:
    """Queued messages of one PRODUCE frame not yet cut into a batch: ``frame[pos:end]`` holds ``count``
    messages from ``first_msgid``; ``size`` is their record size estimate; ``deadline`` a clock value
    (inf when no timeout). All of them were enqueued together, so they time out together."""

    __slots__ = ("frame", "pos", "end", "first_msgid", "count", "size", "enq_time", "deadline")

    def __init__(self, frame: bytes, pos: int, end: int, first_msgid: int, count: int, size: int,
                 enq_time: float, deadline: float) -> None:
        self.frame = frame
        self.pos = pos
        self.end = end
        self.first_msgid = first_msgid
        self.count = count
        self.size = size
        self.enq_time = enq_time
        self.deadline = deadline

    def __repr__(self) -> str:
        return f"Chunk(msgids={self.first_msgid}..{self.first_msgid + self.count - 1}, size={self.size})"


class Batch:
    """Consecutive messages sent as one RecordBatch.

    ``payload`` is the encoded RecordBatch once the actor has encoded it; it is kept across retries so a
    retry never re-encodes or recompresses. ``needs_restamp`` is set when the producer id, epoch or base
    sequence changed after encoding (KIP-360 epoch bump): the actor then patches the header and CRC.
    """

    __slots__ = ("batch_id", "slices", "first_msgid", "count", "deadline", "size", "retries", "backoff_until",
                 "producer_id", "epoch", "base_seq", "payload", "needs_restamp", "broker_id", "sent_at",
                 "possibly_persisted")

    def __init__(self, batch_id: int, slices: list[FrameSlice], first_msgid: int, count: int, size: int,
                 deadline: float) -> None:
        self.batch_id = batch_id
        self.slices: list[FrameSlice] | None = slices  # dropped once encoded (the payload is kept)
        self.first_msgid = first_msgid
        self.count = count
        self.deadline = deadline  # the batch times out with its oldest message
        self.size = size
        self.retries = 0
        self.backoff_until = 0.0
        self.producer_id = -1
        self.epoch = -1
        self.base_seq = -1
        self.payload: bytes | None = None
        self.needs_restamp = False
        self.broker_id = -1
        self.sent_at = 0.0
        self.possibly_persisted = False

    @property
    def last_msgid(self) -> int:
        return self.first_msgid + self.count - 1

    @property
    def next_seq(self) -> int:
        return wrap_seq(self.base_seq + self.count)

    def __repr__(self) -> str:
        return (f"Batch(id={self.batch_id}, msgids={self.first_msgid}..{self.last_msgid}, "
                f"seq={self.base_seq}, retries={self.retries})")
