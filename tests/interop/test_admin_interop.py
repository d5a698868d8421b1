"""The AdminClient and confluent-kafka's on one broker (Tansu): topics and groups made by one are what the other
sees, changes and deletes; group offsets set by kqactors' admin are where confluent-kafka's consumer resumes, and
offsets its consumer committed are what kqactors' admin lists."""

from __future__ import annotations

import pytest
from support.kafka_io import drain, produce_numbered
from support.waiting import wait_until

import kqactors.admin as ka
from kqactors import ConsumerGroupTopicPartitions, TopicCollection, TopicPartition

ck = pytest.importorskip("confluent_kafka")
ca = pytest.importorskip("confluent_kafka.admin")

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def admins(tansu):
    ours = ka.AdminClient({"bootstrap.servers": tansu.bootstrap})
    yield ours, ca.AdminClient({"bootstrap.servers": tansu.bootstrap})
    ours.__exit__(None, None, None)


def test_topics_made_by_one_client_are_seen_and_deleted_by_the_other(admins, unique_topic) -> None:
    ours, theirs = admins
    mine, peers = unique_topic + "-kq", unique_topic + "-ck"
    ours.create_topics([ka.NewTopic(mine, 4, 1, config={"retention.ms": "3600000"})])[mine].result(15)
    theirs.create_topics([ca.NewTopic(peers, 2, 1, config={"cleanup.policy": "compact"})])[peers].result(15)

    seen = theirs.describe_topics(ck.TopicCollection([mine]))[mine].result(15)
    assert len(seen.partitions) == 4
    config = next(iter(theirs.describe_configs([ca.ConfigResource("topic", mine)]).values())).result(15)
    assert config["retention.ms"].value == "3600000"

    described = ours.describe_topics(TopicCollection([peers]))[peers].result(15)
    assert len(described.partitions) == 2
    config = next(iter(ours.describe_configs([ka.ConfigResource("topic", peers)]).values())).result(15)
    assert config["cleanup.policy"].value == "compact"

    theirs.delete_topics([mine])[mine].result(15)
    ours.delete_topics([peers])[peers].result(15)
    wait_until(lambda: not {mine, peers} & set(theirs.list_topics(timeout=10).topics), 15, "both topics to go")
    assert not {mine, peers} & set(ours.list_topics(timeout=10).topics)


def test_group_offsets_between_the_admin_and_a_confluent_consumer(admins, tansu, unique_topic) -> None:
    ours, theirs = admins
    group = unique_topic + "-g"
    ours.create_topics([ka.NewTopic(unique_topic, 2, 1)])[unique_topic].result(15)
    produce_numbered(tansu.bootstrap, unique_topic, 20, 2)

    # kqactors' admin sets where the group starts; confluent-kafka's consumer resumes there
    ours.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [
        TopicPartition(unique_topic, 0, 6), TopicPartition(unique_topic, 1, 8)])])[group].result(15)
    consumer = ck.Consumer({"bootstrap.servers": tansu.bootstrap, "group.id": group, "enable.auto.commit": False,
                            "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                            "heartbeat.interval.ms": 500})  # Tansu waits about half of it for a join
    try:
        consumer.subscribe([unique_topic])
        got = drain(consumer, 6, timeout=30)
        assert sorted((m.partition(), m.offset()) for m in got) == \
            [(0, 6), (0, 7), (0, 8), (0, 9), (1, 8), (1, 9)]
        consumer.commit(offsets=[ck.TopicPartition(unique_topic, 0, 9), ck.TopicPartition(unique_topic, 1, 10)],
                        asynchronous=False)
    finally:
        consumer.close()

    # what the consumer committed is what kqactors' admin lists, and the group is there for both admins
    listed = ours.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(15)
    assert sorted((tp.partition, tp.offset) for tp in listed.topic_partitions) == [(0, 9), (1, 10)]
    assert group in {g.group_id for g in ours.list_consumer_groups().result(15).valid}

    # a group deleted by kqactors is gone for confluent-kafka
    ours.delete_consumer_groups([group])[group].result(15)
    wait_until(lambda: group not in {g.group_id for g in theirs.list_consumer_groups().result(15).valid}, 15,
               "confluent-kafka to see the group deleted")
