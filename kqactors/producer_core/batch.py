"""Queued messages and message batches of one partition.

Runs in: toppar hosts. Owns the two record shapes the partition core moves around: ``QueuedMsg`` (one
message waiting in the partition queue) and ``Batch`` (consecutive messages cut from the queue, sent and
possibly retried as one unit so an idempotent retry carries exactly the same sequence range).
"""

from __future__ import annotations

__all__ = ["QueuedMsg", "Batch", "BATCH_OVERHEAD", "wrap_seq"]

BATCH_OVERHEAD = 61
"""RecordBatch v2 header size; counted against batch.size before the first record."""

_SEQ_MOD = 1 << 31


def wrap_seq(seq: int) -> int:
    """Kafka sequences are non-negative int32 values that wrap to 0 after 2**31 - 1."""
    return seq % _SEQ_MOD


class QueuedMsg:
    """One message in the partition queue; ``deadline`` is a clock value (inf when no timeout)."""

    __slots__ = ("msgid", "timestamp", "key", "value", "headers", "size", "enq_time", "deadline")

    def __init__(self, msgid: int, timestamp: int, key: bytes | None, value: bytes | None,
                 headers: list[tuple[str, bytes | None]] | None, size: int, enq_time: float,
                 deadline: float) -> None:
        self.msgid = msgid
        self.timestamp = timestamp
        self.key = key
        self.value = value
        self.headers = headers
        self.size = size
        self.enq_time = enq_time
        self.deadline = deadline

    def __repr__(self) -> str:
        return f"QueuedMsg(msgid={self.msgid}, size={self.size})"


class Batch:
    """Consecutive messages sent as one RecordBatch.

    ``payload`` is the encoded RecordBatch once the actor has encoded it; it is kept across retries so a
    retry never re-encodes or recompresses. ``needs_restamp`` is set when the producer id, epoch or base
    sequence changed after encoding (KIP-360 epoch bump): the actor then patches the header and CRC.
    """

    __slots__ = ("batch_id", "msgs", "size", "retries", "backoff_until", "producer_id", "epoch",
                 "base_seq", "payload", "needs_restamp", "broker_id", "sent_at", "possibly_persisted")

    def __init__(self, batch_id: int, msgs: list[QueuedMsg], size: int) -> None:
        self.batch_id = batch_id
        self.msgs = msgs
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
    def first_msgid(self) -> int:
        return self.msgs[0].msgid

    @property
    def last_msgid(self) -> int:
        return self.msgs[-1].msgid

    @property
    def count(self) -> int:
        return len(self.msgs)

    @property
    def deadline(self) -> float:
        """The batch times out with its oldest message."""
        return self.msgs[0].deadline

    @property
    def next_seq(self) -> int:
        return wrap_seq(self.base_seq + len(self.msgs))

    def __repr__(self) -> str:
        return (f"Batch(id={self.batch_id}, msgids={self.first_msgid}..{self.last_msgid}, "
                f"seq={self.base_seq}, retries={self.retries})")
