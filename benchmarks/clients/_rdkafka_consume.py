"""The consume loops for clients with confluent-kafka's Consumer/Producer API (confluent-kafka and kqactors).

Runs in: a benchmark runner process. Owns one measured consume run, in one of three modes (``--mode``):

- ``assign``: READY once the client is created and has the topic's metadata; on GO, assign every partition
  at OFFSET_BEGINNING and consume(1000, ...) until ``count`` messages arrived; elapsed is assign → last
  message.
- ``subscribe``: the same, but subscribe() with a fresh group id (auto.offset.reset=earliest); elapsed
  includes joining the group.
- ``latency``: the topic is empty; a producer of the same client (linger.ms=0) in this process sends
  ``count`` messages at ``--rate`` msg/s, each stamped with its produce time, while the consumer (assigned
  at the end) polls; per message, produce() call → returned by consume(). Reports p50/p99/max in ms.
"""

from __future__ import annotations

import argparse
import statistics
import struct
import sys
import time
import uuid
from collections import Counter
from typing import Any

from _common import announce_ready_and_wait, error_name, parse_args, report_and_wait

PARTITION_EOF = -191
_STAMP = struct.Struct("<q")


def split_mode_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """This runner's own options (the rest go to the shared produce-style parser)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--mode", choices=("assign", "subscribe", "latency"), default="assign")
    parser.add_argument("--rate", type=float, default=1000.0, help="latency mode: messages per second")
    parser.add_argument("--fetch-wait-ms", type=int, default=None, help="fetch.wait.max.ms (default: client's)")
    parser.add_argument("--timeline", action="store_true",
                        help="assign/subscribe: report the messages received per 50 ms, the longest wait for "
                             "a message, GC pauses and (kqactors) placement moves")
    parser.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                        help="one more consumer property (repeatable)")
    return parser.parse_known_args(argv)


def consumer_config(args: Any, mode: argparse.Namespace) -> dict[str, Any]:
    """Both librdkafka-style clients get the same config: their defaults (a group.id because confluent-kafka
    requires one; nothing is committed), plus fetch.wait.max.ms when the mode asks for it."""
    config: dict[str, Any] = {"bootstrap.servers": args.bootstrap, "group.id": "bench-consume",
                              "enable.auto.commit": False}
    if mode.mode == "subscribe":
        config.update({"group.id": f"bench-subscribe-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest"})
    if mode.fetch_wait_ms is not None:
        config["fetch.wait.max.ms"] = mode.fetch_wait_ms
    for item in mode.config:
        key, _, value = item.partition("=")
        config[key.strip()] = value.strip()
    return config


TIMELINE_STEP_S = 0.05


class Timeline:
    """Where a run's time went, seen from the app: messages received per TIMELINE_STEP_S, the longest time
    between two consume() returns that brought messages, and the GC pauses (gc.callbacks) of this process."""

    def __init__(self, started: float, consumer: Any) -> None:
        import gc

        self.started = started
        # kqactors' placement log is stamped with time.monotonic(): its events are placed relative to this
        self.started_mono = time.monotonic() - (time.perf_counter() - started)
        self.consumer = consumer
        self.moves = getattr(consumer, "moves_done", None)  # kqactors: adaptive placement's ctoppar moves
        self.move_times: list[float] = []
        self.buckets: list[int] = []
        self.last_data = started
        self.longest_gap = (0.0, 0.0)  # (gap s, at s)
        self.gc_s = 0.0
        self.gc_max_s = 0.0
        self._gc_start = 0.0
        self._gc = gc
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, _info: dict) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter()
        else:
            pause = time.perf_counter() - self._gc_start
            self.gc_s += pause
            self.gc_max_s = max(self.gc_max_s, pause)

    def note(self, now: float, count: int) -> None:
        if self.moves is not None and self.consumer.moves_done != self.moves:
            self.moves = self.consumer.moves_done
            self.move_times.append(now - self.started)
        if not count:
            return
        index = int((now - self.started) / TIMELINE_STEP_S)
        if index >= len(self.buckets):
            self.buckets.extend([0] * (index + 1 - len(self.buckets)))
        self.buckets[index] += count
        gap = now - self.last_data
        if gap > self.longest_gap[0]:
            self.longest_gap = (gap, self.last_data - self.started)
        self.last_data = now

    def report(self) -> dict[str, Any]:
        self._gc.callbacks.remove(self._on_gc)
        extra = {"timeline_step_ms": TIMELINE_STEP_S * 1000, "timeline": self.buckets,
                 "longest_gap_ms": round(self.longest_gap[0] * 1000, 1),
                 "longest_gap_at_ms": round(self.longest_gap[1] * 1000, 1),
                 "gc_ms": round(self.gc_s * 1000, 1), "gc_max_ms": round(self.gc_max_s * 1000, 1)}
        if self.moves is not None:
            extra["placement_moves"] = self.moves
            extra["placement_moves_at_ms"] = [round(t * 1000) for t in self.move_times]
        log = getattr(self.consumer, "placement_log", None)
        if log:  # kqactors: when a toppar host started, ran, and how long the app's thread spent moving ctoppars
            extra["placement_log"] = [(round((at - self.started_mono) * 1000), what) for at, what in log
                                      if at >= self.started_mono]
        return extra


def run(client: str, consumer_class: Any, topic_partition: Any, offset_beginning: int,
        producer_class: Any = None, offset_end: int = -1) -> None:
    mode, rest = split_mode_args(sys.argv[1:])
    args = parse_args(rest)
    consumer = consumer_class(consumer_config(args, mode))
    metadata = consumer.list_topics(args.topic, timeout=30)
    partitions = sorted(metadata.topics[args.topic].partitions)
    if mode.mode == "latency":
        run_latency(client, args, mode, consumer, producer_class, topic_partition, partitions, offset_end)
        return
    errors: Counter = Counter()
    announce_ready_and_wait()
    started = time.perf_counter()
    if mode.mode == "subscribe":
        consumer.subscribe([args.topic])
    else:
        consumer.assign([topic_partition(args.topic, p, offset_beginning) for p in partitions])
    received = 0
    first_message_s = None
    deadline = time.monotonic() + 300
    consume = consumer.consume
    timeline = Timeline(started, consumer) if mode.timeline else None
    while received < args.count and time.monotonic() < deadline:
        before = received
        for msg in consume(1000, 1.0):
            if msg.error() is None:
                received += 1
            elif msg.error().code() != PARTITION_EOF:
                errors[error_name(msg.error())] += 1
        if first_message_s is None and received:
            first_message_s = time.perf_counter() - started
        if timeline is not None:
            timeline.note(time.perf_counter(), received - before)
    elapsed = time.perf_counter() - started
    extra = timeline.report() if timeline is not None else {}
    report_and_wait(client, args, received, dict(errors), elapsed, first_message_s=first_message_s, **extra)
    consumer.close()


def run_latency(client: str, args: Any, mode: argparse.Namespace, consumer: Any, producer_class: Any,
                topic_partition: Any, partitions: list[int], offset_end: int) -> None:
    producer = producer_class({"bootstrap.servers": args.bootstrap, "linger.ms": 0, "acks": 1})
    consumer.assign([topic_partition(args.topic, p, offset_end) for p in partitions])
    padding = b"x" * max(0, args.size - _STAMP.size)
    # Warm-up: round trips on every partition, so connections, fetch loops and end offsets are settled.
    warm_deadline = time.monotonic() + 30
    seen: set[int] = set()
    while len(seen) < len(partitions) and time.monotonic() < warm_deadline:
        for partition in partitions:
            if partition not in seen:
                producer.produce(args.topic, _STAMP.pack(-1) + padding, partition=partition)
        producer.poll(0)
        seen.update(m.partition() for m in consumer.consume(100, 0.2) if m.error() is None)
    if len(seen) < len(partitions):
        raise SystemExit(f"{client}: warm-up messages did not come back from every partition")
    announce_ready_and_wait()
    latencies_ms: list[float] = []
    errors: Counter = Counter()
    interval = 1.0 / mode.rate
    started = time.perf_counter()
    next_send = started
    sent = 0
    deadline = started + args.count * interval + 10
    while len(latencies_ms) < args.count and time.perf_counter() < deadline:
        now = time.perf_counter()
        while sent < args.count and now >= next_send:
            stamp = time.time_ns()
            producer.produce(args.topic, _STAMP.pack(stamp) + padding, partition=partitions[sent % len(partitions)])
            producer.poll(0)
            sent += 1
            next_send += interval
            now = time.perf_counter()
        wait = max(0.0, min(next_send - now, 0.05)) if sent < args.count else 0.05
        for msg in consumer.consume(1000, wait):
            arrived = time.time_ns()
            if msg.error() is not None:
                if msg.error().code() != PARTITION_EOF:
                    errors[error_name(msg.error())] += 1
                continue
            (stamp,) = _STAMP.unpack_from(msg.value())
            if stamp >= 0:
                latencies_ms.append((arrived - stamp) / 1e6)
    elapsed = time.perf_counter() - started
    producer.flush(10)
    ordered = sorted(latencies_ms)
    summary = {}
    if ordered:
        summary = {"p50_ms": statistics.median(ordered), "p99_ms": ordered[min(len(ordered) - 1,
                   int(len(ordered) * 0.99))], "max_ms": ordered[-1], "rate": mode.rate, "sent": sent,
                   "fetch_wait_max_ms": mode.fetch_wait_ms}
    report_and_wait(client, args, len(latencies_ms), dict(errors), elapsed, **summary)
    consumer.close()
