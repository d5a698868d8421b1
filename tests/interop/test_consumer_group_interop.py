"""One consumer group shared by kqactors and confluent-kafka (librdkafka) consumers on the librdkafka mock
cluster: the standard consumer-protocol metadata lets them split the partitions; members join and leave;
offsets committed by either client are what the other one resumes from."""

from __future__ import annotations

import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from kqactors import Consumer  # noqa: E402
from kqactors.message import TopicPartition  # noqa: E402

pytestmark = pytest.mark.timeout(120)
PARTITIONS = 6


def _produce(bootstrap: str, topic: str, start: int, count: int) -> set[tuple[int, bytes]]:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    sent = set()
    for i in range(start, start + count):
        value = b"m%d" % i
        producer.produce(topic, value=value, partition=i % PARTITIONS)
        sent.add((i % PARTITIONS, value))
    assert producer.flush(15) == 0
    return sent


class Member:
    """A group member of either client, polled in turns from the test thread."""

    def __init__(self, bootstrap: str, group: str, native: bool) -> None:
        conf = {"bootstrap.servers": bootstrap, "group.id": group, "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 300, "auto.offset.reset": "earliest", "enable.auto.commit": False}
        self.native = native
        self.consumer = confluent_kafka.Consumer(conf) if native else Consumer({**conf, "kqactors.hosts": 1})
        self.seen: list[tuple[int, bytes]] = []

    def poll(self) -> None:
        msg = self.consumer.poll(0.05)
        if msg is not None and msg.error() is None:
            self.seen.append((msg.partition(), msg.value()))

    def partitions(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}


def _poll_until(members: list[Member], done, timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end and not done():
        for member in members:
            member.poll()
    assert done(), "condition not reached in time: " + ", ".join(str(sorted(m.partitions())) for m in members)


def _native_tps(topic: str, partitions) -> list:
    return [confluent_kafka.TopicPartition(topic, p) for p in sorted(partitions)]


def test_mixed_group_splits_partitions_and_shares_committed_offsets(mock_cluster_factory, unique_topic):
    cluster = mock_cluster_factory(3)
    cluster.group_initial_rebalance_delay_ms(0)
    cluster.create_topic(unique_topic, PARTITIONS)
    first_batch = _produce(cluster.bootstrap, unique_topic, 0, 300)
    kq1 = Member(cluster.bootstrap, "g-mixed", native=False)
    kq2 = Member(cluster.bootstrap, "g-mixed", native=False)
    ck = Member(cluster.bootstrap, "g-mixed", native=True)
    members = [kq1, kq2, ck]
    try:
        kq1.consumer.subscribe([unique_topic])
        _poll_until([kq1], lambda: len(kq1.partitions()) == PARTITIONS, 20)
        kq2.consumer.subscribe([unique_topic])
        ck.consumer.subscribe([unique_topic])

        def split() -> bool:
            owned = [m.partitions() for m in members]
            return all(len(o) == 2 for o in owned) and set().union(*owned) == set(range(PARTITIONS))

        _poll_until(members, split, 40)
        # everything is consumed by someone (at least once: eager rebalances may re-deliver)
        _poll_until(members, lambda: set(kq1.seen + kq2.seen + ck.seen) == first_batch, 30)
        for member in members:  # each commits what it consumed, in its own client
            member.consumer.commit(asynchronous=False)

        # offsets committed by kqactors are what confluent-kafka reads, and the other way round
        from_kq = kq1.consumer.committed([TopicPartition(unique_topic, p) for p in range(PARTITIONS)], timeout=10)
        from_ck = ck.consumer.committed(_native_tps(unique_topic, range(PARTITIONS)), timeout=10)
        assert [tp.offset for tp in from_kq] == [tp.offset for tp in from_ck] == [50] * PARTITIONS

        # the confluent-kafka member leaves: its partitions move to the kqactors members, which resume at the
        # offsets it committed — new messages are delivered, old ones are not read again
        ck_partitions = ck.partitions()
        ck.consumer.close()
        members = [kq1, kq2]
        _poll_until(members, lambda: len(kq1.partitions()) == 3 and len(kq2.partitions()) == 3, 40)
        assert ck_partitions <= kq1.partitions() | kq2.partitions()
        before = len(kq1.seen), len(kq2.seen)
        second_batch = _produce(cluster.bootstrap, unique_topic, 300, 60)
        _poll_until(members, lambda: set(kq1.seen[before[0]:] + kq2.seen[before[1]:]) >= second_batch, 30)
        for member in members:
            member.poll()
        later = kq1.seen[before[0]:] + kq2.seen[before[1]:]
        assert sorted(later) == sorted(second_batch)
    finally:
        kq1.consumer.close()
        kq2.consumer.close()
        ck.consumer.close()
