"""Host crash recovery beyond the fault table's steady rows: the issue's flat-out run on Tansu, SIGSTOP of a host
for 10 s, and a host crash in the middle of a transaction.

Runs in: the pytest process (clients' hosts, Tansu and the librdkafka mock cluster are child processes). Rows go
to ``KQ_FAULT_TABLE`` as in test_host_crash.py (docs/reliability.md, "Fault table").
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from support.waiting import wait_until
from test_host_crash import (
    PARTITIONS,
    STALL_LIMIT_S,
    ProducerRun,
    numbered,
    parse,
    read_log,
    record_row,
    stall_after,
)

from kqactors import Consumer, KafkaError, KafkaException, Producer, TopicPartition

pytestmark = [pytest.mark.fault, pytest.mark.slow, pytest.mark.timeout(180)]


def create_topic(cluster, topic: str, partitions: int = PARTITIONS) -> None:
    if hasattr(cluster, "create_topic"):
        cluster.create_topic(topic, partitions)
        return
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(15)


def produce_flat_out(producer: Producer, topic: str, count: int, at: dict[int, object]) -> list[int]:
    """``count`` numbered messages round-robin as fast as produce() takes them; ``at[i]()`` runs before message i."""
    sent = [0] * PARTITIONS
    for i in range(count):
        if i in at:
            at[i]()
        partition = i % PARTITIONS
        while True:
            try:
                producer.produce(topic, numbered(partition, sent[partition]), partition=partition)
                break
            except BufferError:
                producer.poll(0.01)
        sent[partition] += 1
        if i % 1000 == 0:
            producer.poll(0)
    return sent


def check_log(bootstrap: str, topic: str, run: ProducerRun, sent: list[int]) -> dict:
    log = read_log(bootstrap, topic)
    acked = sum(len(s) for s in run.acked.values())
    return {"acked": acked, "lost": sum(len(run.acked[p] - set(log[p])) for p in range(PARTITIONS)),
            "duplicated": sum(len(log[p]) - len(set(log[p])) for p in range(PARTITIONS)),
            "failed": len(run.failed), "unresolved": sum(sent) - acked - len(run.failed)}


# ---- the scenario ------------------------------------------------------------------------------------

FLAT_OUT = 150_000


def test_flat_out_idempotent_producer_survives_a_main_host_kill_on_tansu(tansu, unique_topic):
    """Issue #21: 150,000 messages flat out, idempotent, SIGKILL of the main host a third of the way in. Before
    the recovery it met PRODUCER_FENCED and _MSG_TIMED_OUT; now every message is delivered once."""
    create_topic(tansu, unique_topic)
    run = ProducerRun()
    producer = Producer({"bootstrap.servers": tansu.bootstrap, "enable.idempotence": True, "kqactors.hosts": 2,
                         "linger.ms": 5, "on_delivery": run})
    rt = producer._rt
    kill_time = [0.0]

    def kill() -> None:
        kill_time[0] = time.monotonic()
        os.kill(rt.host_pid(rt.host_of("main")), signal.SIGKILL)

    try:
        sent = produce_flat_out(producer, unique_topic, FLAT_OUT, {FLAT_OUT // 3: kill})
        left = producer.flush(60)
    finally:
        producer.close(timeout=5)
    counts = check_log(tansu.bootstrap, unique_topic, run, sent)
    row = {"kind": "producer", "config": "idempotent, flat out (Tansu)", "victim": "main host", "sent": sum(sent),
           **counts, "skips": "-", "repeats": "-", "stall_s": round(stall_after(run.ok_times, kill_time[0]), 2)}
    record_row(row)
    assert left == 0, row
    assert row["failed"] == 0, (row, run.failed[:5])
    assert row["lost"] == 0 and row["duplicated"] == 0 and row["unresolved"] == 0, row
    assert row["stall_s"] < STALL_LIMIT_S, row
