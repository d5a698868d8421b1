"""Benchmark runner: kafka-python KafkaConsumer (assign + seek_to_beginning, poll loop).

Runs in: a fresh runner process per run. Defaults except no group/auto-commit; elapsed is assign → last
message.
"""

from __future__ import annotations

import time
from collections import Counter

from _common import announce_ready_and_wait, parse_args, report_and_wait
from kafka import KafkaConsumer, TopicPartition


def main() -> None:
    args = parse_args()
    consumer = KafkaConsumer(bootstrap_servers=args.bootstrap, group_id=None, enable_auto_commit=False)
    partitions = sorted(consumer.partitions_for_topic(args.topic) or ())
    if not partitions:
        raise SystemExit("kafka-python: topic has no partitions")
    announce_ready_and_wait()
    started = time.perf_counter()
    tps = [TopicPartition(args.topic, p) for p in partitions]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    received = 0
    deadline = time.monotonic() + 300
    while received < args.count and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=1000, max_records=10000).values():
            received += len(records)
    elapsed = time.perf_counter() - started
    report_and_wait("kafka-python", args, received, dict(Counter()), elapsed)
    consumer.close()


if __name__ == "__main__":
    main()
