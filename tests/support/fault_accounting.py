"""Accounting of a fault scenario: what a producer or consumer did around an injected fault, as one table row.

Runs in: the pytest (or benchmark) process; the clients' hosts and brokers are child processes. A producer run
sends numbered messages (value ``b"<seq>:"`` padded, seq unique over the run) at a steady pace, calls the
scenario's fault a given number of messages in, flushes, then reads the topic back with confluent-kafka (an
independent reader). A consumer run has confluent-kafka write numbered messages (half before the fault, half
after it, straight to the broker), consumes them with kqactors and fires the fault part-way. The row's columns
are docs/reliability.md's fault table (tests/fault/test_host_crash.py's format, the first column the
scenario): sent, acked, lost (acked but missing from the log), duplicated (extra copies in the log), failed
(error reports), unresolved (no report after flush), for a consumer skips (messages never returned) and
repeats (returned more than once), and the stall (longest gap between successful reports or consumed
messages of partition 0, the faulted one, from the fault on). A producer row also has ``codes``, {error code
name: count} of its failed reports (printed and in assertion messages, not a table column). ``KQ_FAULT_TABLE=<file>`` appends each row to that file (markdown).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

VALUE_BYTES = 100
BASE = {"linger.ms": 5, "kqactors.hosts": 1, "retry.backoff.ms": 50, "retry.backoff.max.ms": 500,
        "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500}
COLUMNS = ("scenario", "client", "config", "fault", "sent", "acked", "lost", "duplicated", "failed", "unresolved",
           "skips", "repeats", "stall_s")


def numbered(seq: int, size: int = VALUE_BYTES) -> bytes:
    return (b"%d:" % seq).ljust(size, b".")


def parse(value: bytes) -> int:
    return int(value.split(b":", 1)[0])


def record_row(row: dict[str, Any]) -> None:
    path = os.environ.get("KQ_FAULT_TABLE")
    if path:
        with open(path, "a") as out:
            out.write("| " + " | ".join(str(row[c]) for c in COLUMNS) + " |\n")
    print(row)


class LogCapture(logging.Handler):
    """A ``logger`` for a client's config that keeps the records' text (FAIL records name a dropped link)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []
        self.logger = logging.getLogger(f"fault-suite-{id(self)}")
        self.logger.propagate = False
        self.logger.setLevel(logging.DEBUG)
        self.logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def mentions(self, *words: str) -> list[str]:
        return [line for line in self.lines if any(w in line for w in words)]


def stall_after(times: list[float], fault_time: float) -> float:
    after = sorted(t for t in times if t >= fault_time)
    points = [fault_time, *after]
    return round(max((b - a for a, b in zip(points, points[1:], strict=False)), default=float("inf")), 2)


def create_topic(cluster: Any, topic: str, partitions: int) -> None:
    """The mock cluster has a call for it; Tansu gets CreateTopics from confluent-kafka's AdminClient."""
    if hasattr(cluster, "create_topic"):
        cluster.create_topic(topic, partitions)
        return
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(15)


def read_log(bootstrap: str, topic: str, partitions: int, timeout: float = 30) -> list[int]:
    """Every message's seq in the topic, start to end of every partition, read with confluent-kafka."""
    from confluent_kafka import Consumer as CkConsumer
    from confluent_kafka import TopicPartition as CkTp

    consumer = CkConsumer({"bootstrap.servers": bootstrap, "group.id": f"verify-{topic}",
                           "enable.auto.commit": False})
    seen: list[int] = []
    try:
        ends = [consumer.get_watermark_offsets(CkTp(topic, p), timeout=10)[1] for p in range(partitions)]
        consumer.assign([CkTp(topic, p, -2) for p in range(partitions)])
        nxt = [0] * partitions
        deadline = time.monotonic() + timeout
        while any(n < e for n, e in zip(nxt, ends, strict=True)) and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, 0.5):
                if msg.error():
                    continue
                seen.append(parse(msg.value()))
                nxt[msg.partition()] = msg.offset() + 1
    finally:
        consumer.close()
    return seen


def failure_codes(failed: list[tuple[int, Any]]) -> dict[str, int]:
    """{error code name: count} of the failed reports, so a failing row says why (not a table column)."""
    codes: dict[str, int] = {}
    for _, err in failed:
        name = err.name() if hasattr(err, "name") else str(err)
        codes[name] = codes.get(name, 0) + 1
    return codes


def producer_row(scenario: str, config: str, fault: str, sent: int, acked: set[int], failed: int,
                 log: list[int], ok_times: list[float], fault_time: float,
                 codes: dict[str, int] | None = None) -> dict[str, Any]:
    logged = set(log)
    return {"scenario": scenario, "client": "producer", "config": config, "fault": fault, "sent": sent,
            "acked": len(acked), "lost": len(acked - logged), "duplicated": len(log) - len(logged),
            "failed": failed, "unresolved": sent - len(acked) - failed, "skips": "-", "repeats": "-",
            "stall_s": stall_after(ok_times, fault_time), "codes": codes or {}}


class ProducerRun:
    """The on_delivery callback of a run: acked seqs, failed reports, times of successful reports."""

    def __init__(self) -> None:
        self.acked: set[int] = set()
        self.failed: list[tuple[int, Any]] = []
        self.ok_times: list[float] = []
        self.longest_produce = 0.0

    def __call__(self, err: Any, msg: Any) -> None:
        seq = parse(msg.value())
        if err is None:
            self.acked.add(seq)
            if msg.partition() == 0:  # the faulted partition (broker 1 leads it on the mock cluster)
                self.ok_times.append(time.monotonic())
        else:
            self.failed.append((seq, err))


def run_producer(bootstrap: str, topic: str, partitions: int, config: dict[str, Any], *, scenario: str,
                 fault_text: str, fault: Callable[[], object], messages: int = 2000, rate: int = 2000,
                 fault_at: int | None = None, keyed: bool = False, flush_timeout: float = 60,
                 verify_bootstrap: str | None = None, log: LogCapture | None = None,
                 on_blocked: Callable[[], object] | None = None,
                 block_timeout: float | None = None) -> tuple[dict[str, Any], ProducerRun]:
    """Produce ``messages`` at ``rate`` msg/s (explicit partitions round-robin, or by key when ``keyed``),
    call ``fault()`` at ``fault_at`` (a third in), flush, read the log back; returns (row, run). A full queue
    calls ``on_blocked`` and polls (BufferError), or with ``block_timeout`` produce() itself waits that long
    (``run.longest_produce`` is the longest call)."""
    from kqactors import Producer

    run = ProducerRun()
    conf = {"bootstrap.servers": bootstrap, **BASE, **config, "on_delivery": run}
    if log is not None:
        conf["logger"] = log.logger
    producer = Producer(conf)
    fault_at = messages // 3 if fault_at is None else fault_at
    fault_time = 0.0
    sent = 0
    try:
        start = time.monotonic()
        for i in range(messages):
            if i == fault_at:
                fault_time = time.monotonic()
                fault()
            extra = {} if block_timeout is None else {"block_timeout": block_timeout}
            while True:
                try:
                    called = time.monotonic()
                    if keyed:
                        producer.produce(topic, numbered(i), key=b"k%d" % i, **extra)
                    else:
                        producer.produce(topic, numbered(i), partition=i % partitions, **extra)
                    run.longest_produce = max(run.longest_produce, time.monotonic() - called)
                    break
                except BufferError:
                    if on_blocked is not None:
                        on_blocked()
                    producer.poll(0.01)
            sent += 1
            if i % 50 == 0:
                producer.poll(0)
                ahead = start + i / rate - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
        producer.flush(flush_timeout)
    finally:
        producer.close(timeout=5)
    logged = read_log(verify_bootstrap or bootstrap, topic, partitions)
    config_text = ", ".join(f"{k}={v}" for k, v in config.items()) or "default"
    row = producer_row(scenario, config_text, fault_text, sent, run.acked, len(run.failed), logged,
                       run.ok_times, fault_time, failure_codes(run.failed))
    return row, run


def produce_numbered(bootstrap: str, topic: str, partitions: int, seqs: range) -> None:
    """confluent-kafka writes ``numbered(seq)`` for each seq, partition ``seq % partitions``."""
    import confluent_kafka

    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for seq in seqs:
        while True:
            try:
                producer.produce(topic, numbered(seq), partition=seq % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0, "confluent-kafka could not deliver the test data"


def run_consumer(produce_bootstrap: str, consume_bootstrap: str, topic: str, partitions: int,
                 config: dict[str, Any], *, scenario: str, fault_text: str, fault: Callable[[], object],
                 messages: int = 2000, fault_at: int | None = None, timeout: float = 60,
                 subscribe: bool = False, commit: bool = False, per_batch: Callable[[], object] | None = None,
                 max_batch: int = 500, log: LogCapture | None = None) -> tuple[dict[str, Any], Any]:
    """Half the messages before, half after the fault (written straight to the broker by confluent-kafka
    from a thread); consume with kqactors (assign from the beginning, or subscribe) until every seq came or
    ``timeout``. Returns (row, consumer stats dict of errors)."""
    from kqactors import Consumer, TopicPartition

    half = messages // 2
    produce_numbered(produce_bootstrap, topic, partitions, range(half))
    conf = {"bootstrap.servers": consume_bootstrap, "group.id": f"g-{topic}", "enable.auto.commit": False,
            "auto.offset.reset": "earliest", **BASE, **config}
    conf.pop("linger.ms", None)
    if log is not None:
        conf["logger"] = log.logger
    consumer = Consumer(conf)
    if subscribe:
        consumer.subscribe([topic])
    else:
        consumer.assign([TopicPartition(topic, p, -2) for p in range(partitions)])
    fault_at = half // 2 if fault_at is None else fault_at
    seen: list[int] = []
    times: list[float] = []
    errors: list[Any] = []
    fault_time = 0.0
    writer: threading.Thread | None = None
    try:
        deadline = time.monotonic() + timeout
        while len(set(seen)) < messages and time.monotonic() < deadline:
            batch = consumer.consume(max_batch, 0.2)
            now = time.monotonic()
            for msg in batch:
                if msg.error() is not None:
                    errors.append(msg.error())
                    continue
                seen.append(parse(msg.value()))
                if msg.partition() == 0:
                    times.append(now)
            if commit and batch:
                try:
                    consumer.commit(asynchronous=False)
                except Exception as exc:  # noqa: BLE001 - a failed commit is accounted, not fatal
                    errors.append(exc)
            if per_batch is not None:
                per_batch()
            if writer is None and len(seen) >= fault_at:
                fault_time = time.monotonic()
                fault()
                writer = threading.Thread(target=produce_numbered,
                                          args=(produce_bootstrap, topic, partitions, range(half, messages)),
                                          daemon=True)
                writer.start()
    finally:
        consumer.close()
        if writer is not None:
            writer.join(60)
    unique = set(seen)
    config_text = ", ".join(f"{k}={v}" for k, v in config.items()) or "default"
    row = {"scenario": scenario, "client": "consumer" + (" (group)" if subscribe else ""), "config": config_text,
           "fault": fault_text, "sent": messages, "acked": "-", "lost": "-", "duplicated": "-",
           "failed": len(errors), "unresolved": "-", "skips": len(set(range(messages)) - unique),
           "repeats": len(seen) - len(unique), "stall_s": stall_after(times, fault_time)}
    return row, errors


def later(delay: float, action: Callable[[], object]) -> threading.Timer:
    """Run ``action`` on a timer thread ``delay`` s from now (undoing a fault while the run goes on)."""
    timer = threading.Timer(delay, action)
    timer.daemon = True
    timer.start()
    return timer
