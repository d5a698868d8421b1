"""Benchmark runner: one client's start-up, measured in a fresh process. Runs in: a runner process started
by benchmarks/bench_startup.py (kqactors spawns its hosts from here; the driver samples the whole tree).

Measures, with the client module imported beforehand (not counted): the Producer constructor, produce() of one
message → its delivery report (first delivery, from the constructor's start), the Consumer constructor
(group.id set, assign() to partition 0 from the beginning) and its first message (from the constructor's
start). Prints one JSON line."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--client", choices=("kqactors", "confluent-kafka"), required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    args = parser.parse_args()
    if args.client == "kqactors":
        from kqactors import Consumer, Producer, TopicPartition
    else:
        from confluent_kafka import Consumer, Producer, TopicPartition
    clock = time.perf_counter
    delivered: list[Any] = []
    started = clock()
    producer = Producer({"bootstrap.servers": args.bootstrap, "linger.ms": 0, "acks": "1"})
    producer_ctor = clock() - started
    producer.produce(args.topic, b"first", on_delivery=lambda err, msg: delivered.append((clock(), err)))
    while not delivered:
        producer.poll(0.001)
    first_dr = delivered[0][0] - started
    started = clock()
    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": f"startup-{args.client}",
                         "enable.auto.commit": False})
    consumer_ctor = clock() - started
    consumer.assign([TopicPartition(args.topic, 0, 0)])
    message = None
    while message is None or message.error() is not None:
        message = consumer.poll(0.001)
    first_message = clock() - started
    print(json.dumps({"producer_ctor_ms": producer_ctor * 1e3, "first_dr_ms": first_dr * 1e3,
                      "dr_error": str(delivered[0][1]) if delivered[0][1] else None,
                      "consumer_ctor_ms": consumer_ctor * 1e3, "first_message_ms": first_message * 1e3}),
          flush=True)
    consumer.close()
    producer.flush(5)
    close = getattr(producer, "close", None)
    if callable(close):
        close()


if __name__ == "__main__":
    main()
