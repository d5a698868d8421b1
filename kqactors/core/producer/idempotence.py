"""Idempotent-producer state of one partition: sequences, acks and the verdict on Produce errors.

Runs in: toppar hosts. Owns the producer id/epoch this partition stamps on batches, the next sequence to
assign, the next sequence expected to be acknowledged (``next_ack_seq``) or to fail (``next_err_seq``),
and the idempotence-specific reading of OUT_OF_ORDER_SEQUENCE_NUMBER, DUPLICATE_SEQUENCE_NUMBER and
UNKNOWN_PRODUCER_ID (librdkafka's behaviour, KIP-360 epoch bumps instead of fatal errors where safe).

A retriable failure never moves the ack sequence (librdkafka: the batch is retried with its sequences after a
drain; the broker answers DUPLICATE_SEQUENCE_NUMBER if it had written it). A later batch may still succeed
while an earlier one waits to be retried (the earlier one was written after all, or a lenient broker such as
the librdkafka mock cluster accepts the gap); the partition tells ``on_success`` so (``after_gap``), which is
then no desynchronisation, and the earlier batch's late success does not move the ack sequence back.

Sequences are assigned when a batch is cut, not derived from msgids, so messages that time out or are
purged before they were ever sent leave no gap. A gap appears only when a batch that holds sequences is
dropped without being acknowledged; the partition then asks for a drain + epoch bump, after which all
sequences restart at 0.
"""

from __future__ import annotations

from dataclasses import dataclass

from kqactors.core.producer.batch import Batch, wrap_seq
from kqactors.core.producer.classify import (
    NOT_PERSISTED,
    PERMANENT,
    POSSIBLY_PERSISTED,
    RETRY,
    ProduceErrorAction,
)
from kqactors.errors import KafkaError

__all__ = ["IdempotenceState", "IdempotentVerdict"]


def _behind(seq: int, reference: int) -> bool:
    """``seq`` comes before ``reference`` in the wrapping sequence space (at most 2**30 before it)."""
    return wrap_seq(seq - reference) >= (1 << 30)


@dataclass
class IdempotentVerdict:
    """What to do with a failed batch after the idempotence rules have been applied.

    ``action`` replaces the table action; ``error`` replaces the error code (0 = treat as delivered);
    ``bump_reason`` asks for a drain + epoch bump; ``fatal_reason`` raises a fatal producer error.
    """

    action: ProduceErrorAction
    error: int
    bump_reason: str | None = None
    fatal_reason: str | None = None
    fatal_code: int = 0


class IdempotenceState:
    """Sequence bookkeeping for one partition under one producer id and epoch."""

    __slots__ = ("producer_id", "epoch", "next_seq", "next_ack_seq", "next_err_seq", "gapless", "transactional")

    def __init__(self, gapless: bool = False, transactional: bool = False) -> None:
        self.producer_id = -1
        self.epoch = -1
        self.next_seq = 0
        self.next_ack_seq = 0
        self.next_err_seq = 0
        self.gapless = gapless
        #: inside a transaction a lost producer id fails the transaction (the abort bumps the epoch) instead of
        #: being retried under a bumped epoch; and a permanent failure is the transaction's, not gap-less's
        self.transactional = transactional

    @property
    def valid(self) -> bool:
        return self.producer_id >= 0

    def reset(self, producer_id: int, epoch: int) -> bool:
        """Adopt a producer id/epoch; returns True when it differs (sequences restart at 0)."""
        if producer_id == self.producer_id and epoch == self.epoch:
            return False
        self.producer_id = producer_id
        self.epoch = epoch
        self.next_seq = 0
        self.next_ack_seq = 0
        self.next_err_seq = 0
        return True

    def stamp(self, batch: Batch) -> None:
        """Give ``batch`` the current identity and the next sequence range."""
        if batch.payload is not None and (batch.producer_id != self.producer_id or batch.epoch != self.epoch
                                          or batch.base_seq != self.next_seq):
            batch.needs_restamp = True
        batch.producer_id = self.producer_id
        batch.epoch = self.epoch
        batch.base_seq = self.next_seq
        self.next_seq = wrap_seq(self.next_seq + batch.count)

    def same_identity(self, batch: Batch) -> bool:
        return batch.producer_id == self.producer_id and batch.epoch == self.epoch

    def on_success(self, batch: Batch, after_gap: bool = False) -> str | None:
        """Advance the ack sequence; returns a fatal reason if the success contradicts an expected error.

        ``after_gap``: messages before this batch are not acknowledged (waiting to be retried, or failed), so
        a success where an error was expected is explained by them, not a desynchronisation (librdkafka skips
        the check then too). A success behind the ack sequence is an earlier batch's retry accepted after later
        ones (written once: the broker kept it or deduplicated it); the ack sequence stays where it is.
        """
        next_seq = batch.next_seq
        if _behind(batch.base_seq, self.next_ack_seq):
            return None
        fatal = None
        if not after_gap and batch.base_seq != self.next_ack_seq and batch.base_seq == self.next_err_seq \
                and self.next_err_seq != self.next_ack_seq:
            fatal = (f"batch with base sequence {batch.base_seq} succeeded while an error was expected "
                     f"(next ack sequence {self.next_ack_seq})")
            self.next_err_seq = next_seq
        if self.next_err_seq == self.next_ack_seq:
            self.next_err_seq = next_seq
        self.next_ack_seq = next_seq
        if _behind(self.next_err_seq, self.next_ack_seq):
            # an error expected before what the broker has now acknowledged can no longer come
            self.next_err_seq = next_seq
        return fatal

    def on_error(self, batch: Batch, error: int, action: ProduceErrorAction,
                 after_gap: bool = False) -> IdempotentVerdict:
        """Refine the table ``action`` for a failed batch and update the ack/err sequences (``after_gap`` as
        for ``on_success``, used when a duplicate counts as a success)."""
        verdict = IdempotentVerdict(action, error)
        update_ack = False
        update_err = True
        if not self.same_identity(batch):
            # The identity changed while this batch was out: nothing can be said about its fate.
            verdict.action = ProduceErrorAction(PERMANENT | POSSIBLY_PERSISTED, False)
            update_err = False
        elif error == KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER:
            distance = wrap_seq(batch.base_seq - self.next_ack_seq)
            if distance == 0:
                verdict.fatal_code = error
                verdict.fatal_reason = (f"sequence desynchronised with the broker at head-of-line "
                                        f"base sequence {batch.base_seq}")
                verdict.action = ProduceErrorAction(PERMANENT | POSSIBLY_PERSISTED, False)
            elif distance < (1 << 30):
                # An earlier batch failed; this one is safe to resend after drain + epoch bump.
                verdict.action = ProduceErrorAction(RETRY | NOT_PERSISTED, False)
                verdict.bump_reason = "skipped sequence numbers"
            else:
                verdict.fatal_code = error
                verdict.fatal_reason = (f"rewound sequence: base sequence {batch.base_seq} is before "
                                        f"next ack sequence {self.next_ack_seq}")
                verdict.action = ProduceErrorAction(PERMANENT | POSSIBLY_PERSISTED, False)
                update_err = False
        elif error == KafkaError.DUPLICATE_SEQUENCE_NUMBER:
            # A retry of something the broker already has: delivered (offset unknown).
            verdict.error = 0
            verdict.action = ProduceErrorAction(0, False)
            self.on_success(batch, after_gap)
            return verdict
        elif error == KafkaError.UNKNOWN_PRODUCER_ID:
            if self.transactional:
                verdict.action = ProduceErrorAction(PERMANENT | NOT_PERSISTED, False)
                verdict.bump_reason = "unknown producer id"
            elif batch.retries == 0 and self.next_err_seq == batch.base_seq:
                verdict.action = ProduceErrorAction(RETRY | NOT_PERSISTED, False)
                verdict.bump_reason = "unknown producer id"
            else:
                verdict.fatal_code = error
                verdict.fatal_reason = ("unknown producer id for a batch that was retried or follows "
                                        "unacknowledged batches: cannot retry without duplicates or reordering")
                verdict.action = ProduceErrorAction(PERMANENT | POSSIBLY_PERSISTED, False)
        elif action.retriable:
            # Retried with the same sequences after a drain, possibly persisted or not (librdkafka): a broker
            # that wrote it answers the retry DUPLICATE_SEQUENCE_NUMBER; batches after it that fail
            # OUT_OF_ORDER_SEQUENCE_NUMBER meanwhile are then behind an error, not at the head of line.
            update_ack = False
        if verdict.action.flags & PERMANENT and verdict.fatal_reason is None and verdict.error:
            if self.gapless and not self.transactional:
                verdict.fatal_code = KafkaError._GAPLESS_GUARANTEE
                verdict.fatal_reason = f"batch failed with error {error}: gap-less guarantee cannot be kept"
            else:
                verdict.bump_reason = "message sequence gap"
            update_ack = False
        next_seq = batch.next_seq
        if update_ack:
            self.next_ack_seq = next_seq
        if update_err:
            self.next_err_seq = next_seq
        return verdict
