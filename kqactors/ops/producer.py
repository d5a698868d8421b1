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


def toppar_name(topic: str, partition: int) -> str:
    return f"toppar/{topic}/{partition}"
