"""Cluster metadata as every client returns it from ``list_topics()``, shaped like confluent-kafka's.

Runs in: the app process (part of the client handle, kqactors.client.handle, which every facade shares).
Owns ClusterMetadata / BrokerMetadata / TopicMetadata / PartitionMetadata, the blocking METADATA request a
client sends to ``main`` (``request_metadata``), and their construction from the wire dict main returns
(see kqactors.protocol.requests: brokers as [node_id, host, port, rack], topics as [name, error, topic_id,
partitions], partitions as [id, leader, leader_epoch, replicas, isr, error]).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kqactors.errors import KafkaError, KafkaException
from kqactors.ops import client as ops
from kqactors.runtime.op import ActorError, Op

if TYPE_CHECKING:
    from kqactors.runtime.runtime import Runtime

# How a broker actor's reply to a request it never sent begins (kqactors/actors/broker/actor.py): the request
# waited for a connection that did not come up in time.
_NOT_SENT = "not sent:"

__all__ = ["ClusterMetadata", "BrokerMetadata", "TopicMetadata", "PartitionMetadata", "cluster_from_wire",
           "request_metadata"]


class BrokerMetadata:
    def __init__(self, node_id: int, host: str, port: int) -> None:
        self.id = node_id
        self.host = host
        self.port = port

    def __repr__(self) -> str:
        return f"BrokerMetadata({self.id}, {self.host}:{self.port})"

    def __str__(self) -> str:
        return f"{self.host}:{self.port}/{self.id}"


class PartitionMetadata:
    def __init__(self, partition_id: int, leader: int, replicas: list[int], isrs: list[int],
                 error: KafkaError | None) -> None:
        self.id = partition_id
        self.leader = leader
        self.replicas = replicas
        self.isrs = isrs
        self.error = error

    def __repr__(self) -> str:
        if self.error is not None:
            return f"PartitionMetadata({self.id}, {self.error})"
        return f"PartitionMetadata({self.id})"

    def __str__(self) -> str:
        return str(self.id)


class TopicMetadata:
    def __init__(self, topic: str, partitions: dict[int, PartitionMetadata], error: KafkaError | None) -> None:
        self.topic = topic
        self.partitions = partitions
        self.error = error

    def __repr__(self) -> str:
        if self.error is not None:
            return f"TopicMetadata({self.topic}, {len(self.partitions)} partitions, {self.error})"
        return f"TopicMetadata({self.topic}, {len(self.partitions)} partitions)"

    def __str__(self) -> str:
        return self.topic


class ClusterMetadata:
    def __init__(self) -> None:
        self.cluster_id: str | None = None
        self.controller_id = -1
        self.brokers: dict[int, BrokerMetadata] = {}
        self.topics: dict[str, TopicMetadata] = {}
        self.orig_broker_id = -1
        self.orig_broker_name: str | None = None

    def __repr__(self) -> str:
        return f"ClusterMetadata({self.cluster_id})"

    def __str__(self) -> str:
        return str(self.cluster_id)


def _error(code: int) -> KafkaError | None:
    return KafkaError(code) if code else None


def cluster_from_wire(data: dict[str, Any]) -> ClusterMetadata:
    """Build a ClusterMetadata from main's metadata wire dict."""
    cluster = ClusterMetadata()
    cluster.cluster_id = data.get("cluster_id")
    cluster.controller_id = int(data.get("controller_id", -1))
    for node_id, host, port, _rack in data.get("brokers", ()):
        cluster.brokers[node_id] = BrokerMetadata(node_id, host, port)
    for name, error, _topic_id, parts in data.get("topics", ()):
        partitions = {}
        for part in parts:
            pid, leader, _epoch, replicas, isr, perr = part[:6]
            partitions[pid] = PartitionMetadata(pid, leader, list(replicas), list(isr), _error(perr))
        cluster.topics[name] = TopicMetadata(name, partitions, _error(error))
    return cluster


def request_metadata(runtime: Runtime, topics: list[str] | None, timeout: float,
                     allow_auto_create: bool) -> ClusterMetadata:
    """Ask the main actor for cluster metadata (blocking; app side only) and raise KafkaException on failure."""
    request = Op(ops.METADATA, {"topics": topics, "timeout_ms": max(1, int(timeout * 1000)),
                                "allow_auto_create": allow_auto_create})
    try:
        reply = runtime.request("main", request, timeout=max(timeout, 0.001) + 1.0)
    except ActorError as exc:
        # main did not answer at all: its host is still starting (a call right after the constructor, on a
        # loaded machine) or restarting, so no broker could have had the request: as main's own "not sent"
        raise KafkaException(KafkaError(KafkaError._TRANSPORT, f"Failed to get metadata: "
                                        f"{KafkaError(KafkaError._TRANSPORT).str()} ({exc})")) from None
    payload = reply.payload or {}
    code = int(payload.get("error_code") or 0)
    if code:
        if code == KafkaError._TIMED_OUT and str(payload.get("reason") or "").startswith(_NOT_SENT):
            # no broker was up for the whole timeout: librdkafka's rd_kafka_metadata() says _TRANSPORT then
            # (and _TIMED_OUT only when a broker got the request and did not answer in time)
            code = KafkaError._TRANSPORT
        text = f"Failed to get metadata: {KafkaError(code).str()}"
        if code in (KafkaError._SSL, KafkaError._AUTHENTICATION) and payload.get("reason"):
            text += f": {payload['reason']}"  # why the connection was refused: the certificate, the password
        raise KafkaException(KafkaError(code, text))
    return cluster_from_wire(payload.get("metadata") or {})
