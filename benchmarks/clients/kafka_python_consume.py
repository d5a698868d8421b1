"""Benchmark runner: kafka-python KafkaConsumer (assign + seek_to_beginning, poll loop).

Runs in: a fresh runner process per run. Defaults except no group/auto-commit; elapsed is assign → last
message. ``--mode subscribe``: subscribe with a fresh group (auto_offset_reset earliest) instead; elapsed is
subscribe → last message.
"""

from __future__ import annotations

import sys
import time
import uuid
from collections import Counter

from _common import announce_ready_and_wait, parse_args, report_and_wait
from _rdkafka_consume import split_mode_args
from kafka import KafkaConsumer, TopicPartition


def main() -> None:
    mode, rest = split_mode_args(sys.argv[1:])
    args = parse_args(rest)
    subscribe = mode.mode == "subscribe"
    group = f"bench-subscribe-{uuid.uuid4().hex[:8]}" if subscribe else None
    consumer = KafkaConsumer(bootstrap_servers=args.bootstrap, group_id=group, enable_auto_commit=False,
                             auto_offset_reset="earliest")
    partitions = sorted(consumer.partitions_for_topic(args.topic) or ())
    if not partitions:
        raise SystemExit("kafka-python: topic has no partitions")
    announce_ready_and_wait()
    started = time.perf_counter()
    if subscribe:
        consumer.subscribe([args.topic])
    else:
        tps = [TopicPartition(args.topic, p) for p in partitions]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
    received = 0
    first_message_s = None
    deadline = time.monotonic() + 300
    while received < args.count and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=1000, max_records=10000).values():
            received += len(records)
        if first_message_s is None and received:
            first_message_s = time.perf_counter() - started
    elapsed = time.perf_counter() - started
    report_and_wait("kafka-python", args, received, dict(Counter()), elapsed, first_message_s=first_message_s)
    consumer.close()


if __name__ == "__main__":
    main()
