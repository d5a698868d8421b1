"""Unit tests for request kinds and Produce assembly (kqactors.protocol.requests)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kqactors.core.metadata import BrokerInfo, MetadataSnapshot, PartitionInfo, TopicInfo
from kqactors.protocol.generated.produce import (
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    TopicProduceResponse,
)
from kqactors.protocol.requests import (
    REQUEST_KINDS,
    RequestKind,
    XmitEntry,
    collate_produce,
    decode_produce,
    encode_produce,
    register_request_kind,
    snapshot_from_wire,
    snapshot_to_wire,
)


def entry(topic="t", partition=0, acks=-1, size=10, batch_id=0) -> XmitEntry:
    return XmitEntry("toppar", topic, partition, batch_id, 0, acks, 5000, bytes([partition]) * size, 0.0)


def test_collate_takes_one_batch_per_partition_and_keeps_order():
    entries = [entry("t", 0, batch_id=1), entry("t", 1, batch_id=2), entry("t", 0, batch_id=3),
               entry("u", 0, batch_id=4), entry("t", 1, acks=0, batch_id=5), entry("t", 2, batch_id=6)]
    taken, rest = collate_produce(entries)
    assert [e.batch_id for e in taken] == [1, 2, 4, 6]
    assert [e.batch_id for e in rest] == [3, 5]
    taken, rest = collate_produce(rest)
    assert [e.batch_id for e in taken] == [3] and [e.batch_id for e in rest] == [5]


def test_collate_bounds_request_size_but_always_takes_one():
    entries = [entry(partition=p, size=100) for p in range(5)]
    taken, rest = collate_produce(entries, max_bytes=250)
    assert len(taken) == 2 and len(rest) == 3
    taken, _ = collate_produce([entry(size=1000)], max_bytes=10)
    assert len(taken) == 1


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from([-1, 0, 1])), min_size=1, max_size=30))
def test_collate_never_reorders_a_partition(items):
    entries = [entry("t", p, acks, batch_id=i) for i, (p, acks) in enumerate(items)]
    sent: list[XmitEntry] = []
    pending = entries
    while pending:
        taken, pending = collate_produce(pending)
        assert taken, "progress on every call"
        assert len({(e.topic, e.partition) for e in taken}) == len(taken)
        assert len({(e.acks, e.timeout_ms) for e in taken}) == 1
        sent += taken
    for p in range(4):
        ids = [e.batch_id for e in sent if e.partition == p]
        assert ids == sorted(ids)
    assert sorted(e.batch_id for e in sent) == list(range(len(entries)))


@pytest.mark.parametrize("version", [3, 7, 9, 10])
def test_encode_produce_splices_batches_by_reference(version):
    big = memoryview(bytes(range(256)) * 64)
    entries = [entry("a", 0), XmitEntry("x", "a", 1, 1, 0, -1, 5000, big, 0.0), entry("b", 3)]
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


def test_snapshot_wire_round_trip():
    snap = MetadataSnapshot([BrokerInfo(1, "h", 1, "r1")],
                            [TopicInfo("t", 0, {0: PartitionInfo(0, 1, 5, [1, 2], [1], 0)}, b"\x01" * 16)], 1, "c")
    assert snapshot_from_wire(snapshot_to_wire(snap)) == snap


def test_request_kinds_are_pluggable_and_names_unique():
    assert {"Metadata", "InitProducerId"} <= set(REQUEST_KINDS)
    kind = RequestKind("UnitTestKind", 999, 0, 1, None, lambda v, a, f: [b""], lambda v, b: {})
    register_request_kind(kind)
    register_request_kind(kind)  # same object again is fine
    assert REQUEST_KINDS["UnitTestKind"] is kind
    with pytest.raises(ValueError):
        register_request_kind(RequestKind("UnitTestKind", 998, 0, 1, None, kind.encode, kind.decode))
    del REQUEST_KINDS["UnitTestKind"]
