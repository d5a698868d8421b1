"""Ops of the produce path: app ↔ toppar ↔ broker/N, and toppar ↔ main (leaders, producer ids).

Runs in: the app facade, the toppar actors, the broker actors and main (names and payload shapes only;
the contract is docs/producer-ops.md). The encoded RecordBatch of an XMIT is its single frame.
"""

from __future__ import annotations

from typing import Any

from kqactors.errors import KafkaError

# app → toppar: packed messages (frames[0]); FLUSH: send what lingers now; PURGE: fail queued (and in-flight)
PRODUCE = "PRODUCE"
FLUSH = "FLUSH"
PURGE = "PURGE"
# toppar → app: delivery-report rows
DR = "DR"
# toppar → app: the toppar actor (re)started on its host with an empty queue
RESTARTED = "TOPPAR_RESTARTED"
# toppar → app (idempotent, not transactional): the sequences of batches as they are first sent (or renumbered),
# {topic, partition, rows: [[first_msgid, count, producer_id, epoch, base_seq]]}; the app keeps them until the
# messages' reports, so a toppar restarted after its host died resends them with the same sequences
SEQ = "TOPPAR_SEQ"
# app → toppar: replaces TOPPAR_RESTARTED for an idempotent toppar whose sequences the app knows:
# {producer_id, epoch, next_seq, batches: [[first_msgid, count, base_seq]]} — resend those batches exactly so the
# broker deduplicates what it already has, number what follows from next_seq
RECOVER = "TOPPAR_RECOVER"
# app → toppar: the broker actors named died with main's host: {brokers: [node ids]}; the batches they had
# accepted will never be answered, so they fail as a lost connection (_TRANSPORT, possibly persisted) and are
# retried (idempotent: with the same sequences, which the restarted main keeps valid)
BROKERS_DOWN = "TOPPAR_BROKERS_DOWN"
# main → toppar: the partition's leader; the idempotent producer's id and epoch; a fatal producer error
LEADER = "LEADER"
PID = "PID"
FATAL = "FATAL"
# toppar → main: announce / retire a toppar (TOPPAR_JOIN is a request; its reply carries leader + PID)
TOPPAR_JOIN = "TOPPAR_JOIN"
TOPPAR_LEAVE = "TOPPAR_LEAVE"
# toppar → main: the idempotent sequence broke, bump the epoch
PID_BUMP = "PID_BUMP"
# toppar → main: no request of this partition is in flight any more (answer to a PID op with drain=True)
DRAINED = "DRAINED"
# toppar → broker/N, and back: one encoded batch and its one result
XMIT = "XMIT"
XMIT_RESULT = "XMIT_RESULT"
# toppar → itself (timer): linger, backoff or a timeout is due
TOPPAR_WAKE = "TOPPAR_WAKE"

# ---- transactions (transactional.id set; docs/producer-ops.md "Transactions") ----
# app → main (request): one step of a transactional API call, {step, timeout_ms?, ...}; the reply
# {error, state, txn_seq} comes when the step is done (or its timeout passed: a retriable _TIMED_OUT)
TXN_API = "TXN_API"
# toppar → main (request): this partition has data to send in the current transaction; the reply
# {error_code, producer_id, epoch} comes once the partition is registered (error_code != 0: fail the data)
TXN_ADD_PARTITION = "TXN_ADD_PARTITION"
# toppar → main: a batch failed for good inside a transaction: {topic, partition, code, reason}
TXN_PRODUCE_FAILED = "TXN_PRODUCE_FAILED"
# main → app: the transaction failed in the background: {state, txn_seq, error}
TXN_STATE = "TXN_STATE"


def xmit_payload(topic: str, partition: int, batch_id: int, toppar_version: int, record_count: int,
                 acks: int, timeout_ms: int, deadline_ms: int | None = None) -> dict[str, Any]:
    """XMIT payload; the encoded RecordBatch is the op's single frame. `timeout_ms` is the broker-side ack
    timeout (request.timeout.ms); `deadline_ms` (wall clock, ms) is the first message's message.timeout.ms
    expiry: the local timeout is min(socket.timeout.ms, time left), and expiry reports _MSG_TIMED_OUT."""
    payload: dict[str, Any] = {"topic": topic, "partition": partition, "batch_id": batch_id,
                               "toppar_version": toppar_version, "record_count": record_count,
                               "acks": acks, "timeout_ms": timeout_ms}
    if deadline_ms is not None:
        payload["deadline_ms"] = deadline_ms
    return payload


def xmit_result_payload(topic: str, partition: int, batch_id: int, toppar_version: int, error_code: int,
                        base_offset: int = -1, log_append_time: int = -1, log_start_offset: int = -1,
                        record_errors: list[list[Any]] | None = None, error_message: str | None = None,
                        broker_id: int = -1, sent: bool = True) -> dict[str, Any]:
    """XMIT_RESULT payload: exactly one per XMIT. `sent: False` (only present then) says the batch never
    left the client, so a retry cannot duplicate it."""
    payload: dict[str, Any] = {"topic": topic, "partition": partition, "batch_id": batch_id,
                               "toppar_version": toppar_version, "error_code": error_code,
                               "base_offset": base_offset, "log_append_time": log_append_time,
                               "log_start_offset": log_start_offset, "broker_id": broker_id}
    if record_errors:
        payload["record_errors"] = record_errors
    if error_message:
        payload["error_message"] = error_message
    if not sent:
        payload["sent"] = False
    return payload


def leader_payload(topic: str, partition: int, broker_id: int, leader_epoch: int) -> dict[str, Any]:
    """LEADER payload (main → toppar); broker_id -1 means no leader known right now."""
    return {"topic": topic, "partition": partition, "broker_id": broker_id, "leader_epoch": leader_epoch}


def pid_payload(producer_id: int, epoch: int, error_code: int = KafkaError.NO_ERROR) -> dict[str, Any]:
    return {"producer_id": producer_id, "epoch": epoch, "error_code": error_code}


def txn_api_payload(step: str, timeout_ms: int | None = None, **args: Any) -> dict[str, Any]:
    """TXN_API payload: ``step`` is one of kqactors.core.producer.txn_states.STEPS; ``timeout_ms`` None waits
    as long as the step takes; ``args`` are the step's own (send_offsets: offsets, group; commit: dr_fails)."""
    return {"step": step, "timeout_ms": timeout_ms, **args}


def txn_error_to_wire(error: KafkaError | None) -> list[Any] | None:
    """A KafkaError with its transaction flags, as TXN_API replies and TXN_STATE carry it."""
    return None if error is None else list(error.to_tuple())


def txn_error_from_wire(data: Any) -> KafkaError | None:
    return None if not data else KafkaError.from_tuple(data)


def toppar_name(topic: str, partition: int) -> str:
    return f"toppar/{topic}/{partition}"
