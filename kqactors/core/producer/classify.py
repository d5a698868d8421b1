"""Classification of Produce errors into actions.

Runs in: toppar hosts (pure function, no state). Owns the decision table that says, for every error a
Produce result can carry, whether the batch is retried, whether metadata must be refreshed first, whether
the failure is permanent (the messages get a delivery report with that error), and whether the messages
may already be in the log (possibly persisted). The facts follow librdkafka's Produce error handling;
idempotence-specific codes are refined by ``idempotence.IdempotenceState`` on top of this table.
"""

from __future__ import annotations

from dataclasses import dataclass

from kqactors.errors import ERROR_CODES, KafkaError

__all__ = [
    "RETRY",
    "REFRESH",
    "PERMANENT",
    "POSSIBLY_PERSISTED",
    "NOT_PERSISTED",
    "ProduceErrorAction",
    "classify_produce_error",
]


RETRY = 1
"""Put the batch back in front of the partition queue and send it again after a backoff."""
REFRESH = 2
"""Ask ``main`` for fresh metadata (leader moved or unknown); implies RETRY."""
PERMANENT = 4
"""Fail the batch: every message gets a delivery report with the error."""
POSSIBLY_PERSISTED = 8
"""The broker may have written the batch (request sent, answer lost or timed out)."""
NOT_PERSISTED = 16
"""The broker certainly did not write the batch."""


@dataclass(frozen=True)
class ProduceErrorAction:
    """Actions for one error code; ``count_retry`` says whether a retry uses up one of ``retries``."""

    flags: int
    count_retry: bool

    @property
    def retriable(self) -> bool:
        return bool(self.flags & (RETRY | REFRESH)) and not self.flags & PERMANENT


def _build_table() -> dict[int, int]:
    table: dict[int, int] = {}

    def put(flags: int, *names: str) -> None:
        for name in names:
            table[ERROR_CODES[name]] = flags

    # Stale metadata: the request was rejected, a refresh finds the new leader; retry is free.
    put(REFRESH | NOT_PERSISTED, "LEADER_NOT_AVAILABLE", "NOT_LEADER_FOR_PARTITION", "BROKER_NOT_AVAILABLE",
        "REPLICA_NOT_AVAILABLE", "COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR", "_WAIT_COORD",
        "_DESTROY_BROKER", "UNKNOWN_TOPIC_OR_PART", "FENCED_LEADER_EPOCH", "UNKNOWN_LEADER_EPOCH")
    # Connection lost after the request may have been written: refresh, and the retry counts.
    put(REFRESH | POSSIBLY_PERSISTED, "_TRANSPORT")
    put(REFRESH | RETRY | NOT_PERSISTED, "KAFKA_STORAGE_ERROR")
    # Temporary broker-side conditions.
    put(RETRY | POSSIBLY_PERSISTED, "_SSL", "_TIMED_OUT", "REQUEST_TIMED_OUT",
        "NOT_ENOUGH_REPLICAS_AFTER_APPEND", "NETWORK_EXCEPTION")
    put(RETRY | NOT_PERSISTED, "NOT_ENOUGH_REPLICAS", "INVALID_MSG", "_TIMED_OUT_QUEUE", "_RETRY",
        "COORDINATOR_LOAD_IN_PROGRESS")
    # Permanent, but the broker may have the data.
    put(PERMANENT | POSSIBLY_PERSISTED, "_MSG_TIMED_OUT", "_PURGE_INFLIGHT", "_BAD_MSG",
        "OUT_OF_ORDER_SEQUENCE_NUMBER", "DUPLICATE_SEQUENCE_NUMBER")
    # Explicitly permanent (everything unknown is too, see classify_produce_error).
    put(PERMANENT | NOT_PERSISTED, "TOPIC_AUTHORIZATION_FAILED", "UNKNOWN_PRODUCER_ID",
        "INVALID_PRODUCER_EPOCH", "_PURGE_QUEUE", "_DESTROY", "MSG_SIZE_TOO_LARGE", "RECORD_LIST_TOO_LARGE",
        "INVALID_MSG_SIZE", "INVALID_REQUIRED_ACKS", "UNSUPPORTED_FOR_MESSAGE_FORMAT", "CLUSTER_AUTHORIZATION_FAILED")
    return table


_TABLE = _build_table()
# REFRESH errors whose retry still counts against ``retries`` (the request may have reached the broker).
_REFRESH_COUNTED = frozenset({KafkaError._TRANSPORT, KafkaError.KAFKA_STORAGE_ERROR})
_DEFAULT = PERMANENT | NOT_PERSISTED


def classify_produce_error(code: int, request_sent: bool = True) -> ProduceErrorAction:
    """Actions for a failed Produce of one batch.

    ``request_sent`` False (the request never left the client) makes any retry free and the messages
    certainly not persisted.
    """
    flags = _TABLE.get(code, _DEFAULT)
    count_retry = True
    if flags & REFRESH and code not in _REFRESH_COUNTED:
        count_retry = False
    if not request_sent:
        count_retry = False
        if flags & (RETRY | REFRESH):
            flags = (flags & ~POSSIBLY_PERSISTED) | NOT_PERSISTED
    if flags & (RETRY | REFRESH) and not count_retry:
        flags = (flags & ~POSSIBLY_PERSISTED) | NOT_PERSISTED
    return ProduceErrorAction(flags, count_retry)
