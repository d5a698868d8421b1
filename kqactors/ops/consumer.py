"""Op types and payloads of the consumer's fetch path (app ↔ ctoppar ↔ the broker actor's fetch source).

Runs in: every process of a consumer (imported by the app facade, the ctoppar actor and the broker actor's
fetch source). Owns the names and payload shapes only; the contract is docs/consumer-ops.md.

Versions: every FETCH_START carries the partition's version from the app's PositionTable. The ctoppar and the
broker's FetchPlanner drop anything older, and the app drops batches fetched at an older version.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "FETCH_START", "FETCH_STOP", "CREDIT", "PREFETCH_LIMITS", "CTOPPAR_READY", "CONSUMER_BATCH",
    "BROKER_FETCH_START", "BROKER_FETCH_STOP", "FETCH_FLOW", "FETCHED", "FETCH_ERROR", "FETCH_POSITION",
    "FETCH_PREFERRED", "FETCH_REVERT", "ctoppar_name", "fetch_start_payload",
]

# app → ctoppar: (re)start fetching at ``offset`` (absolute or logical) for ``version``; also seek/resume.
FETCH_START = "C_FETCH_START"
# app → ctoppar: stop fetching (unassign, pause); data of older versions is dropped.
FETCH_STOP = "C_FETCH_STOP"
# app → ctoppar: the app consumed this much of what it was sent at ``version`` (prefetch credit).
CREDIT = "C_CREDIT"
# app → ctoppar: new per-partition prefetch limits (the assignment grew or shrank).
PREFETCH_LIMITS = "C_PREFETCH_LIMITS"
# ctoppar → app: the actor (re)started on its host; a restarted one needs its FETCH_START again.
CTOPPAR_READY = "C_READY"
# ctoppar → app: one decoded frame (consumer_core.packing layout) of messages/errors/EOF, as frames[0].
CONSUMER_BATCH = "C_BATCH"

# ctoppar → broker/N: begin / move / end fetching a partition; FETCH_FLOW opens or closes prefetch.
BROKER_FETCH_START = "B_FETCH_START"
BROKER_FETCH_STOP = "B_FETCH_STOP"
FETCH_FLOW = "B_FETCH_FLOW"
# broker/N → ctoppar: a FetchedSlice (payload) with its raw records as frames[0].
FETCHED = "B_FETCHED"
# broker/N → ctoppar: a PartitionError for the application, in order with the FETCHED around it.
FETCH_ERROR = "B_FETCH_ERROR"
# broker/N → ctoppar: the fetch position was set by the broker (logical offset or offset reset resolved).
FETCH_POSITION = "B_FETCH_POSITION"
# broker/N → ctoppar: KIP-392, the broker names a preferred read replica {version, broker_id}: fetch there.
FETCH_PREFERRED = "B_FETCH_PREFERRED"
# broker/N → ctoppar: the follower it fetches from cannot serve the partition {version, code}: back to the leader.
FETCH_REVERT = "B_FETCH_REVERT"
# ctoppar → main (request): KIP-392, is the preferred read replica {broker_id} a broker main knows? Reply
# {known}; an unknown one makes main refresh its metadata, and the partition goes on at its leader meanwhile.
REPLICA_KNOWN = "C_REPLICA_KNOWN"


def ctoppar_name(topic: str, partition: int) -> str:
    """Actor name of a consumer toppar (kept apart from producer toppars of the same runtime)."""
    return f"ctoppar/{topic}/{partition}"


def fetch_start_payload(topic: str, partition: int, offset: int, version: int, leader_epoch: int,
                        max_messages: int, max_bytes: int, paused: bool = False) -> dict[str, Any]:
    return {"topic": topic, "partition": partition, "offset": offset, "version": version,
            "leader_epoch": leader_epoch, "max_messages": max_messages, "max_bytes": max_bytes,
            "paused": paused}
