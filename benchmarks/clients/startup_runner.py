"""Benchmark runner: one client's start-up, measured in a fresh process. Runs in: a runner process started
by benchmarks/bench_startup.py (kqactors spawns its hosts from here, or attaches to a shared runtime; the driver
samples the whole tree).

Measures, with the client module imported beforehand (not counted): the Producer constructor, produce() of one
message → its delivery report (first delivery, from the constructor's start), the Consumer constructor
(group.id set, assign() to partition 0 from the beginning) and its first message (from the constructor's
start). Prints one JSON line; ``epoch_*`` are the same moments on the wall clock (time.time()), which the driver's
``--breakdown`` lines up with a system-call trace of the run."""

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
    parser.add_argument("--runtime-dir", default="", help="kqactors: attach to the shared runtime at this directory")
    parser.add_argument("--producer-only", action="store_true", help="stop after the first delivery report")
    args = parser.parse_args()
    if args.client == "kqactors":
        from kqactors import Consumer, Producer, TopicPartition
    else:
        from confluent_kafka import Consumer, Producer, TopicPartition
    extra: dict[str, Any] = {"kqactors.runtime.dir": args.runtime_dir} if args.runtime_dir else {}
    clock = time.perf_counter
    delivered: list[Any] = []
    epoch_producer = time.time()
    started = clock()
    producer = Producer({"bootstrap.servers": args.bootstrap, "linger.ms": 0, "acks": "1", **extra})
    producer_ctor = clock() - started
    producer.produce(args.topic, b"first", on_delivery=lambda err, msg: delivered.append((clock(), err)))
    while not delivered:
        producer.poll(0.001)
    first_dr = delivered[0][0] - started
    result = {"producer_ctor_ms": producer_ctor * 1e3, "first_dr_ms": first_dr * 1e3,
              "dr_error": str(delivered[0][1]) if delivered[0][1] else None,
              "epoch_producer": epoch_producer, "epoch_dr": epoch_producer + first_dr}
    consumer = None
    if not args.producer_only:
        started = clock()
        consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": f"startup-{args.client}",
                             "enable.auto.commit": False, **extra})
        consumer_ctor = clock() - started
        consumer.assign([TopicPartition(args.topic, 0, 0)])
        message = None
        while message is None or message.error() is not None:
            message = consumer.poll(0.001)
        result.update(consumer_ctor_ms=consumer_ctor * 1e3, first_message_ms=(clock() - started) * 1e3)
    print(json.dumps(result), flush=True)
    if consumer is not None:
        consumer.close()
    producer.flush(5)
    close = getattr(producer, "close", None)
    if callable(close):
        close()


if __name__ == "__main__":
    main()
