"""Producing test data and draining a consumer: the helpers the integration, fault and interop tests share.

confluent-kafka (a test dependency only) writes the data, so what a kqactors consumer reads was produced by
the reference client.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def produce_numbered(bootstrap: str, topic: str, count: int, partitions: int, start: int = 0, *,
                     keys_and_headers: bool = False, **conf: Any) -> None:
    """Messages ``b"v<i>"`` for i in [start, start + count) on partition ``i % partitions``, with confluent-kafka;
    ``keys_and_headers`` adds key ``b"k<i>"`` and headers ``[("i", b"<i>"), ("none", None)]``."""
    import confluent_kafka

    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    for i in range(start, start + count):
        extra = {"key": b"k%d" % i, "headers": [("i", str(i).encode()), ("none", None)]} if keys_and_headers else {}
        producer.produce(topic, value=b"v%d" % i, partition=i % partitions, **extra)
    assert producer.flush(30) == 0, "confluent-kafka could not deliver the test data"


def produce_round_robin(producer: Any, topic: str, count: int, partitions: int,
                        value: Callable[[int, int], bytes], *, sent: list[int] | None = None,
                        before: Callable[[int], object] | None = None, pause: float = 0.0,
                        rate: float = 0.0, poll_every: int = 1000, backoff: float = 0.05) -> list[int]:
    """``count`` messages from a kqactors (or any confluent-kafka-like) producer, round-robin over the partitions,
    each ``value(partition, seq)`` with ``seq`` counted per partition in ``sent`` (returned; pass it in to go on
    from an earlier call). A full queue is waited out with poll(``backoff``), so nothing is dropped.
    ``before(i)`` runs before message i (a fault scenario's trigger); ``pause`` seconds of poll() after each
    message make a trickle; ``rate`` > 0 paces the run at that many messages/s; otherwise poll(0) every
    ``poll_every`` messages serves the reports."""
    sent = [0] * partitions if sent is None else sent
    start = time.monotonic()
    for i in range(count):
        if before is not None:
            before(i)
        partition = i % partitions
        while True:
            try:
                producer.produce(topic, value(partition, sent[partition]), partition=partition)
                break
            except BufferError:
                producer.poll(backoff)
        sent[partition] += 1
        if pause:
            producer.poll(pause)
        elif i % poll_every == 0:
            producer.poll(0)
            ahead = start + i / rate - time.monotonic() if rate else 0.0
            if ahead > 0:
                time.sleep(ahead)
    return sent


def drain(consumer: Any, want: int, timeout: float = 30.0, *, errors: list | None = None,
          during: Callable[[list], object] | None = None) -> list:
    """Messages (no events) until ``want`` arrived or ``timeout`` passed; the caller asserts on the count.

    Events and errors go to ``errors`` when given; ``during(messages_so_far)`` runs after each consume (to
    inject a fault part-way)."""
    out: list = []
    deadline = time.monotonic() + timeout
    while len(out) < want and time.monotonic() < deadline:
        for msg in consumer.consume(1000, 0.5):
            if msg.error() is None:
                out.append(msg)
            elif errors is not None:
                errors.append(msg.error())
        if during is not None:
            during(out)
    return out


def read_back(bootstrap: str, topic: str, partitions: int, count: int, timeout: float = 30.0) -> list:
    """Up to ``count`` messages of ``topic`` read from the beginning of each partition with confluent-kafka (the
    reference client checks what kqactors wrote); the caller asserts on the count."""
    import confluent_kafka

    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}",
                                         "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                     for p in range(partitions)])
    try:
        return drain(consumer, count, timeout)
    finally:
        consumer.close()
