"""Runs in: the main host. Owns the outputs of the consumer-group state machine: plain records the cgrp
actor executes in order (send a request, start or stop fetchers, run an app rebalance callback, report a
commit or an error). The machine never performs I/O; everything it wants done is one of these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kqactors.core.group.requests import build_request
from kqactors.errors import KafkaError
from kqactors.message import TopicPartition
from kqactors.protocol.base import Message

__all__ = [
    "Action",
    "SendRequest",
    "CoordinatorChanged",
    "RequestMetadata",
    "RebalanceCallback",
    "StartFetching",
    "StopFetching",
    "CommitResult",
    "SurfaceError",
    "Closed",
]


class Action:
    """Base of every state-machine output."""

    __slots__ = ()


@dataclass
class SendRequest(Action):
    """Send ``api`` to the coordinator (``broker_id``) or, when None, to any up broker.

    Feed the reply (the decoded response, or a KafkaError for a transport failure or timeout) back with
    ``GroupStateMachine.handle_response(request_id, reply, now)``. ``timeout_ms`` is how long the request
    may legitimately take (JoinGroup waits for the whole rebalance).
    """

    request_id: int
    api: str
    fields: dict[str, Any]
    broker_id: int | None
    timeout_ms: int

    def build(self, version: int) -> Message:
        return build_request(self.api, self.fields, version)


@dataclass
class CoordinatorChanged(Action):
    """The group coordinator is this broker (node_id -1 when it was lost and is being looked up again)."""

    node_id: int
    host: str
    port: int


@dataclass
class RequestMetadata(Action):
    """Refresh metadata for these topics (None: all topics, for pattern subscriptions); answer with
    ``metadata_update``."""

    topics: list[str] | None


@dataclass
class RebalanceCallback(Action):
    """Run the app's rebalance callback, then call ``rebalance_done``.

    ``kind`` is ASSIGN, REVOKE or LOST; ``incremental`` is True for the cooperative protocol (the app calls
    incremental_assign/unassign). ``error`` is what librdkafka hands rebalance_cb (_ASSIGN_PARTITIONS or
    _REVOKE_PARTITIONS).
    """

    kind: str
    partitions: list[TopicPartition]
    incremental: bool
    error: KafkaError


@dataclass
class StartFetching(Action):
    """Start fetchers for these partitions at their ``offset`` (OFFSET_INVALID: none committed, apply
    auto.offset.reset; a logical offset such as OFFSET_BEGINNING is resolved by the fetcher)."""

    partitions: list[TopicPartition]


@dataclass
class StopFetching(Action):
    partitions: list[TopicPartition]


@dataclass
class CommitResult(Action):
    """Outcome of an offset commit: for the app's commit() (``tag`` is what it passed) or auto-commit
    (tag None). ``partitions`` carry their own ``error`` when one failed."""

    tag: Any
    partitions: list[TopicPartition]
    error: KafkaError | None


@dataclass
class SurfaceError(Action):
    """Deliver this error to the app (consumer error event; fatal when ``error.fatal()``)."""

    error: KafkaError


@dataclass
class Closed(Action):
    """close() finished: offsets committed (or failed) and the group left."""

    reason: str = field(default="closed")
