"""Interop: our range/roundrobin assignors against kafka-python's and aiokafka's (ports of the Java
algorithms) on random groups, and our consumer-protocol payloads decoded by kafka-python and vice versa.

kafka-python 3.0.12's roundrobin mishandles a member it must skip (it looks up the (instance id, member id)
tuple instead of the member id), so it is compared on identical subscriptions only; aiokafka's copy (no
static membership) covers differing subscriptions."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kqactors.core.group.assignors import MemberSubscription, assignor_for
from kqactors.core.group.member_metadata import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)

range_mod = pytest.importorskip("kafka.coordinator.assignors.range", reason="kafka-python not installed")
roundrobin_mod = pytest.importorskip("kafka.coordinator.assignors.roundrobin")
peer_protocol = pytest.importorskip("kafka.protocol.consumer.metadata")
aio_range = pytest.importorskip("aiokafka.coordinator.assignors.range", reason="aiokafka not installed")
aio_roundrobin = pytest.importorskip("aiokafka.coordinator.assignors.roundrobin")

PEERS = {"range": range_mod.RangePartitionAssignor, "roundrobin": roundrobin_mod.RoundRobinPartitionAssignor}
AIO_PEERS = {"range": aio_range.RangePartitionAssignor, "roundrobin": aio_roundrobin.RoundRobinPartitionAssignor}
TOPICS = ["alpha", "beta", "gamma", "delta", "eps"]


class _Cluster:
    def __init__(self, counts):
        self._counts = counts

    def partitions_for_topic(self, topic):
        count = self._counts.get(topic, 0)
        return set(range(count)) if count else None


@st.composite
def groups(draw, identical=False, statics_allowed=True):
    counts = {t: draw(st.integers(0, 9)) for t in TOPICS}
    size = draw(st.integers(1, 7))
    # kafka-python groups static and dynamic members with an unsorted itertools.groupby, which only works
    # when members of one kind are contiguous; Java's order has statics first, so list them first.
    statics = draw(st.integers(0, size)) if statics_allowed else 0
    shared = draw(st.lists(st.sampled_from(TOPICS), min_size=1, max_size=5, unique=True))
    members = []
    for i in range(size):
        topics = shared if identical else draw(st.lists(st.sampled_from(TOPICS), min_size=1, max_size=5, unique=True))
        member_id = f"consumer-{draw(st.integers(0, 10**6))}-{i}"
        instance = f"host-{draw(st.integers(0, 10**6))}-{i}" if i < statics else None
        members.append(MemberSubscription(member_id, topics, instance))
    return counts, members


def peer_assign(name, counts, members):
    peer_members = [SimpleNamespace(member_id=m.member_id, group_instance_id=m.group_instance_id,
                                    metadata=SimpleNamespace(topics=list(m.topics))) for m in members]
    result = PEERS[name].assign(_Cluster(counts), peer_members)
    return {member_id: sorted((topic, p) for topic, parts in assignment.assigned_partitions for p in parts)
            for member_id, assignment in result.items()}


def aio_assign(name, counts, members):
    peer_members = {m.member_id: SimpleNamespace(subscription=list(m.topics)) for m in members}
    result = AIO_PEERS[name].assign(_Cluster(counts), peer_members)
    return {member_id: sorted((topic, p) for topic, parts in assignment.assignment for p in parts)
            for member_id, assignment in result.items()}


@settings(max_examples=100, deadline=None)
@given(groups())
def test_range_same_as_kafka_python_with_static_members(group):
    counts, members = group
    assert assignor_for("range").assign(counts, members) == peer_assign("range", counts, members)


@settings(max_examples=100, deadline=None)
@given(groups(identical=True))
def test_roundrobin_same_as_kafka_python_with_static_members(group):
    counts, members = group
    assert assignor_for("roundrobin").assign(counts, members) == peer_assign("roundrobin", counts, members)


@settings(max_examples=100, deadline=None)
@given(groups(statics_allowed=False), st.sampled_from(sorted(AIO_PEERS)))
def test_same_as_aiokafka_with_differing_subscriptions(group, name):
    counts, members = group
    assert assignor_for(name).assign(counts, members) == aio_assign(name, counts, members)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(TOPICS), min_size=1, unique=True),
       st.lists(st.tuples(st.sampled_from(TOPICS), st.integers(0, 50)), unique=True),
       st.integers(-1, 2**31 - 1))
def test_subscription_payload_reads_the_same_in_kafka_python(topics, owned, generation):
    data = encode_subscription(topics, owned, generation, b"\x00\x01", "rack-a")
    peer = peer_protocol.ConsumerProtocolSubscription.decode(data)
    assert sorted(peer.topics) == sorted(topics)
    assert sorted((tp.topic, p) for tp in peer.owned_partitions for p in tp.partitions) == sorted(owned)
    assert peer.generation_id == generation and peer.rack_id == "rack-a" and peer.user_data == b"\x00\x01"


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_kafka_python_subscription_versions_decode(version):
    fields = {"topics": ["x", "y"], "user_data": None}
    if version >= 1:
        fields["owned_partitions"] = [("x", [0, 2])]
    if version >= 2:
        fields["generation_id"] = 9
    if version >= 3:
        fields["rack_id"] = "r"
    data = peer_protocol.ConsumerProtocolSubscription(version=version, **fields).encode(version=version)
    decoded = decode_subscription("m", None, data)
    assert decoded.topics == ["x", "y"]
    assert decoded.owned_partitions == ([("x", 0), ("x", 2)] if version >= 1 else [])
    assert decoded.generation_id == (9 if version >= 2 else -1)


def test_assignment_payload_both_ways():
    ours = encode_assignment([("t", 3), ("t", 1), ("u", 0)])
    peer = peer_protocol.ConsumerProtocolAssignment.decode(ours)
    assert [(tp.topic, list(tp.partitions)) for tp in peer.assigned_partitions] == [("t", [1, 3]), ("u", [0])]
    theirs = peer_protocol.ConsumerProtocolAssignment(
        version=0, assigned_partitions=[("v", [2, 0])], user_data=b"").encode(version=0)
    assert decode_assignment(theirs) == [("v", 0), ("v", 2)]
