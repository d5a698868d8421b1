"""Producer under broker faults on the librdkafka mock cluster, idempotence on, 100k messages each.

Runs in: the pytest process (the producer's hosts and the mock cluster are child processes). Each test
produces numbered messages ("<partition>:<seq>:" padded to 100 bytes) to a fresh 3-broker cluster while a
fault is injected, then checks two things: every message got exactly one successful delivery report, and a
confluent-kafka consumer reading every partition from the beginning sees each sequence number exactly once,
in order. A kill -9 of a toppar host must end with every message reported (delivered or failed), none lost.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

import pytest
from support.kafka_io import produce_round_robin
from support.waiting import wait_until

from kqactors import Producer
from kqactors.errors import KafkaError

pytestmark = [pytest.mark.fault, pytest.mark.slow, pytest.mark.timeout(180), pytest.mark.fresh_cluster(num_brokers=3)]

MESSAGES = 100_000
PARTITIONS = 3
VALUE_BYTES = 100
PRODUCE = 0  # Produce api key

BASE_CONFIG = {
    "enable.idempotence": True,
    "linger.ms": 5,
    "batch.num.messages": 10_000,
    "kqactors.hosts": 2,
    "retry.backoff.ms": 50,
    "retry.backoff.max.ms": 500,
    "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 500,
    "topic.metadata.refresh.interval.ms": 1000,
}

Action = Callable[[], None]


class Reports:
    """Delivery reports by partition: the sequence numbers and errors, in report order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ok: dict[int, list[tuple[int, int]]] = {p: [] for p in range(PARTITIONS)}  # (seq, offset)
        self.failed: list[tuple[int, int, KafkaError]] = []

    def __call__(self, err: KafkaError | None, msg) -> None:
        partition_text, seq_text, _ = msg.value().split(b":", 2)
        partition, seq = int(partition_text), int(seq_text)
        assert msg.partition() == partition
        with self.lock:
            if err is None:
                self.ok[partition].append((seq, msg.offset()))
            else:
                self.failed.append((partition, seq, err))

    @property
    def total(self) -> int:
        return sum(len(v) for v in self.ok.values()) + len(self.failed)


def numbered_value(partition: int, seq: int) -> bytes:
    return (b"%d:%d:" % (partition, seq)).ljust(VALUE_BYTES, b".")


def produce_numbered(producer: Producer, topic: str, actions: dict[int, Action],
                     messages: int = MESSAGES) -> list[int]:
    """Produce ``messages`` round-robin over the partitions, running ``actions[i]`` before message i.
    Returns how many messages each partition got."""
    def before(i: int) -> None:
        action = actions.get(i)
        if action is not None:
            action()

    return produce_round_robin(producer, topic, messages, PARTITIONS, numbered_value, before=before,
                               poll_every=2000)


def consume_all(bootstrap: str, topic: str, expected: list[int], timeout: float = 40.0) -> dict[int, list[int]]:
    """Read every partition from the beginning to its log end with confluent-kafka; sequence numbers per
    partition. ``expected`` (messages reported delivered) is a lower bound: the log also holds messages
    that were reported failed after they reached the broker (a killed host, a lost reply)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"verify-{topic}",
                         "enable.auto.commit": False, "enable.partition.eof": False})
    seen: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    try:
        ends = [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)]
        assert all(end >= want for end, want in zip(ends, expected, strict=True)), (ends, expected)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        next_offset = [0] * PARTITIONS
        deadline = time.monotonic() + timeout
        while any(n < end for n, end in zip(next_offset, ends, strict=True)) and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, 0.5):
                if msg.error():
                    continue
                partition_text, seq_text, _ = msg.value().split(b":", 2)
                assert int(partition_text) == msg.partition()
                seen[msg.partition()].append(int(seq_text))
                next_offset[msg.partition()] = msg.offset() + 1
        assert next_offset == ends, f"read up to {next_offset}, log ends at {ends}"
    finally:
        consumer.close()
    return seen


def assert_exactly_once_in_order(reports: Reports, seen: dict[int, list[int]], sent: list[int]) -> None:
    assert reports.failed == [], f"{len(reports.failed)} failed reports, first: {reports.failed[:3]}"
    for partition in range(PARTITIONS):
        seqs = [seq for seq, _ in reports.ok[partition]]
        assert sorted(seqs) == list(range(sent[partition])), f"partition {partition}: reports not exactly once"
        offsets = [offset for _, offset in sorted(reports.ok[partition])]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets), \
            f"partition {partition}: offsets out of order in reports"
        log = seen[partition]
        assert len(log) == sent[partition], \
            f"partition {partition}: consumer saw {len(log)} messages, produced {sent[partition]}"
        assert log == list(range(sent[partition])), f"partition {partition}: duplicates or reordering in the log"


def run_scenario(cluster, topic: str, actions: dict[int, Action], config: dict | None = None,
                 flush_timeout: float = 60.0) -> None:
    cluster.create_topic(topic, partition_cnt=PARTITIONS)
    reports = Reports()
    producer = Producer({"bootstrap.servers": cluster.bootstrap, **BASE_CONFIG, **(config or {}),
                         "on_delivery": reports})
    try:
        sent = produce_numbered(producer, topic, actions)
        left = producer.flush(flush_timeout)
        assert left == 0, f"{left} messages still outstanding after flush"
    finally:
        producer.close(timeout=5)
    assert reports.total == MESSAGES
    assert_exactly_once_in_order(reports, consume_all(cluster.bootstrap, topic, sent), sent)


# The mock checks idempotent sequences only for transactional producers, so when an injected error fails
# one request of a pipelined window it still appends the next request's batch (a real broker answers
# OUT_OF_ORDER_SEQUENCE_NUMBER). The producer then sees a later batch succeed while an earlier one failed
# and raises the fatal _INCONSISTENT error, as librdkafka does. One request in flight per partition keeps
# the mock honest; faults that fail a whole window (broker down, leader moved) run with the default 5.
ONE_IN_FLIGHT = {"max.in.flight.requests.per.connection": 1}


def test_not_leader_bursts(fresh_cluster, unique_topic):
    def burst() -> None:
        fresh_cluster.push_request_errors(PRODUCE, ["NOT_LEADER_OR_FOLLOWER"] * 4)

    run_scenario(fresh_cluster, unique_topic, {20_000: burst, 50_000: burst, 80_000: burst}, ONE_IN_FLIGHT)


def test_request_timed_out_errors(fresh_cluster, unique_topic):
    def burst() -> None:
        fresh_cluster.push_request_errors(PRODUCE, ["REQUEST_TIMED_OUT"] * 4)

    run_scenario(fresh_cluster, unique_topic, {20_000: burst, 50_000: burst, 80_000: burst}, ONE_IN_FLIGHT)


def test_broker_down_then_up(fresh_cluster, unique_topic):
    def down() -> None:
        fresh_cluster.broker_set_down(1)
        threading.Timer(1.5, fresh_cluster.broker_set_up, args=(1,)).start()

    run_scenario(fresh_cluster, unique_topic, {30_000: down})


def test_leader_moved(fresh_cluster, unique_topic):
    def move(partition: int, broker_id: int) -> Action:
        return lambda: fresh_cluster.partition_set_leader(unique_topic, partition, broker_id)

    run_scenario(fresh_cluster, unique_topic, {20_000: move(0, 2), 40_000: move(1, 3), 60_000: move(2, 1),
                                         80_000: move(0, 3)})


def test_500ms_rtt(fresh_cluster, unique_topic):
    def slow() -> None:
        for broker_id in (1, 2, 3):
            fresh_cluster.broker_set_rtt(broker_id, 500)

    run_scenario(fresh_cluster, unique_topic, {10_000: slow})


@pytest.mark.parametrize("hosts", [2, 0], ids=["toppar-host", "main-host-with-toppars"])
def test_kill_9_of_a_toppar_host_loses_nothing(fresh_cluster, unique_topic, hosts):
    """Messages the killed host held are retried or reported failed; none is silently dropped. With
    kqactors.hosts=0 the toppars run on the main host, so the kill takes main and the brokers too."""
    fresh_cluster.create_topic(unique_topic, partition_cnt=PARTITIONS)
    reports = Reports()
    producer = Producer({"bootstrap.servers": fresh_cluster.bootstrap, **BASE_CONFIG, "on_delivery": reports,
                         "kqactors.hosts": hosts})
    runtime = producer._rt
    killed: list[int] = []

    def kill() -> None:
        # produce() outruns the flusher, which may not have started the toppar yet: wait for it
        key = wait_until(lambda: runtime.host_of(f"toppar/{unique_topic}/0"), 10,
                         f"the flusher to start toppar/{unique_topic}/0")
        pid = runtime.host_pid(key)
        assert pid is not None
        killed.append(pid)
        os.kill(pid, 9)

    tail = 100
    try:
        sent = produce_numbered(producer, unique_topic, {40_000: kill})
        left = producer.flush(60)
        assert left == 0, f"{left} messages neither delivered nor failed after flush"
        # Once the host is back, the restarted toppars (on a new epoch) deliver new messages.
        wait_until(lambda: runtime.host_restarts(runtime.host_of(f"toppar/{unique_topic}/0")) >= 1, 30,
                   "the supervisor to restart the killed toppar host", interval=0.05)
        time.sleep(1.0)
        for i in range(tail * PARTITIONS):
            partition = i % PARTITIONS
            producer.produce(unique_topic, numbered_value(partition, sent[partition]), partition=partition)
            sent[partition] += 1
        left = producer.flush(30)
        assert left == 0, f"{left} messages produced after the restart neither delivered nor failed"
    finally:
        producer.close(timeout=5)
    assert killed
    assert reports.total == MESSAGES + tail * PARTITIONS
    assert {err.code() for _, _, err in reports.failed} <= {KafkaError._FAIL, KafkaError._TRANSPORT}
    for partition in range(PARTITIONS):
        delivered_tail = [seq for seq, _ in reports.ok[partition] if seq >= sent[partition] - tail]
        assert len(delivered_tail) == tail, f"partition {partition}: restarted toppar did not deliver"
    seen = consume_all(fresh_cluster.bootstrap, unique_topic, [len(v) for v in reports.ok.values()])
    for partition in range(PARTITIONS):
        delivered = sorted(seq for seq, _ in reports.ok[partition])
        failed = sorted(seq for p, seq, _ in reports.failed if p == partition)
        assert sorted(delivered + failed) == list(range(sent[partition])), f"partition {partition}: lost reports"
        log = seen[partition]
        assert len(log) == len(set(log)), f"partition {partition}: duplicates in the log"
        assert log == sorted(log), f"partition {partition}: reordered"
        assert set(delivered) <= set(log), f"partition {partition}: reported delivered but not in the log"
