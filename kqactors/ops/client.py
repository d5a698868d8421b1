"""Ops every client shares: the main actor, the broker actors and the app's requests to them.

Runs in: every process (names and payload shapes only; the contract is docs/producer-ops.md and
docs/consumer-ops.md). Payloads are small msgpack-able dicts; record bytes ride as separate frames next to
them, never inside the dict. Op types are plain strings named after librdkafka's op types where one exists,
so they read well in logs and cost nothing to compare. Error codes in payloads are librdkafka's numbers
(``KafkaError.<NAME>``). Shutdown is the runtime's own ``kqactors.runtime.op.TERMINATE``.
"""

from __future__ import annotations

from typing import Any

from kqactors.errors import KafkaError

# app ↔ main: cluster metadata (a request; the reply is a wire snapshot) and one topic's partition count
METADATA = "METADATA"
TOPIC_PARTITIONS = "TOPIC_PARTITIONS"
# any actor → main: refresh a topic's metadata soon (a leader moved or is unknown)
METADATA_REFRESH = "METADATA_REFRESH"
# any → main → app: a client-level error (error_cb), possibly fatal
ERR = "ERR"
# main → broker/N: a partition's leadership moved to / away from this broker (the fetch loop uses these)
PARTITION_JOIN = "PARTITION_JOIN"
PARTITION_LEAVE = "PARTITION_LEAVE"
# main → broker/N: start / stop / change address; broker/N → main: state changes
BROKER_UPDATE = "BROKER_UPDATE"
BROKER_STATE = "BROKER_STATE"
# a request for an actor's statistics snapshot; also the assembled snapshot sent to the app
STATS = "STATS"
# any → broker/N: a generic request of a kind in kqactors.protocol.requests (Metadata, InitProducerId, ...)
REQUEST = "REQUEST"
# broker/N → requester: its one result
RESPONSE = "RESPONSE"
# any actor host → app: one librdkafka-style log record (the app emits it through its logger from poll())
LOG = "LOG"
# broker/N → app: the broker throttled this client (throttle_time_ms of a response); throttle_cb from poll()
THROTTLE = "THROTTLE"


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


def log_payload(level: int, fac: str, message: str) -> dict[str, Any]:
    """LOG payload: a syslog ``level`` (0..7), librdkafka's facility name (BROKER, METADATA, ...) and the
    text; the app adds the client's name (``rdkafka#producer-1``) when it emits the record."""
    return {"level": level, "fac": fac, "message": message}


def throttle_payload(broker_name: str, broker_id: int, throttle_time_ms: int) -> dict[str, Any]:
    """THROTTLE payload: ``broker_name`` is the broker's "host:port" (librdkafka's nodename)."""
    return {"broker_name": broker_name, "broker_id": broker_id, "throttle_time_ms": throttle_time_ms}


# ---- a request's reply as the Kafka layer reads it ------------------------------------------------------------

def runtime_failure_code(runtime_code: str, otherwise: int = KafkaError._TRANSPORT) -> int:
    """The librdkafka code for a request the runtime failed (``OpError.code``, kqactors.runtime.ErrorCode): no
    reply in time is _TIMED_OUT; anything else (the actor or its host is gone) is ``otherwise``."""
    return KafkaError._TIMED_OUT if runtime_code == "TIMED_OUT" else otherwise


def unpack_response(reply: Any) -> tuple[int, str, Any]:
    """(error_code, reason, result) of a broker actor's RESPONSE reply, or of the runtime's error reply to it."""
    if reply.error is not None:
        return runtime_failure_code(reply.error.code), f"{reply.error.code}: {reply.error.message}", None
    payload = reply.payload or {}
    return int(payload.get("error_code", 0)), payload.get("reason", ""), payload.get("result")
