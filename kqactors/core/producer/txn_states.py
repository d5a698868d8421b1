"""The transaction manager's states, their transitions and the actions it asks its actor to execute.

Runs in: the main host (with ``kqactors.core.producer.txn``); plain data, no logic beyond the transition table.
Owns librdkafka's transaction state names (as librdkafka prints them), which state may be entered from which
(rd_kafka_txn_state_transition_is_valid), the application's API steps, and the action types.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from kqactors.core.producer.txn_errors import ABORTABLE, FATAL, RETRY
from kqactors.errors import KafkaError

__all__ = ["TxnState", "ENTERED_FROM", "STEPS", "SendRequest", "ApiResult", "SetPid", "Grant", "Refuse",
           "PurgeQueued", "Fatal", "StateChanged", "Action", "flagged"]

STEPS = ("init", "ack_init", "begin", "send_offsets", "begin_commit", "commit", "ack_commit", "begin_abort",
         "abort", "ack_abort")
"""The application's API calls as librdkafka splits them into steps (the app flushes between commit steps)."""


class TxnState(str, Enum):
    """librdkafka's transaction states; the value is the name librdkafka prints."""

    INIT = "Init"
    WAIT_PID = "WaitPID"
    READY_NOT_ACKED = "ReadyNotAcked"
    READY = "Ready"
    IN_TRANSACTION = "InTransaction"
    BEGIN_COMMIT = "BeginCommit"
    COMMITTING = "CommittingTransaction"
    COMMIT_NOT_ACKED = "CommitNotAcked"
    BEGIN_ABORT = "BeginAbort"
    ABORTING = "AbortingTransaction"
    ABORT_NOT_ACKED = "AbortedNotAcked"
    ABORTABLE_ERROR = "AbortableError"
    FATAL_ERROR = "FatalError"


S = TxnState
# new state → the states it may be entered from (librdkafka's rd_kafka_txn_state_transition_is_valid)
ENTERED_FROM: dict[TxnState, frozenset[TxnState]] = {
    S.INIT: frozenset(),
    S.WAIT_PID: frozenset({S.INIT}),
    S.READY_NOT_ACKED: frozenset({S.WAIT_PID}),
    S.READY: frozenset({S.READY_NOT_ACKED, S.COMMIT_NOT_ACKED, S.ABORT_NOT_ACKED}),
    S.IN_TRANSACTION: frozenset({S.READY}),
    S.BEGIN_COMMIT: frozenset({S.IN_TRANSACTION}),
    S.COMMITTING: frozenset({S.BEGIN_COMMIT}),
    S.COMMIT_NOT_ACKED: frozenset({S.BEGIN_COMMIT, S.COMMITTING}),
    S.BEGIN_ABORT: frozenset({S.IN_TRANSACTION, S.ABORTING, S.ABORTABLE_ERROR}),
    S.ABORTING: frozenset({S.BEGIN_ABORT}),
    S.ABORT_NOT_ACKED: frozenset({S.BEGIN_ABORT, S.ABORTING}),
    S.ABORTABLE_ERROR: frozenset({S.IN_TRANSACTION, S.BEGIN_COMMIT, S.COMMITTING}),
}


# ---- actions -------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SendRequest:
    """Send request kind ``kind`` (``txn:<Api>`` in kqactors.protocol.requests) with ``args`` to broker
    ``broker`` (None: any broker); answer with ``on_response(request_id, ...)``."""

    request_id: int
    kind: str
    args: dict[str, Any]
    broker: int | None
    timeout_ms: int


@dataclass(frozen=True)
class ApiResult:
    """The answer to every pending call of API step ``step``: None is success."""

    step: str
    error: KafkaError | None


@dataclass(frozen=True)
class SetPid:
    """The producer id/epoch every partition stamps from now on (-1/-1: none, hold sending)."""

    producer_id: int
    epoch: int


@dataclass(frozen=True)
class Grant:
    """These partitions are registered in the current transaction: their data may be sent."""

    partitions: tuple[tuple[str, int], ...]
    producer_id: int
    epoch: int


@dataclass(frozen=True)
class Refuse:
    """These partitions' data cannot join a transaction now: fail what they queued with ``code``."""

    partitions: tuple[tuple[str, int], ...]
    code: int
    reason: str


@dataclass(frozen=True)
class PurgeQueued:
    """The transaction failed: fail every message still queued (not the in-flight ones), _PURGE_QUEUE."""

    reason: str


@dataclass(frozen=True)
class Fatal:
    """The producer hit a fatal error (raised once)."""

    error: KafkaError


@dataclass(frozen=True)
class StateChanged:
    """The transaction failed in the background (AbortableError, FatalError): the app stops producing."""

    state: TxnState
    txn_seq: int
    error: KafkaError | None


Action = Any




def flagged(code: int, reason: str, actions: int) -> KafkaError:
    """A KafkaError carrying librdkafka's error class for ``actions`` (kqactors.core.producer.txn_errors)."""
    return KafkaError(code, reason, fatal=bool(actions & FATAL), retriable=bool(actions & RETRY)
                      and not actions & (FATAL | ABORTABLE), txn_requires_abort=bool(actions & ABORTABLE)
                      and not actions & FATAL)
