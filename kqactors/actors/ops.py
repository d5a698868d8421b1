"""Runs in: every producer actor (main, broker/N, toppar) and the app facade. Owns the producer's op type names,
the error codes those ops carry, and helpers that build and read their payloads.

The contract these follow is docs/producer-ops.md. Payloads are small msgpack-able dicts; record bytes ride
as separate frames next to them, never inside the dict. Op types are plain strings named after librdkafka's
op types where one exists, so they read well in logs and cost nothing to compare.
"""

from __future__ import annotations

from typing import Any

from kqactors.errors import ERROR_CODES

# ---- error codes carried in payloads (ints, librdkafka's numbers) -----------------------------------------
ERR_NO_ERROR = 0
ERR__BAD_MSG = ERROR_CODES["_BAD_MSG"]
ERR__DESTROY = ERROR_CODES["_DESTROY"]
ERR__TRANSPORT = ERROR_CODES["_TRANSPORT"]
ERR__RESOLVE = ERROR_CODES["_RESOLVE"]
ERR__MSG_TIMED_OUT = ERROR_CODES["_MSG_TIMED_OUT"]
ERR__UNKNOWN_PARTITION = ERROR_CODES["_UNKNOWN_PARTITION"]
ERR__UNKNOWN_TOPIC = ERROR_CODES["_UNKNOWN_TOPIC"]
ERR__ALL_BROKERS_DOWN = ERROR_CODES["_ALL_BROKERS_DOWN"]
ERR__INVALID_ARG = ERROR_CODES["_INVALID_ARG"]
ERR__TIMED_OUT = ERROR_CODES["_TIMED_OUT"]
ERR__UNSUPPORTED_FEATURE = ERROR_CODES["_UNSUPPORTED_FEATURE"]
ERR__STATE = ERROR_CODES["_STATE"]
ERR_UNKNOWN_TOPIC_OR_PART = ERROR_CODES["UNKNOWN_TOPIC_OR_PART"]
ERR_LEADER_NOT_AVAILABLE = ERROR_CODES["LEADER_NOT_AVAILABLE"]
ERR_NOT_LEADER_FOR_PARTITION = ERROR_CODES["NOT_LEADER_FOR_PARTITION"]
ERR_REQUEST_TIMED_OUT = ERROR_CODES["REQUEST_TIMED_OUT"]
ERR_UNSUPPORTED_VERSION = ERROR_CODES["UNSUPPORTED_VERSION"]
ERR_FENCED_LEADER_EPOCH = ERROR_CODES["FENCED_LEADER_EPOCH"]
ERR_UNKNOWN_LEADER_EPOCH = ERROR_CODES["UNKNOWN_LEADER_EPOCH"]
ERR_COORDINATOR_NOT_AVAILABLE = ERROR_CODES["COORDINATOR_NOT_AVAILABLE"]
ERR_NOT_COORDINATOR = ERROR_CODES["NOT_COORDINATOR"]
ERR_COORDINATOR_LOAD_IN_PROGRESS = ERROR_CODES["COORDINATOR_LOAD_IN_PROGRESS"]

# Partition-level metadata errors that mean "the leader is not known right now, refresh soon".
LEADER_ERRORS = frozenset({ERR_LEADER_NOT_AVAILABLE, ERR_NOT_LEADER_FOR_PARTITION, ERR_FENCED_LEADER_EPOCH,
                           ERR_UNKNOWN_LEADER_EPOCH, ERROR_CODES["REPLICA_NOT_AVAILABLE"]})

# ---- op types ----------------------------------------------------------------------------------------------
# app → toppar
PRODUCE = "PRODUCE"
# toppar → app
DR = "DR"
# main → toppar
LEADER = "LEADER"
PID = "PID"
# toppar → main: announce / retire a toppar (TOPPAR_JOIN is a request; its reply carries leader + PID)
TOPPAR_JOIN = "TOPPAR_JOIN"
TOPPAR_LEAVE = "TOPPAR_LEAVE"
# toppar → main
METADATA_REFRESH = "METADATA_REFRESH"
PID_BUMP = "PID_BUMP"
# toppar → main: no request of this partition is in flight any more (answer to a PID op with drain=True)
DRAINED = "DRAINED"
# toppar → broker/N, and back
XMIT = "XMIT"
XMIT_RESULT = "XMIT_RESULT"
# app ↔ main
METADATA = "METADATA"
TOPIC_PARTITIONS = "TOPIC_PARTITIONS"
# any → main → app
ERR = "ERR"
# main → broker/N: a partition's leadership moved to / away from this broker (the fetch loop uses these)
PARTITION_JOIN = "PARTITION_JOIN"
PARTITION_LEAVE = "PARTITION_LEAVE"
# main → broker/N: start / stop / change address; broker/N → main: state changes and request results
BROKER_UPDATE = "BROKER_UPDATE"
BROKER_STATE = "BROKER_STATE"
STATS = "STATS"  # a request for an actor's statistics snapshot; also the assembled snapshot sent to the app
# any → broker/N: a generic request of a registered request kind (Metadata, InitProducerId, ...)
REQUEST = "REQUEST"
# broker/N → requester: its one result
RESPONSE = "RESPONSE"
# main → broker/N and main → its owner: shut down
TERMINATE = "TERMINATE"


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


def pid_payload(producer_id: int, epoch: int, error_code: int = ERR_NO_ERROR) -> dict[str, Any]:
    return {"producer_id": producer_id, "epoch": epoch, "error_code": error_code}


def metadata_refresh_payload(topic: str, reason: str) -> dict[str, Any]:
    return {"topic": topic, "reason": reason}


def topic_partitions_payload(topic: str, partition_count: int, error_code: int) -> dict[str, Any]:
    return {"topic": topic, "partition_count": partition_count, "error_code": error_code}


def partition_membership_payload(topic: str, partition: int, leader_epoch: int) -> dict[str, Any]:
    """PARTITION_JOIN / PARTITION_LEAVE payload (main → broker/N)."""
    return {"topic": topic, "partition": partition, "leader_epoch": leader_epoch}


def err_payload(code: int, reason: str, fatal: bool = False) -> dict[str, Any]:
    return {"code": code, "reason": reason, "fatal": fatal}


def broker_name(node_id: int) -> str:
    """Actor name of the broker actor for a node id (bootstrap brokers get negative ids)."""
    return f"broker/{node_id}"


def toppar_name(topic: str, partition: int) -> str:
    return f"toppar/{topic}/{partition}"
