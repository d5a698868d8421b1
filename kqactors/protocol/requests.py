"""Runs in: the main host, inside broker/N actors (and wherever a request kind's range is looked up). Owns the
one table of every request kind this client sends — its name, API, the versions the client speaks, how its
body is encoded at the negotiated version and how its response body is decoded — and the Produce codec that
splices pre-encoded record batches by reference.

The table is complete when this module is imported: nothing registers kinds later. ``remote`` kinds may be
named in ``REQUEST`` ops by any actor (their args and results are msgpack-able); the others (ApiVersions,
Produce, Fetch) are sent by the broker actor's own parts and take/return Python objects. Group kinds encode
through ``kqactors.core.group.requests`` (the group translation), referenced by module name and imported on
first use, so ``protocol/`` imports nothing from ``core/`` or ``actors/``. Version negotiation itself is
``kqactors.protocol.api.negotiate``; ``client_versions()`` gives it this table's ranges.

Each kind's generated message classes are imported by its encode/decode at first use, not with this module:
a producer's main host then never loads Fetch's or ListOffsets' tables (tens of ms of a host's start), a
consumer's never Produce's, and no client the transaction or SASL ones it does not send.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kqactors.errors import KafkaError
from kqactors.protocol.api import API_KEYS
from kqactors.protocol.generated import API_TABLE
from kqactors.protocol.handshake import api_versions_request, read_api_versions

if TYPE_CHECKING:
    from kqactors.protocol.generated.fetch import FetchResponse
    from kqactors.protocol.generated.sasl_authenticate import SaslAuthenticateResponse
    from kqactors.protocol.generated.sasl_handshake import SaslHandshakeResponse

MAX_PRODUCE_REQUEST_BYTES = 32 * 1024 * 1024

# ListOffsets special timestamps
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2


@dataclass(frozen=True)
class RequestKind:
    """One kind of request: its API, the versions this client speaks, and encode/decode of the body.

    `encode(version, args, frames)` returns the body as a list of buffers (frames may be spliced in by
    reference); `decode(version, body)` returns the result (raise ValueError on a bad body) — msgpack-able
    for `remote` kinds."""

    name: str
    api_key: int
    min_version: int
    max_version: int
    flexible_from: int | None
    encode: Callable[[int, dict[str, Any], list[Any]], list[Any]]
    decode: Callable[[int, bytes], Any]
    remote: bool = True

    def is_flexible(self, version: int) -> bool:
        return self.flexible_from is not None and version >= self.flexible_from


def _kind(name: str, api: str, min_version: int, max_version: int, encode: Callable, decode: Callable,
          remote: bool = True) -> RequestKind:
    key = API_KEYS[api]
    return RequestKind(name, key, min_version, max_version, API_TABLE[key][5], encode, decode, remote)


# ---- ApiVersions (the connection's own handshake) ---------------------------------------------------------

def _encode_api_versions(version: int, _args: dict[str, Any], _frames: list[Any]) -> list[Any]:
    return [api_versions_request().encode(version)]


def _decode_api_versions(version: int, body: bytes) -> Any:
    return read_api_versions(body, 0, version)


# ---- SASL (a connection's authentication steps, kqactors.core.sasl) ------------------------------------------

def _encode_sasl_handshake(version: int, args: dict[str, Any], _frames: list[Any]) -> list[Any]:
    """args: {"mechanism": str}."""
    from kqactors.protocol.generated.sasl_handshake import SaslHandshakeRequest
    return [SaslHandshakeRequest(mechanism=args["mechanism"]).encode(version)]


def _decode_sasl_handshake(version: int, body: bytes) -> SaslHandshakeResponse:
    from kqactors.protocol.generated.sasl_handshake import SaslHandshakeResponse
    return SaslHandshakeResponse.decode(body, version)


def _encode_sasl_authenticate(version: int, args: dict[str, Any], _frames: list[Any]) -> list[Any]:
    """args: {"auth_bytes": bytes}."""
    from kqactors.protocol.generated.sasl_authenticate import SaslAuthenticateRequest
    return [SaslAuthenticateRequest(auth_bytes=bytes(args["auth_bytes"])).encode(version)]


def _decode_sasl_authenticate(version: int, body: bytes) -> SaslAuthenticateResponse:
    from kqactors.protocol.generated.sasl_authenticate import SaslAuthenticateResponse
    return SaslAuthenticateResponse.decode(body, version)


# ---- Metadata ---------------------------------------------------------------------------------------------

def _encode_metadata(version: int, args: dict[str, Any], _frames: list[Any]) -> list[Any]:
    from kqactors.protocol.generated.metadata import MetadataRequest, MetadataRequestTopic
    topics = args.get("topics")
    request = MetadataRequest(
        topics=None if topics is None else [MetadataRequestTopic(name=name) for name in topics],
        allow_auto_topic_creation=bool(args.get("allow_auto_create", False)),
    )
    return [request.encode(version)]


def _decode_metadata(version: int, body: bytes) -> dict[str, Any]:
    """The response as plain lists (the wire form ``kqactors.core.metadata.snapshot_from_wire`` reads):
    {"brokers": [[node, host, port, rack]], "controller_id", "cluster_id",
     "topics": [[name, error, topic_id, [[partition, leader, epoch, replicas, isr, error]]]]}."""
    from kqactors.protocol.generated.metadata import MetadataResponse
    response = MetadataResponse.decode(body, version)
    return {
        "brokers": [[b.node_id, b.host, b.port, b.rack] for b in response.brokers],
        "controller_id": response.controller_id,
        "cluster_id": response.cluster_id,
        "topics": [[t.name, t.error_code, bytes(t.topic_id) if t.topic_id is not None else None,
                    [[p.partition_index, p.leader_id, p.leader_epoch, list(p.replica_nodes), list(p.isr_nodes),
                      p.error_code] for p in t.partitions]]
                   for t in response.topics if t.name is not None],
    }


# ---- InitProducerId ---------------------------------------------------------------------------------------

def _encode_init_pid(version: int, args: dict[str, Any], _frames: list[Any]) -> list[Any]:
    from kqactors.protocol.generated.init_producer_id import InitProducerIdRequest
    request = InitProducerIdRequest(
        transactional_id=args.get("transactional_id"),
        transaction_timeout_ms=int(args.get("transaction_timeout_ms", 60000)),
        producer_id=int(args.get("producer_id", -1)),
        producer_epoch=int(args.get("producer_epoch", -1)),
    )
    return [request.encode(version)]


def _decode_init_pid(version: int, body: bytes) -> dict[str, Any]:
    from kqactors.protocol.generated.init_producer_id import InitProducerIdResponse
    response = InitProducerIdResponse.decode(body, version)
    return {"error_code": response.error_code, "producer_id": response.producer_id,
            "producer_epoch": response.producer_epoch, "throttle_time_ms": response.throttle_time_ms}


# ---- Produce ----------------------------------------------------------------------------------------------

def encode_produce(version: int, entries: list[Any], transactional_id: str | None = None) -> list[Any]:
    """ProduceRequest body with each batch spliced in by reference (never re-encoded). ``entries`` have
    ``topic``, ``partition``, ``batch``, ``acks`` and ``timeout_ms`` (the first one's acks/timeout apply)."""
    from kqactors.protocol.generated.produce import PartitionProduceData, ProduceRequest, TopicProduceData
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
    from kqactors.protocol.generated.produce import ProduceResponse
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


def _encode_produce_kind(version: int, args: dict[str, Any], _frames: list[Any]) -> list[Any]:
    """args: {"entries": [XMIT entries], "transactional_id": str | None}."""
    return encode_produce(version, args["entries"], args.get("transactional_id"))


# ---- Fetch ------------------------------------------------------------------------------------------------

def _encode_fetch(version: int, args: dict[str, Any], _frames: list[Any]) -> list[Any]:
    """args: {"request": FetchRequest} built by the fetch planner (version-independent fields)."""
    return [args["request"].encode(version)]


def _decode_fetch(version: int, body: bytes) -> FetchResponse:
    from kqactors.protocol.generated.fetch import FetchResponse
    return FetchResponse.decode(body, version)


# ---- ListOffsets ------------------------------------------------------------------------------------------

def _encode_list_offsets(version: int, args: dict[str, Any], _frames: list[Any]) -> list[Any]:
    """args: {isolation_level, topics: [[topic, [[partition, timestamp, leader_epoch], ...]], ...]}"""
    from kqactors.protocol.generated.list_offsets import (
        ListOffsetsPartition,
        ListOffsetsRequest,
        ListOffsetsTopic,
    )
    topics = [ListOffsetsTopic(name=name, partitions=[
        ListOffsetsPartition(partition_index=int(p), timestamp=int(ts), current_leader_epoch=int(epoch))
        for p, ts, epoch in parts]) for name, parts in args["topics"]]
    request = ListOffsetsRequest(replica_id=-1, isolation_level=int(args.get("isolation_level", 0)),
                                 topics=topics, timeout_ms=int(args.get("timeout_ms", 30000)))
    return [request.encode(version)]


def _decode_list_offsets(version: int, body: bytes) -> dict[str, Any]:
    """{"partitions": [[topic, partition, error_code, offset, timestamp, leader_epoch], ...]}"""
    from kqactors.protocol.generated.list_offsets import ListOffsetsResponse
    response = ListOffsetsResponse.decode(body, version)
    rows = []
    for topic in response.topics:
        for part in topic.partitions:
            offset = part.offset
            if version == 0:
                offset = part.old_style_offsets[0] if part.old_style_offsets else -1
            rows.append([topic.name, part.partition_index, part.error_code, offset, part.timestamp,
                         part.leader_epoch])
    return {"partitions": rows}


def list_offsets_args(rows: list[tuple[str, int, int]], read_committed: bool) -> dict[str, Any]:
    """REQUEST args for ListOffsets of (topic, partition, timestamp) rows (timestamp -1 latest, -2 earliest)."""
    by_topic: dict[str, list[list[int]]] = {}
    for topic, partition, timestamp in rows:
        by_topic.setdefault(topic, []).append([partition, timestamp, -1])
    return {"isolation_level": 1 if read_committed else 0, "topics": [[t, p] for t, p in by_topic.items()]}


# ---- consumer group -----------------------------------------------------------------------------------------
# The body travels back raw (bytes + version) and is decoded by the cgrp actor, so the state machine sees the
# generated response classes. Max versions: librdkafka's (the mock cluster's flexible JoinGroup/SyncGroup/
# LeaveGroup handlers drop the connection; static membership needs only these).

GROUP_TRANSLATION = "kqactors.core.group.requests"
"""Module whose ``build_request(api, fields, version)`` turns the group state machine's fields into a request."""

GROUP_APIS = {"FindCoordinator": 2, "JoinGroup": 5, "SyncGroup": 3, "Heartbeat": 3, "LeaveGroup": 1,
              "OffsetCommit": 7, "OffsetFetch": 7}
# group.protocol=consumer (KIP-848): ConsumerGroupHeartbeat v1 only, as librdkafka (v1 = client-generated member
# id + regex), and OffsetCommit up to v9 (a broker refuses commits below v9 from members of a consumer-protocol
# group); its other requests are the classic kinds above. api -> (kind name, min version, max version).
CONSUMER_PROTOCOL_KINDS = {"ConsumerGroupHeartbeat": ("cgrp:ConsumerGroupHeartbeat", 1, 1),
                           "OffsetCommit": ("cgrp848:OffsetCommit", 0, 9)}


def group_request_kind(api: str, consumer_protocol: bool = False) -> str:
    """The request kind name of a group API (``cgrp:<Api>``; KIP-848 members use their own where one exists)."""
    if consumer_protocol and api in CONSUMER_PROTOCOL_KINDS:
        return CONSUMER_PROTOCOL_KINDS[api][0]
    return f"cgrp:{api}"


def _group_encoder(api: str) -> Callable[[int, dict[str, Any], list[Any]], list[Any]]:
    def encode(version: int, args: dict[str, Any], _frames: list[Any]) -> list[Any]:
        build_request = importlib.import_module(GROUP_TRANSLATION).build_request
        return [build_request(api, args, version).encode(version)]

    return encode


def _decode_raw(version: int, body: bytes) -> dict[str, Any]:
    return {"version": version, "body": bytes(body)}


# ---- transactions -------------------------------------------------------------------------------------------
# The transactional producer's requests (kqactors.core.producer.txn). Args and results are msgpack-able.
# Versions: FindCoordinator v1+ has the key type (v4+ batches keys); AddPartitionsToTxn v0-3 is the client's
# range (v4+ are broker-to-broker); TxnOffsetCommit v3+ carries the group generation and member id (KIP-447);
# the top versions of InitProducerId (5), AddOffsetsToTxn (4), TxnOffsetCommit (4) and EndTxn (4) tell the
# broker this client understands TRANSACTION_ABORTABLE (KIP-890 part 1). EndTxn v5 (KIP-890 part 2, an epoch
# bump per transaction) is not asked for: it belongs with Produce v12's implicit partition adds, which the
# specs here do not have.

def _encode_txn_find_coordinator(version: int, args: dict[str, Any], _frames: list[Any]) -> list[Any]:
    """args: {key_type: 0 group | 1 transaction, key}."""
    from kqactors.protocol.generated.find_coordinator import FindCoordinatorRequest
    if version >= 4:
        request = FindCoordinatorRequest(key_type=int(args["key_type"]), coordinator_keys=[args["key"]])
    else:
        request = FindCoordinatorRequest(key=args["key"], key_type=int(args["key_type"]))
    return [request.encode(version)]


def _decode_txn_find_coordinator(version: int, body: bytes) -> dict[str, Any]:
    """{error_code, error_message, node_id, host, port}"""
    from kqactors.protocol.generated.find_coordinator import FindCoordinatorResponse
    response = FindCoordinatorResponse.decode(body, version)
    if version >= 4:
        if not response.coordinators:
            return {"error_code": KafkaError.COORDINATOR_NOT_AVAILABLE, "error_message": "no coordinator listed",
                    "node_id": -1, "host": "", "port": -1}
        response = response.coordinators[0]
    return {"error_code": response.error_code, "error_message": response.error_message or "",
            "node_id": response.node_id, "host": response.host, "port": response.port}


def _decode_txn_init_pid(version: int, body: bytes) -> dict[str, Any]:
    return _decode_init_pid(version, body)


def _encode_txn_add_partitions(version: int, args: dict[str, Any], _frames: list[Any]) -> list[Any]:
    """args: {transactional_id, producer_id, producer_epoch, topics: [[topic, [partition, ...]], ...]}."""
    from kqactors.protocol.generated.add_partitions_to_txn import (
        AddPartitionsToTxnRequest,
        AddPartitionsToTxnTopic,
    )
    request = AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=args["transactional_id"],
        v3_and_below_producer_id=int(args["producer_id"]), v3_and_below_producer_epoch=int(args["producer_epoch"]),
        v3_and_below_topics=[AddPartitionsToTxnTopic(name=topic, partitions=[int(p) for p in partitions])
                             for topic, partitions in args["topics"]])
    return [request.encode(version)]


def _decode_txn_add_partitions(version: int, body: bytes) -> dict[str, Any]:
    """{error_code, partitions: [[topic, partition, error_code], ...]}"""
    from kqactors.protocol.generated.add_partitions_to_txn import AddPartitionsToTxnResponse
    response = AddPartitionsToTxnResponse.decode(body, version)
    rows = [[topic.name, part.partition_index, part.partition_error_code]
            for topic in response.results_by_topic_v3_and_below for part in topic.results_by_partition]
    return {"error_code": response.error_code if version >= 4 else 0, "partitions": rows}


def _encode_txn_add_offsets(version: int, args: dict[str, Any], _frames: list[Any]) -> list[Any]:
    """args: {transactional_id, producer_id, producer_epoch, group_id}."""
    from kqactors.protocol.generated.add_offsets_to_txn import AddOffsetsToTxnRequest
    request = AddOffsetsToTxnRequest(transactional_id=args["transactional_id"],
                                     producer_id=int(args["producer_id"]),
                                     producer_epoch=int(args["producer_epoch"]), group_id=args["group_id"])
    return [request.encode(version)]


def _decode_txn_add_offsets(version: int, body: bytes) -> dict[str, Any]:
    from kqactors.protocol.generated.add_offsets_to_txn import AddOffsetsToTxnResponse
    return {"error_code": AddOffsetsToTxnResponse.decode(body, version).error_code}


def _encode_txn_offset_commit(version: int, args: dict[str, Any], _frames: list[Any]) -> list[Any]:
    """args: {transactional_id, group_id, producer_id, producer_epoch, generation_id, member_id,
    group_instance_id, topics: [[topic, [[partition, offset, leader_epoch, metadata], ...]], ...]}. Below v3 the
    group's generation, member id and instance id are not sent (the broker cannot fence zombies then)."""
    from kqactors.protocol.generated.txn_offset_commit import (
        TxnOffsetCommitRequest,
        TxnOffsetCommitRequestPartition,
        TxnOffsetCommitRequestTopic,
    )
    kip447 = version >= 3
    request = TxnOffsetCommitRequest(
        transactional_id=args["transactional_id"], group_id=args["group_id"],
        producer_id=int(args["producer_id"]), producer_epoch=int(args["producer_epoch"]),
        generation_id=int(args.get("generation_id", -1)) if kip447 else -1,
        member_id=(args.get("member_id") or "") if kip447 else "",
        group_instance_id=args.get("group_instance_id") if kip447 else None,
        topics=[TxnOffsetCommitRequestTopic(name=topic, partitions=[
            TxnOffsetCommitRequestPartition(partition_index=int(p), committed_offset=int(offset),
                                            committed_leader_epoch=int(-1 if epoch is None else epoch),
                                            committed_metadata=metadata)
            for p, offset, epoch, metadata in partitions]) for topic, partitions in args["topics"]])
    return [request.encode(version)]


def _decode_txn_offset_commit(version: int, body: bytes) -> dict[str, Any]:
    """{partitions: [[topic, partition, error_code], ...]}"""
    from kqactors.protocol.generated.txn_offset_commit import TxnOffsetCommitResponse
    response = TxnOffsetCommitResponse.decode(body, version)
    return {"partitions": [[topic.name, part.partition_index, part.error_code]
                           for topic in response.topics for part in topic.partitions]}


def _encode_txn_end(version: int, args: dict[str, Any], _frames: list[Any]) -> list[Any]:
    """args: {transactional_id, producer_id, producer_epoch, committed}."""
    from kqactors.protocol.generated.end_txn import EndTxnRequest
    request = EndTxnRequest(transactional_id=args["transactional_id"], producer_id=int(args["producer_id"]),
                            producer_epoch=int(args["producer_epoch"]), committed=bool(args["committed"]))
    return [request.encode(version)]


def _decode_txn_end(version: int, body: bytes) -> dict[str, Any]:
    """{error_code, producer_id, producer_epoch} (the id/epoch only from v5, else -1)."""
    from kqactors.protocol.generated.end_txn import EndTxnResponse
    response = EndTxnResponse.decode(body, version)
    return {"error_code": response.error_code, "producer_id": response.producer_id,
            "producer_epoch": response.producer_epoch}


def _transaction_kinds() -> list[RequestKind]:
    return [
        _kind("txn:FindCoordinator", "FindCoordinator", 1, 4, _encode_txn_find_coordinator,
              _decode_txn_find_coordinator),
        _kind("txn:InitProducerId", "InitProducerId", 0, 5, _encode_init_pid, _decode_txn_init_pid),
        _kind("txn:AddPartitionsToTxn", "AddPartitionsToTxn", 0, 3, _encode_txn_add_partitions,
              _decode_txn_add_partitions),
        _kind("txn:AddOffsetsToTxn", "AddOffsetsToTxn", 0, 4, _encode_txn_add_offsets, _decode_txn_add_offsets),
        _kind("txn:TxnOffsetCommit", "TxnOffsetCommit", 0, 4, _encode_txn_offset_commit,
              _decode_txn_offset_commit),
        _kind("txn:EndTxn", "EndTxn", 0, 4, _encode_txn_end, _decode_txn_end),
    ]

# ---- admin ----------------------------------------------------------------------------------------------------
# The AdminClient's kinds ("admin:<Api>"). Their args are the request's own fields as plain nested dicts (the
# generated class's field names; a struct list is a list of dicts), so an app-side builder writes them once and
# any actor can send them; the result is the whole response as plain nested dicts plus "_version", the
# negotiated version (the app reads version-dependent fields with it). A kind whose fields moved between
# versions has a ``_prepare(version, args)`` that rewrites the args for the version the connection picked.
# Version ranges: what the client decodes and encodes; the broker's range picks the version.

def _struct_from(cls: Any, data: dict[str, Any]) -> Any:
    """An instance of generated class ``cls`` from its plain-dict form (unknown field names: ValueError)."""
    schema = {field.name: field for field in cls._SCHEMA}
    unknown = set(data) - set(schema)
    if unknown:
        raise ValueError(f"{cls.__name__} has no field(s) {sorted(unknown)}")
    fields = {}
    for name, value in data.items():
        struct = schema[name].struct
        if struct is not None and value is not None:
            value = ([_struct_from(struct, item) for item in value] if schema[name].type.startswith("[]")
                     else _struct_from(struct, value))
        fields[name] = value
    return cls(**fields)


def _admin_codec(api: str, prepare: Callable[[int, dict[str, Any]], dict[str, Any]] | None = None
                 ) -> tuple[Callable[[int, dict[str, Any], list[Any]], list[Any]], Callable[[int, bytes], Any]]:
    """encode/decode of ``api``; its generated module is imported on first use (most clients send no admin kind)."""
    def classes() -> tuple[Any, Any]:
        module = importlib.import_module(f"kqactors.protocol.generated.{API_TABLE[API_KEYS[api]][1]}")
        return getattr(module, f"{api}Request"), getattr(module, f"{api}Response")

    def encode(version: int, args: dict[str, Any], _frames: list[Any]) -> list[Any]:
        fields = prepare(version, dict(args)) if prepare is not None else args
        return [_struct_from(classes()[0], fields).encode(version)]

    def decode(version: int, body: bytes) -> dict[str, Any]:
        result = classes()[1].decode(body, version).to_dict()
        result["_version"] = version
        return result

    return encode, decode


def _prepare_delete_topics(version: int, args: dict[str, Any]) -> dict[str, Any]:
    """args: {topic_names, timeout_ms}; v6+ names topics in ``topics`` structs (name, zero topic id)."""
    if version >= 6:
        args["topics"] = [{"name": name} for name in args.pop("topic_names", ())]
    return args


def _prepare_find_coordinator(version: int, args: dict[str, Any]) -> dict[str, Any]:
    """args: {key, key_type}; v4+ asks for a batch of keys (here: that one)."""
    if version >= 4:
        args["coordinator_keys"] = [args.pop("key")]
    elif version == 0:
        args.pop("key_type", None)
    return args


def _only_from(field: str, low: int, high: int = 0x7FFF) -> Callable[[int, dict[str, Any]], dict[str, Any]]:
    """Drop an optional flag outside the versions that carry it (e.g. include_authorized_operations)."""
    def prepare(version: int, args: dict[str, Any]) -> dict[str, Any]:
        if not low <= version <= high:
            args.pop(field, None)
        return args

    return prepare


def _prepare_offset_fetch(version: int, args: dict[str, Any]) -> dict[str, Any]:
    """args: {group_id, topics (None: all), require_stable}; v8+ asks for a batch of groups (here: that one)."""
    if version >= 8:
        args["groups"] = [{"group_id": args.pop("group_id"), "topics": args.pop("topics", None)}]
    return _only_from("require_stable", 7)(version, args)


def _prepare_metadata(version: int, args: dict[str, Any]) -> dict[str, Any]:
    """Flags a version lacks are not sent (below v4 the broker's own auto-creation setting decides)."""
    args = _only_from("allow_auto_topic_creation", 4)(version, args)
    args = _only_from("include_cluster_authorized_operations", 8, 10)(version, args)
    return _only_from("include_topic_authorized_operations", 8)(version, args)


ADMIN_KINDS: dict[str, tuple[str, int, int, Callable[[int, dict[str, Any]], dict[str, Any]] | None]] = {
    # kind name: (API, min version, max version, prepare)
    "admin:Metadata": ("Metadata", 1, 12, _prepare_metadata),
    "admin:CreateTopics": ("CreateTopics", 0, 7, None),
    "admin:DeleteTopics": ("DeleteTopics", 0, 6, _prepare_delete_topics),
    "admin:CreatePartitions": ("CreatePartitions", 0, 3, None),
    "admin:DeleteRecords": ("DeleteRecords", 0, 2, None),
    "admin:DescribeConfigs": ("DescribeConfigs", 0, 4, _only_from("include_synonyms", 1)),
    "admin:AlterConfigs": ("AlterConfigs", 0, 2, None),
    "admin:IncrementalAlterConfigs": ("IncrementalAlterConfigs", 0, 1, None),
    "admin:CreateAcls": ("CreateAcls", 0, 3, None),
    "admin:DescribeAcls": ("DescribeAcls", 0, 3, None),
    "admin:DeleteAcls": ("DeleteAcls", 0, 3, None),
    "admin:FindCoordinator": ("FindCoordinator", 0, 4, _prepare_find_coordinator),
    "admin:ListGroups": ("ListGroups", 0, 5, None),
    "admin:DescribeGroups": ("DescribeGroups", 0, 5, _only_from("include_authorized_operations", 3)),
    "admin:ConsumerGroupDescribe": ("ConsumerGroupDescribe", 0, 0, None),
    "admin:DeleteGroups": ("DeleteGroups", 0, 2, None),
    "admin:OffsetFetch": ("OffsetFetch", 1, 9, _prepare_offset_fetch),
    "admin:OffsetCommit": ("OffsetCommit", 2, 9, None),
    "admin:DescribeUserScramCredentials": ("DescribeUserScramCredentials", 0, 0, None),
    "admin:AlterUserScramCredentials": ("AlterUserScramCredentials", 0, 0, None),
    "admin:ElectLeaders": ("ElectLeaders", 0, 2, None),
}
"""The AdminClient's request kinds (ListOffsets is the shared ``ListOffsets`` kind above)."""


def _admin_kinds() -> list[RequestKind]:
    kinds = []
    for name, (api, low, high, prepare) in ADMIN_KINDS.items():
        encode, decode = _admin_codec(api, prepare)
        kinds.append(_kind(name, api, low, high, encode, decode))
    return kinds


# ---- the table ----------------------------------------------------------------------------------------------

def _build_table() -> dict[str, RequestKind]:
    kinds = [
        _kind("ApiVersions", "ApiVersions", 0, 3, _encode_api_versions, _decode_api_versions, remote=False),
        # v1 handshake: the exchanges that follow are SaslAuthenticate requests (v0's raw frames are not spoken)
        _kind("SaslHandshake", "SaslHandshake", 1, 1, _encode_sasl_handshake, _decode_sasl_handshake, remote=False),
        # v1: session_lifetime_ms (KIP-368 re-authentication)
        _kind("SaslAuthenticate", "SaslAuthenticate", 0, 2, _encode_sasl_authenticate, _decode_sasl_authenticate,
              remote=False),
        _kind("Metadata", "Metadata", 1, 12, _encode_metadata, _decode_metadata),
        _kind("InitProducerId", "InitProducerId", 0, 4, _encode_init_pid, _decode_init_pid),
        # v3: RecordBatch v2 (magic 2); v11+ only adds KIP-951 leader hints we ignore
        _kind("Produce", "Produce", 3, 10, _encode_produce_kind, decode_produce, remote=False),
        # v4: isolation level, last stable offset, aborted transactions; v13+ names topics by id only, which
        # the fetch planner does not track
        _kind("Fetch", "Fetch", 4, 12, _encode_fetch, _decode_fetch, remote=False),
        _kind("ListOffsets", "ListOffsets", 1, 7, _encode_list_offsets, _decode_list_offsets),
    ]
    kinds += [_kind(group_request_kind(api), api, 0, high, _group_encoder(api), _decode_raw)
              for api, high in GROUP_APIS.items()]
    kinds += [_kind(name, api, low, high, _group_encoder(api), _decode_raw)
              for api, (name, low, high) in CONSUMER_PROTOCOL_KINDS.items()]
    kinds += _transaction_kinds()

    kinds += _admin_kinds()
    return {kind.name: kind for kind in kinds}


REQUEST_KINDS: dict[str, RequestKind] = _build_table()
"""Every request kind this client sends, by name."""

API_VERSIONS = REQUEST_KINDS["ApiVersions"]
PRODUCE = REQUEST_KINDS["Produce"]
FETCH = REQUEST_KINDS["Fetch"]
LIST_OFFSETS = REQUEST_KINDS["ListOffsets"]
SASL_HANDSHAKE = REQUEST_KINDS["SaslHandshake"]
SASL_AUTHENTICATE = REQUEST_KINDS["SaslAuthenticate"]


def client_versions(kinds: Iterable[RequestKind] | None = None) -> dict[int, tuple[int, int]]:
    """{api key: (min, max)} the client speaks, over every kind of the table (kinds sharing an API widen it);
    the client side of ``kqactors.protocol.api.negotiate``."""
    ranges: dict[int, tuple[int, int]] = {}
    for kind in REQUEST_KINDS.values() if kinds is None else kinds:
        low, high = ranges.get(kind.api_key, (kind.min_version, kind.max_version))
        ranges[kind.api_key] = (min(low, kind.min_version), max(high, kind.max_version))
    return ranges


CLIENT_RANGES = client_versions()
