"""Consumer groups on Tansu (a Kafka-compatible broker with its own group coordinator): two kqactors members
split a topic, consume everything, and their commits are what a confluent-kafka client reads back; a pattern
subscription picks up a topic created later; a static member rejoins with its partitions. Tansu's JoinGroup
waits about half the session timeout, hence session.timeout.ms=6000 (10000 for the static rejoin)."""

from __future__ import annotations

import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from integration_helpers import assigned_keys, make_topic, poll_until, produce_round_robin  # noqa: E402

from kqactors import Consumer  # noqa: E402
from kqactors.errors import KafkaError  # noqa: E402
from kqactors.message import TopicPartition  # noqa: E402

pytestmark = pytest.mark.timeout(120)
PARTITIONS = 4


def _poll(consumers: list[Consumer], seen: list[set], seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for consumer, sink in zip(consumers, seen, strict=True):
            msg = consumer.poll(0.05)
            if msg is not None and msg.error() is None:
                sink.add((msg.partition(), msg.offset()))


def _wait(consumers: list[Consumer], seen: list[set], done, timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end and not done():
        _poll(consumers, seen, 0.1)
    assert done(), "condition not reached in time"


def test_group_on_tansu_splits_and_commits(tansu, unique_topic):
    admin = AdminClient({"bootstrap.servers": tansu.bootstrap})
    for future in admin.create_topics([NewTopic(unique_topic, PARTITIONS, 1)]).values():
        future.result(15)
    producer = confluent_kafka.Producer({"bootstrap.servers": tansu.bootstrap})
    for i in range(PARTITIONS * 10):
        producer.produce(unique_topic, value=b"v%d" % i, partition=i % PARTITIONS)
    assert producer.flush(15) == 0
    conf = {"bootstrap.servers": tansu.bootstrap, "group.id": f"g-{unique_topic}", "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500, "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "kqactors.hosts": 1}
    first, second = Consumer(conf), Consumer(conf)
    seen: list[set] = [set(), set()]
    try:
        first.subscribe([unique_topic])
        second.subscribe([unique_topic])
        consumers = [first, second]

        def split() -> bool:
            a, b = ({tp.partition for tp in c.assignment()} for c in consumers)
            return len(a) == len(b) == PARTITIONS // 2 and a | b == set(range(PARTITIONS))

        _wait(consumers, seen, split, 60)
        everything = {(i % PARTITIONS, i // PARTITIONS) for i in range(PARTITIONS * 10)}
        _wait(consumers, seen, lambda: seen[0] | seen[1] == everything, 30)
        for consumer in consumers:
            consumer.commit(asynchronous=False)
        reader = confluent_kafka.Consumer({"bootstrap.servers": tansu.bootstrap, "group.id": f"g-{unique_topic}"})
        try:
            committed = reader.committed([confluent_kafka.TopicPartition(unique_topic, p) for p in range(PARTITIONS)],
                                         timeout=15)
        finally:
            reader.close()
        assert [tp.offset for tp in committed] == [10] * PARTITIONS
        assert [tp.offset for tp in first.committed([TopicPartition(unique_topic, p) for p in range(PARTITIONS)])] \
            == [10] * PARTITIONS
    finally:
        first.close()
        second.close()


def test_regex_subscription_on_tansu_picks_up_a_topic_created_after_subscribe(tansu, unique_topic):
    """A pattern subscription is re-matched on each metadata refresh: a matching topic created (CreateTopics)
    after the group formed is assigned and consumed after a rejoin, a non-matching one is not."""
    first_topic, later_topic, unmatched = f"{unique_topic}-a", f"{unique_topic}-b", f"x{unique_topic}-c"
    make_topic(tansu, first_topic, 2)
    consumer = Consumer({"bootstrap.servers": tansu.bootstrap, "group.id": f"g-{unique_topic}",
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "auto.offset.reset": "earliest",
                         "topic.metadata.refresh.interval.ms": 500, "kqactors.hosts": 1})
    seen: list = []
    try:
        consumer.subscribe([f"^{unique_topic}-.*"])
        poll_until([consumer], lambda: assigned_keys(consumer) == {(first_topic, 0), (first_topic, 1)}, 30)
        make_topic(tansu, later_topic, 3)
        make_topic(tansu, unmatched, 1)
        produce_round_robin(tansu.bootstrap, later_topic, 3, 5)
        produce_round_robin(tansu.bootstrap, unmatched, 1, 5)
        everything = {(later_topic, p, o) for p in range(3) for o in range(5)}
        poll_until([consumer], lambda: everything <= set(seen), 30, [seen])
        assert assigned_keys(consumer) == {(first_topic, 0), (first_topic, 1)} | {(later_topic, p) for p in range(3)}
        assert sorted(seen) == sorted(everything)
    finally:
        consumer.close()


def test_group_protocol_consumer_on_tansu_fails_fatally_without_consumer_group_heartbeat(tansu, unique_topic):
    """Tansu (0.6) has no KIP-848 ConsumerGroupHeartbeat (API 68): the consumer must say so, not hang."""
    assert 68 not in tansu.api_versions
    errors: list = []
    consumer = Consumer({"bootstrap.servers": tansu.bootstrap, "group.id": f"g848-{unique_topic}",
                         "group.protocol": "consumer", "kqactors.hosts": 1, "error_cb": errors.append})
    try:
        consumer.subscribe([unique_topic])
        end = time.monotonic() + 15
        while time.monotonic() < end and not errors:
            consumer.poll(0.1)
        assert errors, "no error reported"
        assert errors[0].code() == KafkaError._UNSUPPORTED_FEATURE and errors[0].fatal()
        assert "ConsumerGroupHeartbeat" in errors[0].str()
    finally:
        consumer.close()


def test_static_member_rejoins_with_its_partitions_and_no_rebalance_of_the_others(tansu, unique_topic):
    """A static member (group.instance.id) that closes and comes back within session.timeout.ms gets its own
    partitions back, the other member sees no revoke and no new assignment, and what the static member
    committed is not read again. (The librdkafka mock cluster does not keep a static member's assignment:
    confluent-kafka's members get rebalanced there too, so this runs on Tansu only.)"""
    admin = AdminClient({"bootstrap.servers": tansu.bootstrap})
    for future in admin.create_topics([NewTopic(unique_topic, PARTITIONS, 1)]).values():
        future.result(15)
    producer = confluent_kafka.Producer({"bootstrap.servers": tansu.bootstrap})

    def produce(per_partition: int) -> None:
        for i in range(PARTITIONS * per_partition):
            producer.produce(unique_topic, value=b"v%d" % i, partition=i % PARTITIONS)
        assert producer.flush(15) == 0

    produce(10)
    conf = {"bootstrap.servers": tansu.bootstrap, "group.id": f"g-{unique_topic}", "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 300, "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "kqactors.hosts": 1}
    static_conf = {**conf, "group.instance.id": "instance-1"}
    static, dynamic = Consumer(static_conf), Consumer(conf)
    rejoined = None
    events: list[str] = []
    seen: list[set] = [set(), set()]
    try:
        static.subscribe([unique_topic])
        dynamic.subscribe([unique_topic], on_assign=lambda c, parts: events.append("assign"),
                          on_revoke=lambda c, parts: events.append("revoke"))

        def split() -> bool:
            return len(static.assignment()) == len(dynamic.assignment()) == PARTITIONS // 2

        _wait([static, dynamic], seen, lambda: split() and len(seen[0]) + len(seen[1]) == PARTITIONS * 10, 60)
        static_partitions = {tp.partition for tp in static.assignment()}
        dynamic_partitions = {tp.partition for tp in dynamic.assignment()}
        static.commit(asynchronous=False)
        _poll([static, dynamic], seen, 2.0)  # a member in steady state: heartbeats flow before it goes
        assert events == ["assign"]
        static.close()  # a static member sends no LeaveGroup: the group keeps its place
        produce(5)
        rejoined = Consumer(static_conf)
        rejoined.subscribe([unique_topic])
        after: list[set] = [set(), set()]
        _wait([rejoined, dynamic], after, lambda: len(after[0]) + len(after[1]) == PARTITIONS * 5, 60)
        _poll([rejoined, dynamic], after, 1.0)
        assert {tp.partition for tp in rejoined.assignment()} == static_partitions
        assert {tp.partition for tp in dynamic.assignment()} == dynamic_partitions
        assert events == ["assign"]  # no revoke, no new assignment for the other member
        # the rejoined member starts at the static member's commit: only the new messages, each once
        assert {p for p, _ in after[0]} == static_partitions and len(after[0]) == PARTITIONS // 2 * 5
        assert all(offset >= 10 for _, offset in after[0] | after[1])
    finally:
        static.close()
        dynamic.close()
        if rejoined is not None:
            rejoined.close()
