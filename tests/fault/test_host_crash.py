"""A crash of an actor host is an internal fault: kill -9 of a host while the app produces or consumes.

Runs in: the pytest process (the client's hosts and the librdkafka mock cluster are child processes). Each
scenario produces (or consumes) numbered messages ("<partition>:<seq>:" padded) at a steady pace, SIGKILLs one
host a third of the way in, and measures one row of docs/reliability.md's fault table: messages acked, lost
(acked but missing from the log), duplicated (extra copies in the log), failed (error reports) and unresolved
(no report after flush); for a consumer, skips and repeats in what consume() returned; and the stall (longest
gap between deliveries of the killed toppar's partition, from the kill on). ``KQ_FAULT_TABLE=<file>`` appends each row to that file (markdown).

    KQ_FAULT_TABLE=/tmp/rows.md python -m pytest tests/fault/test_host_crash.py -q
"""

from __future__ import annotations

import os
import time

import pytest
from support.kafka_io import produce_round_robin
from support.waiting import wait_until

from kqactors import Producer

pytestmark = [pytest.mark.fault, pytest.mark.slow, pytest.mark.timeout(120)]

PARTITIONS = 3
MESSAGES = 15_000
RATE = 5_000          # messages per second
VALUE_BYTES = 100
KILL_AT = MESSAGES // 3
#: the issue's 2 s, plus 1 s for a loaded 2-core machine: the restart is a new interpreter's start and imports
#: (~0.2 s idle, seen near 1 s when every core is busy) after the supervisor's 0.5 s delay
STALL_LIMIT_S = 3.0

BASE = {"linger.ms": 5, "kqactors.hosts": 2, "retry.backoff.ms": 50, "retry.backoff.max.ms": 500,
        "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500}


def numbered(partition: int, seq: int) -> bytes:
    return (b"%d:%d:" % (partition, seq)).ljust(VALUE_BYTES, b".")


def parse(value: bytes) -> tuple[int, int]:
    partition, seq, _ = value.split(b":", 2)
    return int(partition), int(seq)


def record_row(row: dict) -> None:
    path = os.environ.get("KQ_FAULT_TABLE")
    if path:
        with open(path, "a") as out:
            out.write("| " + " | ".join(str(v) for v in row.values()) + " |\n")
    print(row)


class ProducerRun:
    def __init__(self) -> None:
        self.acked: dict[int, set[int]] = {p: set() for p in range(PARTITIONS)}
        self.failed: list[tuple[int, int, object]] = []
        self.ok_times: list[float] = []  # successful reports of partition 0 (its toppar is the one killed)
        self.max_offset = [-1] * PARTITIONS  # the highest offset reported per partition

    def __call__(self, err, msg) -> None:
        partition, seq = parse(msg.value())
        if err is None:
            self.acked[partition].add(seq)
            offset = msg.offset()
            if offset is not None:
                self.max_offset[partition] = max(self.max_offset[partition], offset)
            if partition == 0:
                self.ok_times.append(time.monotonic())
        else:
            self.failed.append((partition, seq, err))


def read_log(bootstrap: str, topic: str, reported: list[int] | None = None) -> dict[int, list[int]]:
    """Every partition from the beginning to its end, with confluent-kafka (an independent reader). ``reported``:
    the highest offset a delivery report gave per partition, which the end must cover (a broker's high watermark
    may lag the acknowledgement a moment)."""
    from confluent_kafka import Consumer as CkConsumer
    from confluent_kafka import TopicPartition as CkTp

    consumer = CkConsumer({"bootstrap.servers": bootstrap, "group.id": f"verify-{topic}",
                           "enable.auto.commit": False})
    seen: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    try:
        ends = [consumer.get_watermark_offsets(CkTp(topic, p), timeout=10)[1] for p in range(PARTITIONS)]
        settle = time.monotonic() + 10
        while reported and any(e <= r for e, r in zip(ends, reported, strict=True)) and time.monotonic() < settle:
            time.sleep(0.2)
            ends = [consumer.get_watermark_offsets(CkTp(topic, p), timeout=10)[1] for p in range(PARTITIONS)]
        consumer.assign([CkTp(topic, p, -2) for p in range(PARTITIONS)])
        nxt = [0] * PARTITIONS
        deadline = time.monotonic() + 30
        while any(n < e for n, e in zip(nxt, ends, strict=True)) and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, 0.5):
                if msg.error():
                    continue
                seen[msg.partition()].append(parse(msg.value())[1])
                nxt[msg.partition()] = msg.offset() + 1
    finally:
        consumer.close()
    return seen


def stall_after(times: list[float], kill_time: float) -> float:
    after = sorted(t for t in times if t >= kill_time)
    points = [kill_time, *after]
    return max((b - a for a, b in zip(points, points[1:], strict=False)), default=float("inf"))


def run_producer(cluster, topic: str, victim: str, config: dict) -> dict:
    cluster.create_topic(topic, PARTITIONS)
    run = ProducerRun()
    producer = Producer({"bootstrap.servers": cluster.bootstrap, **BASE, **config, "on_delivery": run})
    rt = producer._rt
    kill_time = 0.0

    def kill_at(i: int) -> None:
        nonlocal kill_time
        if i == KILL_AT:
            name = f"toppar/{topic}/0" if victim == "toppar" else "main"
            key = wait_until(lambda: rt.host_of(name), 10, f"{name} to run")
            kill_time = time.monotonic()
            os.kill(rt.host_pid(key), 9)

    try:
        sent = produce_round_robin(producer, topic, MESSAGES, PARTITIONS, numbered, before=kill_at, rate=RATE,
                                   poll_every=50, backoff=0.01)
        producer.flush(30)
    finally:
        producer.close(timeout=5)
    log = read_log(cluster.bootstrap, topic, run.max_offset)
    acked = sum(len(s) for s in run.acked.values())
    lost = sum(len(run.acked[p] - set(log[p])) for p in range(PARTITIONS))
    duplicated = sum(len(log[p]) - len(set(log[p])) for p in range(PARTITIONS))
    reported = acked + len(run.failed)
    label = "idempotent" if config.get("enable.idempotence") else "plain"
    return {"kind": "producer", "config": label, "victim": f"{victim} host", "sent": sum(sent), "acked": acked,
            "lost": lost, "duplicated": duplicated, "failed": len(run.failed),
            "unresolved": sum(sent) - reported, "skips": "-", "repeats": "-",
            "stall_s": round(stall_after(run.ok_times, kill_time), 2)}


@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "plain"])
def test_producer_toppar_host_kill(mock_cluster, unique_topic, idempotent):
    row = run_producer(mock_cluster, unique_topic, "toppar", {"enable.idempotence": idempotent})
    record_row(row)
    assert row["failed"] == 0 and row["unresolved"] == 0 and row["lost"] == 0, row
    if idempotent:
        assert row["duplicated"] == 0, row
    assert row["stall_s"] < 2.0, row


@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "plain"])
def test_producer_main_host_kill(mock_cluster, unique_topic, idempotent):
    """The restarted main keeps the producer id/epoch and re-tells every toppar its leader; what main's broker
    actors had accepted is retried (the idempotent producer's with the same sequences: no duplicate)."""
    row = run_producer(mock_cluster, unique_topic, "main", {"enable.idempotence": idempotent})
    record_row(row)
    assert row["lost"] == 0 and row["unresolved"] == 0 and row["failed"] == 0, row
    if idempotent:
        assert row["duplicated"] == 0, row
    assert row["stall_s"] < STALL_LIMIT_S, row


# ---- consumer ---------------------------------------------------------------------------------------------

def fill_topic(bootstrap: str, topic: str) -> None:
    """MESSAGES numbered messages, round-robin over the partitions, with confluent-kafka (an independent writer)."""
    from confluent_kafka import Producer as CkProducer

    producer = CkProducer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(MESSAGES):
        partition = i % PARTITIONS
        while True:
            try:
                producer.produce(topic, numbered(partition, i // PARTITIONS), partition=partition)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(30) == 0


def run_consumer(cluster, topic: str, victim: str, mode: str, hosts: int = 2) -> dict:
    """Consume the whole topic (assign() from the beginning, or subscribe()), SIGKILL ``victim``'s host a third of
    the way in, and count what consume() returned: skips (records never returned), repeats (returned twice),
    error events, and the stall (longest gap between returned records from the kill on)."""
    from kqactors import Consumer, TopicPartition

    cluster.create_topic(topic, PARTITIONS)
    fill_topic(cluster.bootstrap, topic)
    config = {"bootstrap.servers": cluster.bootstrap, "kqactors.hosts": hosts, "group.id": f"g-{topic}",
              "auto.offset.reset": "earliest", "enable.auto.commit": True, "auto.commit.interval.ms": 200,
              "fetch.wait.max.ms": 100, "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500,
              "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
              # a small prefetch: most records are fetched after the kill, by the restarted main's brokers
              "queued.min.messages": 300, "queued.max.messages.kbytes": 64}
    callbacks: list[tuple[float, str]] = []  # (when, which) rebalance callback ran
    consumer = Consumer(config)
    rt = consumer._rt
    if mode == "assign":
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    else:
        consumer.subscribe([topic], on_assign=lambda c, ps: callbacks.append((time.monotonic(), "assign")),
                           on_revoke=lambda c, ps: callbacks.append((time.monotonic(), "revoke")),
                           on_lost=lambda c, ps: callbacks.append((time.monotonic(), "lost")))
    seen: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    errors: list[object] = []
    times: list[float] = []
    total = 0
    kill_time = 0.0
    deadline = time.monotonic() + 60
    try:
        while total < MESSAGES and time.monotonic() < deadline:
            if not kill_time and total >= KILL_AT:
                name = "main" if victim == "main" else f"ctoppar/{topic}/0"
                key = wait_until(lambda name=name: rt.host_of(name), 10, f"{name} to run")
                kill_time = time.monotonic()
                os.kill(rt.host_pid(key), 9)
            for msg in consumer.consume(200, 0.1):
                if msg.error() is not None:
                    errors.append(msg.error())
                    continue
                partition, seq = parse(msg.value())
                seen[partition].append(seq)
                total += 1
                times.append(time.monotonic())
            if not kill_time:
                time.sleep(0.002)  # a steady pace: the kill lands while records are still to come
        if mode == "subscribe":
            # past the session timeout: the restarted group actor heartbeats as the same member
            settle = time.monotonic() + 7.0
            while time.monotonic() < settle:
                for msg in consumer.consume(100, 0.2):
                    errors.append(msg.error() or f"unexpected record at offset {msg.offset()}")
            assert len(consumer.assignment()) == PARTITIONS, consumer.assignment()
    finally:
        closing = time.monotonic()  # close() revokes: not a callback of the recovery
        consumer.close()
    per_partition = MESSAGES // PARTITIONS
    skips = sum(len(set(range(per_partition)) - set(seen[p])) for p in range(PARTITIONS))
    repeats = sum(len(seen[p]) - len(set(seen[p])) for p in range(PARTITIONS))
    after_kill = [which for when, which in callbacks if kill_time <= when < closing]
    assert not after_kill, f"rebalance callbacks after the kill: {after_kill}"
    return {"kind": "consumer", "config": mode, "victim": f"{victim} host", "sent": MESSAGES, "acked": total,
            "lost": "-", "duplicated": "-", "failed": len(errors), "unresolved": "-", "skips": skips,
            "repeats": repeats, "stall_s": round(stall_after(times, kill_time), 2)}


@pytest.mark.parametrize(("victim", "mode"), [("main", "assign"), ("main", "subscribe"), ("ctoppar", "assign")])
def test_consumer_host_kill(mock_cluster, unique_topic, victim, mode, caplog):
    """assign(): every ctoppar fetches again at the app's position; subscribe(): the restarted group actor carries
    on as the same member (no rebalance callback, the assignment kept past the session timeout). Neither says
    its assignment was lost."""
    row = run_consumer(mock_cluster, unique_topic, victim, mode)
    record_row(row)
    assert row["skips"] == 0 and row["repeats"] == 0 and row["failed"] == 0, row
    assert not [r.getMessage() for r in caplog.records if "assignment lost" in r.getMessage()]
    assert row["stall_s"] < STALL_LIMIT_S, row
