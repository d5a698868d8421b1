"""Adaptive placement (kqactors.hosts=-1, the default) on the librdkafka mock cluster, with a simulated 4-core
machine (KQACTORS_CPU_COUNT=4).

Runs in: the pytest process (the producer's hosts and the mock cluster are child processes). A quiet producer runs
its toppars on its main host: one actor host. When its rate climbs past kqactors.placement.scale.rate, toppar hosts
join (up to the cores) and the toppars move to them; every message gets exactly one successful delivery report, in
produce() order per partition, and the log holds each exactly once, in order (read back with confluent-kafka;
the mock keeps only the tail of a long log). When the rate drops again for kqactors.placement.retire.ms, the
toppar hosts retire one by one (toppars moved back with the same hand-over) and their processes exit.
"""

from __future__ import annotations

import os
import time

import pytest
from support.kafka_io import produce_round_robin
from support.waiting import wait_until

from kqactors import Producer

pytestmark = [pytest.mark.timeout(120)]

PARTITIONS = 4


def _value(partition: int, seq: int) -> bytes:
    return b"%d:%d:" % (partition, seq) + b"." * 40


def produce_numbered(producer: Producer, topic: str, sent: list[int], count: int, pause: float = 0.0) -> None:
    """``count`` numbered messages round-robin, going on from ``sent``; ``pause`` makes a trickle."""
    produce_round_robin(producer, topic, count, PARTITIONS, _value, sent=sent, pause=pause, poll_every=500)


@pytest.mark.parametrize("idempotence", [True, False], ids=["idempotent", "plain"])
def test_toppar_hosts_join_as_the_rate_climbs_and_order_is_kept(mock_cluster, unique_topic, monkeypatch,
                                                                 idempotence):
    monkeypatch.setenv("KQACTORS_CPU_COUNT", "4")
    mock_cluster.create_topic(unique_topic, partition_cnt=PARTITIONS)
    reports: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    failed: list = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            failed.append(err)
            return
        partition, seq, _ = msg.value().split(b":", 2)
        assert int(partition) == msg.partition()
        reports[msg.partition()].append(int(seq))

    producer = Producer({"bootstrap.servers": mock_cluster.bootstrap, "linger.ms": 5, "enable.idempotence": idempotence,
                         "kqactors.placement.scale.rate": 2_000, "on_delivery": on_delivery})
    rt = producer._rt
    sent = [0] * PARTITIONS

    def produce(count: int, pause: float = 0.0) -> None:
        produce_numbered(producer, unique_topic, sent, count, pause)

    try:
        produce(100, pause=0.01)  # ~100 msg/s: quiet
        assert producer.flush(30) == 0
        assert rt.host_keys == ["h0"], "a quiet producer runs on its main host alone"
        assert {rt.host_of(f"toppar/{unique_topic}/{p}") for p in range(PARTITIONS)} == {"h0"}
        # Flat out: well past 2,000 msg/s per host, so toppar hosts join (one per settle period, up to 4).
        deadline = time.monotonic() + 60
        while len(rt.host_keys) < 3 and time.monotonic() < deadline:
            produce(5_000)
        assert producer.flush(60) == 0
        assert 3 <= len(rt.host_keys) <= 5, rt.host_keys
        # The new host's toppars move once it runs (the flusher keeps checking while it starts).
        wait_until(lambda: len({rt.host_of(f"toppar/{unique_topic}/{p}") for p in range(PARTITIONS)} - {"h0"}) >= 2,
                   30, "the toppars to spread over two toppar hosts")
        produce(2_000)  # and they still work where they are now
        assert producer.flush(30) == 0
    finally:
        producer.close(timeout=5)
    assert failed == []
    for partition in range(PARTITIONS):
        assert reports[partition] == list(range(sent[partition])), f"partition {partition}: reports out of order"
    # The mock cluster keeps a bounded log per partition (old segments go): what it kept must be the tail of
    # what was produced, each message once and in order.
    for partition, log in _read_back(mock_cluster.bootstrap, unique_topic, sent).items():
        assert log and log == list(range(log[0], sent[partition])), f"partition {partition}: log out of order"


def test_toppar_hosts_retire_when_the_rate_drops_and_order_is_kept(mock_cluster, unique_topic, monkeypatch):
    monkeypatch.setenv("KQACTORS_CPU_COUNT", "4")
    mock_cluster.create_topic(unique_topic, partition_cnt=PARTITIONS)
    reports: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    failed: list = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            failed.append(err)
            return
        reports[msg.partition()].append(int(msg.value().split(b":", 2)[1]))

    producer = Producer({"bootstrap.servers": mock_cluster.bootstrap, "linger.ms": 5, "enable.idempotence": True,
                         "kqactors.placement.scale.rate": 2_000, "kqactors.placement.retire.ms": 1_500,
                         "on_delivery": on_delivery})
    rt = producer._rt
    sent = [0] * PARTITIONS
    names = [f"toppar/{unique_topic}/{p}" for p in range(PARTITIONS)]

    def produce(count: int, pause: float = 0.0) -> None:
        produce_numbered(producer, unique_topic, sent, count, pause)

    try:
        deadline = time.monotonic() + 60
        while {rt.host_of(name) for name in names} == {"h0"} and time.monotonic() < deadline:
            produce(5_000)  # flat out: a toppar host joins and the toppars move there
        assert {rt.host_of(name) for name in names} != {"h0"}, "no toppar moved to a toppar host"
        pids = {key: rt.host_pid(key) for key in rt.host_keys[1:]}
        assert all(pids.values()), pids
        # A trickle (~50 msg/s) while the hosts retire one by one: the toppars move back to main's host.
        wait_until(lambda: {rt.host_of(name) for name in names} == {"h0"}, 60,
                   "every toppar back on the main host", sleep=lambda s: produce(4, pause=0.005))
        wait_until(lambda: not any(os.path.exists(f"/proc/{pid}") for pid in pids.values()), 30,
                   "the retired toppar hosts' processes to exit")
        assert all(rt.host_restarts(key) == 0 for key in pids), "a retired host is not restarted"
        produce(400, pause=0.001)  # still delivered, in order, from main's host
        assert producer.flush(30) == 0
    finally:
        producer.close(timeout=5)
    assert failed == []
    for partition in range(PARTITIONS):
        assert reports[partition] == list(range(sent[partition])), f"partition {partition}: reports out of order"
    for partition, log in _read_back(mock_cluster.bootstrap, unique_topic, sent).items():
        assert log and log == list(range(log[0], sent[partition])), f"partition {partition}: log out of order"


def _read_back(bootstrap: str, topic: str, sent: list[int]) -> dict[int, list[int]]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"verify-{topic}", "enable.auto.commit": False})
    seen: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 30
        done: set[int] = set()
        while len(done) < PARTITIONS and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, 0.5):
                if msg.error() is None:
                    seq = int(msg.value().split(b":", 2)[1])
                    seen[msg.partition()].append(seq)
                    if seq == sent[msg.partition()] - 1:
                        done.add(msg.partition())
    finally:
        consumer.close()
    return seen
