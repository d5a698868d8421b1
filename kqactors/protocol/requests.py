"""Runs in: the main host, inside broker/N actors. Owns the request kinds a broker actor can send — how each
builds its request body at the negotiated version and turns the response into a msgpack-able result — and
the Produce request assembly from pre-encoded record batches of many partitions.

Request kinds are pluggable: `register_request_kind` adds one (the consumer adds Fetch, ListOffsets, ...),
and any actor can then send broker/N a `REQUEST` op naming it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kqactors.core.metadata import BrokerInfo, MetadataSnapshot, PartitionInfo, TopicInfo
from kqactors.protocol.generated.init_producer_id import InitProducerIdRequest, InitProducerIdResponse
from kqactors.protocol.generated.metadata import MetadataRequest, MetadataRequestTopic, MetadataResponse
from kqactors.protocol.generated.produce import (
    PartitionProduceData,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
)

PRODUCE_KEY = ProduceRequest.API_KEY
PRODUCE_VERSIONS = (3, 10)  # v3: RecordBatch v2 (magic 2); v11+ only adds KIP-951 leader hints we ignore
MAX_PRODUCE_REQUEST_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True)
class RequestKind:
    """One kind of request: its API, the versions this client speaks, and encode/decode of the body.

    `encode(version, args, frames)` returns the body as a list of buffers (frames may be spliced in by
    reference); `decode(version, body)` returns a msgpack-able result (raise ValueError on a bad body)."""

    name: str
    api_key: int
    min_version: int
    max_version: int
    flexible_from: int | None
    encode: Callable[[int, dict[str, Any], list[Any]], list[Any]]
    decode: Callable[[int, bytes], dict[str, Any]]

    def is_flexible(self, version: int) -> bool:
        return self.flexible_from is not None and version >= self.flexible_from


REQUEST_KINDS: dict[str, RequestKind] = {}


def register_request_kind(kind: RequestKind) -> None:
    """Make `kind` available to every broker actor of this process (by name, in REQUEST ops)."""
    if kind.name in REQUEST_KINDS and REQUEST_KINDS[kind.name] is not kind:
        raise ValueError(f"request kind {kind.name!r} is already registered")
    REQUEST_KINDS[kind.name] = kind


def _flexible_from(message_class: Any) -> int | None:
    span = message_class.FLEXIBLE_VERSIONS
    return span[0] if span else None


# ---- Metadata ---------------------------------------------------------------------------------------------

def _encode_metadata(version: int, args: dict[str, Any], _frames: list[Any]) -> list[Any]:
    topics = args.get("topics")
    request = MetadataRequest(
        topics=None if topics is None else [MetadataRequestTopic(name=name) for name in topics],
        allow_auto_topic_creation=bool(args.get("allow_auto_create", False)),
    )
    return [request.encode(version)]


def metadata_snapshot_from_response(response: MetadataResponse) -> MetadataSnapshot:
    brokers = [BrokerInfo(b.node_id, b.host, b.port, b.rack) for b in response.brokers]
    topics = []
    for topic in response.topics:
        if topic.name is None:
            continue
        partitions = {
            p.partition_index: PartitionInfo(p.partition_index, p.leader_id, p.leader_epoch,
                                             list(p.replica_nodes), list(p.isr_nodes), p.error_code)
            for p in topic.partitions
        }
        topic_id = bytes(topic.topic_id) if topic.topic_id is not None else None
        topics.append(TopicInfo(topic.name, topic.error_code, partitions, topic_id))
    return MetadataSnapshot(brokers, topics, response.controller_id, response.cluster_id)


def snapshot_to_wire(snapshot: MetadataSnapshot) -> dict[str, Any]:
    """Plain lists so a snapshot crosses processes in msgpack."""
    return {
        "brokers": [[b.node_id, b.host, b.port, b.rack] for b in snapshot.brokers],
        "controller_id": snapshot.controller_id,
        "cluster_id": snapshot.cluster_id,
        "topics": [[t.name, t.error_code, t.topic_id,
                    [[p.partition, p.leader, p.leader_epoch, p.replicas, p.isr, p.error_code]
                     for p in t.partitions.values()]] for t in snapshot.topics],
    }


def snapshot_from_wire(data: dict[str, Any]) -> MetadataSnapshot:
    brokers = [BrokerInfo(node_id, host, port, rack) for node_id, host, port, rack in data["brokers"]]
    topics = [TopicInfo(name, error, {p[0]: PartitionInfo(p[0], p[1], p[2], list(p[3]), list(p[4]), p[5])
                                      for p in parts}, topic_id)
              for name, error, topic_id, parts in data["topics"]]
    return MetadataSnapshot(brokers, topics, data.get("controller_id", -1), data.get("cluster_id"))


def _decode_metadata(version: int, body: bytes) -> dict[str, Any]:
    return snapshot_to_wire(metadata_snapshot_from_response(MetadataResponse.decode(body, version)))


# ---- InitProducerId ---------------------------------------------------------------------------------------

def _encode_init_pid(version: int, args: dict[str, Any], _frames: list[Any]) -> list[Any]:
    request = InitProducerIdRequest(
        transactional_id=args.get("transactional_id"),
        transaction_timeout_ms=int(args.get("transaction_timeout_ms", 60000)),
        producer_id=int(args.get("producer_id", -1)),
        producer_epoch=int(args.get("producer_epoch", -1)),
    )
    return [request.encode(version)]


def _decode_init_pid(version: int, body: bytes) -> dict[str, Any]:
    response = InitProducerIdResponse.decode(body, version)
    return {"error_code": response.error_code, "producer_id": response.producer_id,
            "producer_epoch": response.producer_epoch, "throttle_time_ms": response.throttle_time_ms}


register_request_kind(RequestKind("Metadata", MetadataRequest.API_KEY, 1, 12, _flexible_from(MetadataRequest),
                                  _encode_metadata, _decode_metadata))
register_request_kind(RequestKind("InitProducerId", InitProducerIdRequest.API_KEY, 0, 4,
                                  _flexible_from(InitProducerIdRequest), _encode_init_pid, _decode_init_pid))


# ---- Produce ----------------------------------------------------------------------------------------------

@dataclass(eq=False)
class XmitEntry:
    """One XMIT waiting for its one XMIT_RESULT: a pre-encoded batch for one partition."""

    sender: str
    topic: str
    partition: int
    batch_id: int
    toppar_version: int
    acks: int
    timeout_ms: int
    batch: Any
    received_at: float
    deadline_ms: int | None = None  # wall clock (ms) of the first message's message.timeout.ms


def collate_produce(entries: list[XmitEntry], max_bytes: int = MAX_PRODUCE_REQUEST_BYTES
                    ) -> tuple[list[XmitEntry], list[XmitEntry]]:
    """Take the entries for one Produce request: same acks/timeout as the first, one batch per partition
    (brokers accept a single v2 batch per partition), bounded size. Returns (taken, left over), both in
    the original order so a partition's batches keep their order across requests."""
    if not entries:
        return [], []
    first = entries[0]
    taken: list[XmitEntry] = []
    rest: list[XmitEntry] = []
    seen: set[tuple[str, int]] = set()
    size = 0
    for entry in entries:
        key = (entry.topic, entry.partition)
        fits = not taken or size + len(entry.batch) <= max_bytes
        if (entry.acks, entry.timeout_ms) == (first.acks, first.timeout_ms) and key not in seen and fits:
            taken.append(entry)
            seen.add(key)
            size += len(entry.batch)
        else:
            seen.add(key)  # a later batch of this partition must not overtake this one
            rest.append(entry)
    return taken, rest


def encode_produce(version: int, entries: list[XmitEntry], transactional_id: str | None = None) -> list[Any]:
    """ProduceRequest body with each batch spliced in by reference (never re-encoded)."""
    by_topic: dict[str, list[PartitionProduceData]] = {}
    for entry in entries:
        by_topic.setdefault(entry.topic, []).append(PartitionProduceData(index=entry.partition,
                                                                         records=entry.batch))
    first = entries[0]
    request = ProduceRequest(transactional_id=transactional_id, acks=first.acks, timeout_ms=first.timeout_ms,
                             topic_data=[TopicProduceData(name=name, partition_data=parts)
                                         for name, parts in by_topic.items()])
    return request.encode_chunks(version)


def decode_produce(version: int, body: bytes) -> dict[tuple[str, int], dict[str, Any]]:
    """{(topic, partition): result fields} from a ProduceResponse body."""
    response = ProduceResponse.decode(body, version)
    results: dict[tuple[str, int], dict[str, Any]] = {}
    for topic in response.responses:
        for part in topic.partition_responses:
            results[(topic.name, part.index)] = {
                "error_code": part.error_code,
                "base_offset": part.base_offset,
                "log_append_time": part.log_append_time_ms,
                "log_start_offset": part.log_start_offset,
                "record_errors": [[e.batch_index, e.batch_index_error_message] for e in part.record_errors],
                "error_message": part.error_message,
            }
    return results


PRODUCE_FLEXIBLE_FROM = _flexible_from(ProduceRequest)
