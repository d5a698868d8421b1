"""Helpers shared by the integration tests (imported by module name: pytest puts this directory on sys.path).

Topic creation on either test broker, a round-robin confluent-kafka producer, and polling loops for group
tests. confluent-kafka is a test dependency only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from support.waiting import wait_until

confluent_kafka = pytest.importorskip("confluent_kafka")
ck_admin = pytest.importorskip("confluent_kafka.admin")


def make_topic(cluster: Any, topic: str, partitions: int) -> None:
    """Create ``topic`` on the mock cluster (its own call: it has no CreateTopics) or on Tansu (admin API)."""
    if hasattr(cluster, "create_topic"):
        cluster.create_topic(topic, partitions)
        return
    admin = ck_admin.AdminClient({"bootstrap.servers": cluster.bootstrap})
    for future in admin.create_topics([ck_admin.NewTopic(topic, partitions, 1)]).values():
        future.result(15)


def produce_round_robin(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    """``per_partition`` messages b"v<i>" on each partition, round-robin, with confluent-kafka."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    for i in range(partitions * per_partition):
        producer.produce(topic, value=b"v%d" % i, partition=i % partitions)
    assert producer.flush(15) == 0


def poll(consumer: Any, seconds: float, sink: list | None = None) -> None:
    """Poll for ``seconds``, appending (topic, partition, offset) of each message to ``sink``."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        msg = consumer.poll(0.05)
        if msg is not None and msg.error() is None and sink is not None:
            sink.append((msg.topic(), msg.partition(), msg.offset()))


def poll_until(consumers: list, done: Callable[[], bool], timeout: float, sinks: list[list] | None = None,
               what: str = "the consumers to reach the condition") -> None:
    """Poll every consumer in turn until ``done()``; fails the test after ``timeout`` seconds saying ``what``."""
    def poll_all(_seconds: float) -> None:
        for i, consumer in enumerate(consumers):
            poll(consumer, 0.05, sinks[i] if sinks else None)

    wait_until(done, timeout, what, interval=0, sleep=poll_all)


def assigned_keys(consumer: Any) -> set[tuple[str, int]]:
    return {(tp.topic, tp.partition) for tp in consumer.assignment()}
