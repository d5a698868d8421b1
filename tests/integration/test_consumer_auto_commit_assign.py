"""enable.auto.commit with assign(): librdkafka commits a manual assignment's stored offsets every
auto.commit.interval.ms, for partitions that leave the assignment, and at close (kqactors/client/consumer/group.py
``auto_commit_assigned``). Each scenario runs with confluent-kafka and kqactors on the same mock cluster and the
committed offsets must agree.

Runs in: pytest; the librdkafka mock cluster; committed offsets are read with confluent-kafka.
"""

from __future__ import annotations

import time

import pytest

import kqactors

ck = pytest.importorskip("confluent_kafka")

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _committed(bootstrap: str, group: str, topic: str, expected: int) -> int:
    """The group's committed offset once it is ``expected`` (commits are asynchronous), or what it is after 10 s."""
    reader = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        deadline = time.monotonic() + 10
        while True:
            found = reader.committed([ck.TopicPartition(topic, 0)], timeout=10)[0].offset
            if found == expected or time.monotonic() > deadline:
                return found
            time.sleep(0.1)
    finally:
        reader.close()


def _take(consumer, count: int) -> list[int]:
    offsets: list[int] = []
    deadline = time.monotonic() + 20
    while len(offsets) < count and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            offsets.append(message.offset())
    return offsets


def _scenario(module, bootstrap: str, topic: str, tag: str) -> dict[str, int]:
    """Periodic commit (a short interval), commit on unassign and at close (a long one); the offsets seen."""
    seen: dict[str, int] = {}
    quick = module.Consumer({"bootstrap.servers": bootstrap, "group.id": f"{tag}-periodic",
                             "auto.commit.interval.ms": 300})
    quick.assign([module.TopicPartition(topic, 0, 0)])
    assert _take(quick, 3) == [0, 1, 2]
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        assert quick.poll(0.1) is None  # only 3 messages so far: the loop just serves the timer
    seen["periodic"] = _committed(bootstrap, f"{tag}-periodic", topic, 3)
    quick.close()
    slow = module.Consumer({"bootstrap.servers": bootstrap, "group.id": f"{tag}-slow",
                            "auto.commit.interval.ms": 60000})
    slow.assign([module.TopicPartition(topic, 0, 1)])
    assert _take(slow, 2) == [1, 2]
    slow.unassign()
    seen["unassign"] = _committed(bootstrap, f"{tag}-slow", topic, 3)
    slow.assign([module.TopicPartition(topic, 0, 0)])
    assert _take(slow, 1) == [0]
    slow.assign([module.TopicPartition(topic, 0, 0)])  # a new assignment replaces it: offset 1 committed
    seen["replaced"] = _committed(bootstrap, f"{tag}-slow", topic, 1)
    slow.assign([module.TopicPartition(topic, 0, 1)])
    assert _take(slow, 1) == [1]
    slow.close()
    seen["close"] = _committed(bootstrap, f"{tag}-slow", topic, 2)
    return seen


def test_assign_auto_commits_like_librdkafka(mock_cluster, unique_topic) -> None:
    mock_cluster.create_topic(unique_topic, 1)
    producer = ck.Producer({"bootstrap.servers": mock_cluster.bootstrap})
    for i in range(3):
        producer.produce(unique_topic, b"%d" % i, partition=0)
    assert producer.flush(10) == 0
    theirs = _scenario(ck, mock_cluster.bootstrap, unique_topic, f"{unique_topic}-ck")
    ours = _scenario(kqactors, mock_cluster.bootstrap, unique_topic, f"{unique_topic}-kq")
    assert theirs == {"periodic": 3, "unassign": 3, "replaced": 1, "close": 2}
    assert ours == theirs
