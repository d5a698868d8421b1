"""What an error in a transactional request means: retry, find the coordinator again, abort, bump, or fatal.

Runs in: the main host (read by ``kqactors.core.producer.txn``); pure tables, no state. Owns, per request of
the transaction protocol (FindCoordinator, InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
TxnOffsetCommit, EndTxn) and for a Produce that failed inside a transaction, the actions librdkafka's
transaction manager takes for each error code, and the normalisation of the error the application sees
(both fencing codes become ``_FENCED``).

Deliberate difference from librdkafka 2.16: PRODUCER_FENCED is fatal wherever INVALID_PRODUCER_EPOCH is
(librdkafka leaves PRODUCER_FENCED from Produce and AddOffsetsToTxn abortable, and the application then
learns it is fenced from the abort's EndTxn); INTRODUCTION.md documents fencing as a fatal _FENCED at the
next produce, commit or abort, which is what this table does. TRANSACTION_ABORTABLE (KIP-890) is abortable
everywhere.
"""

from __future__ import annotations

from kqactors.errors import KafkaError

__all__ = ["RETRY", "COORDINATOR", "FATAL", "ABORTABLE", "BUMP", "classify", "normalize", "FENCING_CODES",
           "retry_backoff_ms"]

RETRY = 1
"""Send the request again (after a backoff), within the API call's time if it has one."""
COORDINATOR = 2
"""The coordinator moved or is unreachable: forget it and look it up again before retrying."""
FATAL = 4
"""The producer can no longer be used (fenced, not authorized, invalid state)."""
ABORTABLE = 8
"""The current transaction failed: the application must abort it."""
BUMP = 16
"""With ABORTABLE: the abort must also bump the producer epoch (KIP-360), the producer id lost its state."""

E = KafkaError
FENCING_CODES = frozenset({E.INVALID_PRODUCER_EPOCH, E.PRODUCER_FENCED})
_LOCAL_RETRY = frozenset({E._TRANSPORT, E._TIMED_OUT, E._TIMED_OUT_QUEUE, E._UNKNOWN_BROKER, E._DESTROY,
                          E._RESOLVE, E._ALL_BROKERS_DOWN})
_COORDINATOR_MOVED = frozenset({E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE})

_TABLES: dict[str, dict[int, int]] = {
    "FindCoordinator": {
        E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: FATAL,
        E.CLUSTER_AUTHORIZATION_FAILED: FATAL,
    },
    "InitProducerId": {
        E._UNSUPPORTED_FEATURE: FATAL,
        E.INVALID_TRANSACTION_TIMEOUT: FATAL,
        E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: FATAL,
        E.CLUSTER_AUTHORIZATION_FAILED: FATAL,
        E.INVALID_PRODUCER_EPOCH: FATAL,
        E.PRODUCER_FENCED: FATAL,
    },
    "AddPartitionsToTxn": {
        E.CONCURRENT_TRANSACTIONS: RETRY,
        E.COORDINATOR_LOAD_IN_PROGRESS: RETRY,
        E.UNKNOWN_TOPIC_OR_PART: RETRY,
        E.INVALID_PRODUCER_EPOCH: FATAL,
        E.PRODUCER_FENCED: FATAL,
        E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: FATAL,
        E.INVALID_TXN_STATE: FATAL,
        E.CLUSTER_AUTHORIZATION_FAILED: FATAL,
        E.UNKNOWN_PRODUCER_ID: ABORTABLE | BUMP,
        E.INVALID_PRODUCER_ID_MAPPING: ABORTABLE | BUMP,
    },
    "AddOffsetsToTxn": {
        E.REQUEST_TIMED_OUT: RETRY | COORDINATOR,
        E.UNKNOWN_TOPIC_OR_PART: RETRY,
        E.COORDINATOR_LOAD_IN_PROGRESS: RETRY,
        E.CONCURRENT_TRANSACTIONS: RETRY,
        E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: FATAL,
        E.CLUSTER_AUTHORIZATION_FAILED: FATAL,
        E.INVALID_PRODUCER_EPOCH: FATAL,
        E.PRODUCER_FENCED: FATAL,
        E.INVALID_TXN_STATE: FATAL,
        E.UNSUPPORTED_FOR_MESSAGE_FORMAT: FATAL,
    },
    "TxnOffsetCommit": {  # sent to the group coordinator: COORDINATOR means that one
        E.REQUEST_TIMED_OUT: RETRY | COORDINATOR,
        E.CONCURRENT_TRANSACTIONS: RETRY,
        E.COORDINATOR_LOAD_IN_PROGRESS: RETRY,
        E.UNKNOWN_TOPIC_OR_PART: RETRY,
        E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: FATAL,
        E.CLUSTER_AUTHORIZATION_FAILED: FATAL,
        E.INVALID_PRODUCER_ID_MAPPING: FATAL,
        E.INVALID_PRODUCER_EPOCH: FATAL,
        E.PRODUCER_FENCED: FATAL,
        E.INVALID_TXN_STATE: FATAL,
        E.UNSUPPORTED_FOR_MESSAGE_FORMAT: FATAL,
    },
    "EndTxn": {
        E.COORDINATOR_LOAD_IN_PROGRESS: RETRY,
        E.CONCURRENT_TRANSACTIONS: RETRY,
        E.UNKNOWN_PRODUCER_ID: ABORTABLE | BUMP,
        E.INVALID_PRODUCER_ID_MAPPING: ABORTABLE | BUMP,
        E.INVALID_PRODUCER_EPOCH: FATAL,
        E.PRODUCER_FENCED: FATAL,
        E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: FATAL,
        E.CLUSTER_AUTHORIZATION_FAILED: FATAL,
        E.INVALID_TXN_STATE: FATAL,
    },
    "Produce": {
        E.INVALID_PRODUCER_EPOCH: FATAL,
        E.PRODUCER_FENCED: FATAL,
        E.UNKNOWN_PRODUCER_ID: ABORTABLE | BUMP,
    },
}
# What an error not in a request's table means: FindCoordinator and InitProducerId keep retrying in the
# background; everything else fails the transaction.
_DEFAULTS = {"FindCoordinator": RETRY, "InitProducerId": RETRY}


def classify(request: str, code: int) -> int:
    """The actions (bit set of RETRY, COORDINATOR, FATAL, ABORTABLE, BUMP) for ``code`` answering ``request``
    (a name of the table above); 0 for no error."""
    if code == 0:
        return 0
    table = _TABLES[request]
    actions = table.get(code)
    if actions is not None:
        return actions
    if request != "Produce":
        if code in _COORDINATOR_MOVED:
            return RETRY | COORDINATOR
        if code in _LOCAL_RETRY:
            # The request may not have reached the coordinator, or the connection to it is gone.
            return RETRY | COORDINATOR if request != "FindCoordinator" else RETRY
    return _DEFAULTS.get(request, ABORTABLE)


def normalize(code: int) -> int:
    """The code the application sees: one fencing error, and queue timeouts as plain timeouts."""
    if code in FENCING_CODES:
        return E._FENCED
    if code == E._TIMED_OUT_QUEUE:
        return E._TIMED_OUT
    return code


def retry_backoff_ms(request: str, code: int, base_ms: int) -> int:
    """How long to wait before retrying ``request`` after ``code``: CONCURRENT_TRANSACTIONS (the previous
    transaction's markers are still being written) is retried quickly, as librdkafka does."""
    if code == E.CONCURRENT_TRANSACTIONS:
        return min(base_ms, 20)
    if request == "TxnOffsetCommit":
        return max(base_ms, 500)
    return base_ms
