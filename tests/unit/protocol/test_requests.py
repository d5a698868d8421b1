"""Unit tests for the request table and the Produce codec (kqactors.protocol.requests)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any, NamedTuple

import pytest

from kqactors.core.metadata import BrokerInfo, MetadataSnapshot, PartitionInfo, TopicInfo, snapshot_to_wire
from kqactors.protocol.api import common_version, negotiate
from kqactors.protocol.generated import API_TABLE
from kqactors.protocol.generated.metadata import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from kqactors.protocol.generated.produce import (
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    TopicProduceResponse,
)
from kqactors.protocol.requests import (
    ADMIN_KINDS,
    CLIENT_RANGES,
    REQUEST_KINDS,
    client_versions,
    decode_produce,
    encode_produce,
    group_request_kind,
)


class Entry(NamedTuple):
    topic: str
    partition: int
    batch: Any
    acks: int = -1
    timeout_ms: int = 5000


def entry(topic="t", partition=0, size=10) -> Entry:
    return Entry(topic, partition, bytes([partition]) * size)


@pytest.mark.parametrize("version", [3, 7, 9, 10])
def test_encode_produce_splices_batches_by_reference(version):
    big = memoryview(bytes(range(256)) * 64)
    entries = [entry("a", 0), Entry("a", 1, big), entry("b", 3)]
    chunks = encode_produce(version, entries)
    assert any(chunk is big for chunk in chunks), "large batch must not be copied"
    request = ProduceRequest.decode(b"".join(bytes(c) for c in chunks), version)
    assert request.acks == -1 and request.timeout_ms == 5000
    got = {(t.name, p.index): bytes(p.records) for t in request.topic_data for p in t.partition_data}
    assert got == {("a", 0): entries[0].batch, ("a", 1): bytes(big), ("b", 3): entries[2].batch}


@pytest.mark.parametrize("version", [3, 8, 9])
def test_decode_produce(version):
    response = ProduceResponse(responses=[TopicProduceResponse(name="t", partition_responses=[
        PartitionProduceResponse(index=0, error_code=0, base_offset=42, log_append_time_ms=-1,
                                 log_start_offset=0),
        PartitionProduceResponse(index=1, error_code=6, base_offset=-1)])])
    results = decode_produce(version, response.encode(version))
    assert results[("t", 0)]["base_offset"] == 42 and results[("t", 0)]["error_code"] == 0
    assert results[("t", 1)]["error_code"] == 6


def test_the_table_is_complete_on_import_without_core_or_actors():
    code = ("import sys, kqactors.protocol.requests as r; "
            "print(sorted(m for m in sys.modules if m.startswith(('kqactors.core', 'kqactors.actors')))); "
            "print(len(r.REQUEST_KINDS))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "[]" and int(out[1]) == len(REQUEST_KINDS)
    expected = {"ApiVersions", "SaslHandshake", "SaslAuthenticate", "Metadata", "InitProducerId", "Produce", "Fetch",
                "ListOffsets",
                "cgrp:FindCoordinator", "cgrp:JoinGroup", "cgrp:SyncGroup", "cgrp:Heartbeat", "cgrp:LeaveGroup",
                "cgrp:OffsetCommit", "cgrp:OffsetFetch", "cgrp:ConsumerGroupHeartbeat", "cgrp848:OffsetCommit"}
    expected |= {"txn:FindCoordinator", "txn:InitProducerId", "txn:AddPartitionsToTxn", "txn:AddOffsetsToTxn",
                 "txn:TxnOffsetCommit", "txn:EndTxn"}  # the transactional producer's
    expected |= set(ADMIN_KINDS)  # the AdminClient's section
    assert set(REQUEST_KINDS) == expected


def test_every_kind_speaks_versions_the_specs_define():
    for kind in REQUEST_KINDS.values():
        name, _module, _req, _resp, (low, high), flexible = API_TABLE[kind.api_key]
        assert low <= kind.min_version <= kind.max_version <= high, kind.name
        assert kind.flexible_from == flexible
    assert (REQUEST_KINDS["Produce"].min_version, REQUEST_KINDS["Produce"].max_version) == (3, 10)
    assert (REQUEST_KINDS["Fetch"].min_version, REQUEST_KINDS["Fetch"].max_version) == (4, 12)
    assert not REQUEST_KINDS["Produce"].remote and not REQUEST_KINDS["Fetch"].remote
    assert REQUEST_KINDS["ListOffsets"].remote and REQUEST_KINDS["cgrp:JoinGroup"].remote


def test_client_ranges_widen_over_kinds_sharing_an_api():
    offset_commit = REQUEST_KINDS["cgrp:OffsetCommit"].api_key
    assert CLIENT_RANGES[offset_commit] == (0, 9)  # classic 0-7, KIP-848 0-9
    assert client_versions([REQUEST_KINDS["cgrp:OffsetCommit"]]) == {offset_commit: (0, 7)}
    negotiated = negotiate({offset_commit: (8, 9)}, CLIENT_RANGES)
    assert negotiated[offset_commit] == 9
    assert negotiated.pick(offset_commit, 0, 7) is None and negotiated.pick(offset_commit, 0, 9) == 9
    assert common_version(0, 7, 8, 9) is None and common_version(3, 10, 0, 11) == 10


def test_group_kinds_encode_through_the_group_translation():
    assert group_request_kind("OffsetCommit", consumer_protocol=True) == "cgrp848:OffsetCommit"
    kind = REQUEST_KINDS[group_request_kind("Heartbeat")]
    fields = {"group_id": "g", "generation_id": 3, "member_id": "m", "group_instance_id": None}
    body = b"".join(kind.encode(3, fields, []))
    from kqactors.protocol.generated.heartbeat import HeartbeatRequest
    request = HeartbeatRequest.decode(body, 3)
    assert (request.group_id, request.generation_id, request.member_id) == ("g", 3, "m")
    assert kind.decode(3, b"xyz") == {"version": 3, "body": b"xyz"}


@pytest.mark.parametrize("version", [1, 9, 12])
def test_metadata_kind_decodes_to_the_snapshot_wire_form(version):
    response = MetadataResponse(
        brokers=[MetadataResponseBroker(node_id=1, host="h", port=9092, rack="r")], cluster_id="c",
        controller_id=1, topics=[MetadataResponseTopic(name="t", error_code=0, topic_id=b"\x01" * 16, partitions=[
            MetadataResponsePartition(partition_index=0, leader_id=1, leader_epoch=5, replica_nodes=[1, 2],
                                      isr_nodes=[1])])])
    wire = REQUEST_KINDS["Metadata"].decode(version, response.encode(version))
    topic_id = b"\x01" * 16 if version >= 10 else bytes(16)  # the codec default before v10, as before
    epoch = 5 if version >= 7 else -1
    cluster = "c" if version >= 2 else None
    snap = MetadataSnapshot([BrokerInfo(1, "h", 9092, "r")],
                            [TopicInfo("t", 0, {0: PartitionInfo(0, 1, epoch, [1, 2], [1], 0)}, topic_id)], 1, cluster)
    assert wire == snapshot_to_wire(snap)
