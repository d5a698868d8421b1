"""The consume loop for clients with confluent-kafka's Consumer API (confluent-kafka and kqactors).

Runs in: a benchmark runner process. Owns one measured consume run: READY once the client is created and
has the topic's metadata; on GO, assign every partition at OFFSET_BEGINNING and consume(1000, ...) until
``count`` messages arrived; elapsed time is assign() → last message.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from _common import announce_ready_and_wait, error_name, parse_args, report_and_wait

PARTITION_EOF = -191


def consumer_config(args: Any) -> dict[str, Any]:
    """Both librdkafka-style clients get the same config: their defaults (group.id only because
    confluent-kafka requires one; nothing is committed)."""
    return {"bootstrap.servers": args.bootstrap, "group.id": "bench-consume", "enable.auto.commit": False}


def run(client: str, consumer_class: Any, topic_partition: Any, offset_beginning: int) -> None:
    args = parse_args()
    consumer = consumer_class(consumer_config(args))
    metadata = consumer.list_topics(args.topic, timeout=30)
    partitions = sorted(metadata.topics[args.topic].partitions)
    errors: Counter = Counter()
    announce_ready_and_wait()
    started = time.perf_counter()
    consumer.assign([topic_partition(args.topic, p, offset_beginning) for p in partitions])
    received = 0
    deadline = time.monotonic() + 300
    consume = consumer.consume
    while received < args.count and time.monotonic() < deadline:
        for msg in consume(1000, 1.0):
            if msg.error() is None:
                received += 1
            elif msg.error().code() != PARTITION_EOF:
                errors[error_name(msg.error())] += 1
    elapsed = time.perf_counter() - started
    report_and_wait(client, args, received, dict(errors), elapsed)
    consumer.close()
