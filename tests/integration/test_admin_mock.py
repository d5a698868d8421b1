"""Runs in: pytest, against the librdkafka mock cluster (3 brokers). The AdminClient's partition and group-offset
methods, and its routing and retries: leaders found from fresh metadata, a leader change, a moved or loading
coordinator, a dead broker.

What the mock lacks: every admin API but ListOffsets, OffsetCommit/OffsetFetch and FindCoordinator (no
CreateTopics, ListGroups, DescribeGroups, ConsumerGroupDescribe, DescribeConfigs, ... — tested on Tansu or in
tests/unit/client/admin/test_requests.py); it reports controller id 0, no broker, so a call for the controller
waits until its request timeout (describe_topics, describe_cluster; confluent-kafka's too); it keeps no message
timestamps for ListOffsets (by-time and max-timestamp look-ups answer -1) and does not list a group's offsets
when asked for all of them (OffsetFetch with null topics).
"""

from __future__ import annotations

import time

import pytest
from support.kafka_io import produce_numbered

import kqactors.admin as ka
from kqactors import ConsumerGroupTopicPartitions, IsolationLevel, TopicCollection, TopicPartition
from kqactors.errors import KafkaError

ck = pytest.importorskip("confluent_kafka")
ca = pytest.importorskip("confluent_kafka.admin")

pytestmark = pytest.mark.fresh_cluster(num_brokers=3, topics={"t": 3})


@pytest.fixture
def admin(fresh_cluster):
    client = ka.AdminClient({"bootstrap.servers": fresh_cluster.bootstrap, "retry.backoff.ms": 50})
    yield client
    client.__exit__(None, None, None)


def offsets(admin, spec, partitions=(0, 1, 2), **kwargs) -> dict[int, int]:
    found = admin.list_offsets({TopicPartition("t", p): spec for p in partitions}, **kwargs)
    return {tp.partition: f.result(15).offset for tp, f in found.items()}


def test_list_offsets_from_each_leader(admin, fresh_cluster) -> None:
    produce_numbered(fresh_cluster.bootstrap, "t", 30, 3)
    assert offsets(admin, ka.OffsetSpec.earliest()) == {0: 0, 1: 0, 2: 0}
    assert offsets(admin, ka.OffsetSpec.latest()) == {0: 10, 1: 10, 2: 10}
    assert offsets(admin, ka.OffsetSpec.latest(), isolation_level=IsolationLevel.READ_COMMITTED) == {0: 10, 1: 10,
                                                                                                    2: 10}
    # the mock answers -1 for look-ups by time (it keeps no timestamps); so does it for confluent-kafka
    peer = ca.AdminClient({"bootstrap.servers": fresh_cluster.bootstrap})
    for ours, theirs in ((ka.OffsetSpec.max_timestamp(), ca.OffsetSpec.max_timestamp()),
                         (ka.OffsetSpec.for_timestamp(0), ca.OffsetSpec.for_timestamp(0))):
        expected = {tp.partition: f.result(15).offset for tp, f in peer.list_offsets(
            {ck.TopicPartition("t", p): theirs for p in (0, 1, 2)}).items()}
        assert offsets(admin, ours) == expected


def test_list_offsets_follows_a_leader_change(admin, fresh_cluster) -> None:
    produce_numbered(fresh_cluster.bootstrap, "t", 6, 3)
    assert offsets(admin, ka.OffsetSpec.latest(), (0,)) == {0: 2}
    leader = admin.list_topics("t", timeout=10).topics["t"].partitions[0].leader
    fresh_cluster.partition_set_leader("t", 0, leader % 3 + 1)  # the old leader now answers NOT_LEADER
    assert offsets(admin, ka.OffsetSpec.latest(), (0,)) == {0: 2}
    fresh_cluster.push_request_errors(2, ["NOT_LEADER_OR_FOLLOWER", "LEADER_NOT_AVAILABLE"])
    assert offsets(admin, ka.OffsetSpec.latest(), (0,)) == {0: 2}


def test_unknown_partitions_and_topics(admin) -> None:
    found = admin.list_offsets({TopicPartition("t", 9): ka.OffsetSpec.latest(),
                                TopicPartition("t", 0): ka.OffsetSpec.latest()})
    codes = {tp.partition: (f.exception(15).args[0].code() if f.exception(15) else None) for tp, f in found.items()}
    assert codes == {9: KafkaError.UNKNOWN_TOPIC_OR_PART, 0: None}


def test_a_dead_leader_fails_its_partitions_only(admin, fresh_cluster) -> None:
    cluster = admin.list_topics("t", timeout=10)
    leader = cluster.topics["t"].partitions[0].leader
    others = [p for p, meta in cluster.topics["t"].partitions.items() if meta.leader != leader]
    fresh_cluster.broker_set_down(leader)
    started = time.monotonic()
    found = admin.list_offsets({TopicPartition("t", p): ka.OffsetSpec.earliest() for p in [0, *others]},
                               request_timeout=4)
    by_partition = {tp.partition: f for tp, f in found.items()}
    # as the mock takes the broker down, the leader is reported unknown, the connection refused, or the request
    # unanswered: the partition fails with that error by the request timeout, the others are answered
    assert by_partition[0].exception(15).args[0].code() in (KafkaError._TRANSPORT, KafkaError.LEADER_NOT_AVAILABLE,
                                                            KafkaError._TIMED_OUT)
    assert all(by_partition[p].result(15).offset == 0 for p in others)
    assert time.monotonic() - started < 6


def test_group_offsets_through_a_moving_coordinator(admin, fresh_cluster) -> None:
    group = "g-moving"
    partitions = [TopicPartition("t", 0, 3), TopicPartition("t", 2, 8)]
    fresh_cluster.push_request_errors(8, ["NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS"])  # OffsetCommit
    altered = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, partitions)])
    assert sorted((tp.partition, tp.offset, tp.error) for tp in altered[group].result(15).topic_partitions) == \
        [(0, 3, None), (2, 8, None)]
    fresh_cluster.push_request_errors(9, ["COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR"])  # OffsetFetch
    asked = [TopicPartition("t", p) for p in (0, 1, 2)]
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, asked)], require_stable=True)
    assert sorted((tp.partition, tp.offset) for tp in listed[group].result(15).topic_partitions) == \
        [(0, 3), (1, ka.OFFSET_INVALID), (2, 8)]
    peer = ca.AdminClient({"bootstrap.servers": fresh_cluster.bootstrap})
    theirs = peer.list_consumer_group_offsets([ck.ConsumerGroupTopicPartitions(
        group, [ck.TopicPartition("t", p) for p in (0, 1, 2)])])[group].result(15)
    assert sorted((tp.partition, tp.offset) for tp in theirs.topic_partitions) == [(0, 3), (1, -1001), (2, 8)]


def test_the_group_coordinator_moves_to_another_broker(admin, fresh_cluster) -> None:
    group = "g-moved"
    first = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [TopicPartition("t", 1, 4)])])
    assert first[group].result(15).topic_partitions[0].error is None
    for broker in (1, 2, 3):  # wherever the client cached it, the coordinator is now elsewhere
        fresh_cluster.coordinator_set("group", group, broker % 3 + 1)
        moved = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group,
                                                                                  [TopicPartition("t", 1, 5 + broker)])])
        assert moved[group].result(15).topic_partitions[0].error is None
        listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [TopicPartition("t", 1)])])
        assert listed[group].result(15).topic_partitions[0].offset == 5 + broker


def test_calls_the_mock_cannot_serve(admin) -> None:
    started = time.monotonic()
    created = admin.create_topics([ka.NewTopic("new", 1, 1)], request_timeout=1)
    error = created["new"].exception(10).args[0]
    assert (error.code(), error.str()) == (KafkaError._TIMED_OUT, "Failed while waiting for controller: Local: Timed out")
    assert admin.describe_topics(TopicCollection(["t"]), request_timeout=1)["t"].exception(10).args[0].code() == \
        KafkaError._TIMED_OUT
    described = admin.describe_consumer_groups(["g"])["g"]
    assert described.exception(10).args[0].code() == KafkaError._UNSUPPORTED_FEATURE
    listed = admin.list_consumer_groups().result(10)
    assert listed.valid == [] and [e.code() for e in listed.errors] == [KafkaError._UNSUPPORTED_FEATURE] * 3
    with pytest.warns(DeprecationWarning), pytest.raises(ka.KafkaException) as info:
        admin.list_groups(timeout=5)
    assert info.value.args[0].code() == KafkaError._UNSUPPORTED_FEATURE
    assert time.monotonic() - started < 8



def test_an_unanswering_leader_times_out_its_partitions_only(admin, fresh_cluster) -> None:
    cluster = admin.list_topics("t", timeout=10)
    leader = cluster.topics["t"].partitions[0].leader
    others = [p for p, meta in cluster.topics["t"].partitions.items() if meta.leader != leader]
    fresh_cluster.broker_push_request_error_rtts(leader, 2, [(0, 8000)] * 3)  # ListOffsets answered after 8 s
    found = admin.list_offsets({TopicPartition("t", p): ka.OffsetSpec.earliest() for p in [0, *others]},
                               request_timeout=2)
    by_partition = {tp.partition: f for tp, f in found.items()}
    assert by_partition[0].exception(15).args[0].code() == KafkaError._TIMED_OUT
    assert all(by_partition[p].result(15).offset == 0 for p in others)
