"""Benchmark runner: end-to-end latency of one client, in a fresh process. Runs in: a runner process started by
benchmarks/bench_latency.py (kqactors starts its hosts from here; the driver samples the whole process tree).

A producer (linger.ms=0, acks=1) and a consumer (fetch.wait.max.ms as given, assigned at the end of every
partition) of the same client in this process, one poll loop: ``--count`` messages at ``--rate`` msg/s over the
topic's partitions, each stamped with time.time_ns() at produce(); latency = stamp → returned by consume().
After a warm-up (a round trip on every partition). Prints one JSON line: p50/p99/p99.9/max in ms, how many
came back, the worst ones ``[s after the first send, ms]`` (when the spikes came: periodic ones point at a
timer), and for kqactors the actor hosts the client ended with.
"""

from __future__ import annotations

import argparse
import json
import struct
import time
from typing import Any

_STAMP = struct.Struct("<q")
PARTITION_EOF = -191
WORST = 20  # the worst latencies reported with their send times


def percentile(ordered: list[float], fraction: float) -> float:
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--client", choices=("kqactors", "confluent-kafka"), required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--fetch-wait-ms", type=int, default=2)
    parser.add_argument("--set", action="append", default=[], help="extra client property name=value (both)")
    args = parser.parse_args()
    if args.client == "kqactors":
        from kqactors import OFFSET_END, Consumer, Producer, TopicPartition
    else:
        from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition
    extra: dict[str, Any] = dict(item.split("=", 1) for item in args.set)
    producer = Producer({"bootstrap.servers": args.bootstrap, "linger.ms": 0, "acks": 1, **extra})
    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": "bench-latency", "enable.auto.commit": False,
                         "fetch.wait.max.ms": args.fetch_wait_ms, **extra})
    partitions = sorted(consumer.list_topics(args.topic, timeout=30).topics[args.topic].partitions)
    consumer.assign([TopicPartition(args.topic, p, OFFSET_END) for p in partitions])
    padding = b"x" * max(0, args.size - _STAMP.size)
    seen: set[int] = set()
    warm_deadline = time.monotonic() + 60
    while len(seen) < len(partitions) and time.monotonic() < warm_deadline:
        for partition in partitions:
            if partition not in seen:
                producer.produce(args.topic, _STAMP.pack(-1) + padding, partition=partition)
        producer.poll(0)
        seen.update(m.partition() for m in consumer.consume(100, 0.2) if m.error() is None)
    if len(seen) < len(partitions):
        raise SystemExit(f"{args.client}: warm-up messages did not come back from every partition")
    latencies: list[float] = []
    sent_at: list[float] = []  # s after the first send, of each latency
    interval = 1.0 / args.rate
    started = time.perf_counter()
    started_ns = time.time_ns()
    next_send = started
    sent = 0
    deadline = started + args.count * interval + 20
    while len(latencies) < args.count and time.perf_counter() < deadline:
        now = time.perf_counter()
        while sent < args.count and now >= next_send:
            producer.produce(args.topic, _STAMP.pack(time.time_ns()) + padding, partition=partitions[sent % len(partitions)])
            producer.poll(0)
            sent += 1
            next_send += interval
            now = time.perf_counter()
        # consume(n, t) returns at n messages or t: once all are sent, short waits, or the last few messages would
        # wait out a long t and count it as latency (both clients alike).
        wait = max(0.0, min(next_send - now, 0.05)) if sent < args.count else 0.001
        for msg in consumer.consume(1000, wait):
            arrived = time.time_ns()
            if msg.error() is None:
                (stamp,) = _STAMP.unpack_from(msg.value())
                if stamp >= 0:
                    latencies.append((arrived - stamp) / 1e6)
                    sent_at.append((stamp - started_ns) / 1e9)
    producer.flush(10)
    ordered = sorted(latencies)
    worst = sorted(zip(latencies, sent_at, strict=True), reverse=True)[:WORST]
    hosts = None
    if args.client == "kqactors":
        hosts = len(producer._rt.host_keys) + len(consumer._rt.host_keys)  # noqa: SLF001 - reported, not used
    print(json.dumps({"received": len(ordered), "sent": sent, "p50_ms": percentile(ordered, 0.5),
                      "p99_ms": percentile(ordered, 0.99), "p999_ms": percentile(ordered, 0.999),
                      "max_ms": ordered[-1], "actor_hosts": hosts,
                      "worst": [[round(at, 3), round(ms, 2)] for ms, at in sorted(worst, key=lambda w: w[1])]}),
          flush=True)
    consumer.close()
    close = getattr(producer, "close", None)
    if callable(close):
        close()


if __name__ == "__main__":
    main()
