"""Consumer fetch path under faults, on the librdkafka mock cluster: Fetch request errors, a broker going down
and up, kill -9 of a toppar host mid-consume, seeks racing in-flight fetches. Nothing may be lost, duplicated
or delivered stale."""

from __future__ import annotations

import time

import pytest
from support.kafka_io import drain, produce_numbered
from support.waiting import wait_until

from kqactors import Consumer
from kqactors.errors import KafkaError
from kqactors.message import OFFSET_BEGINNING, TopicPartition
from kqactors.ops.consumer import ctoppar_name

ck = pytest.importorskip("confluent_kafka")
pytestmark = pytest.mark.fault

FETCH = 1


def offsets_by_partition(msgs) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for msg in msgs:
        out.setdefault(msg.partition(), []).append(msg.offset())
    return out


def test_fetch_request_errors_are_retried_without_loss(mock_cluster_factory, unique_topic):
    cluster = mock_cluster_factory(1)
    cluster.create_topic(unique_topic, 2)
    produce_numbered(cluster.bootstrap, unique_topic, 400, 2)
    cluster.push_request_errors(FETCH, [KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.REQUEST_TIMED_OUT,
                                        KafkaError.UNKNOWN_TOPIC_OR_PART])
    with Consumer({"bootstrap.servers": cluster.bootstrap, "kqactors.hosts": 2,
                   "fetch.error.backoff.ms": 50}) as c:
        c.assign([TopicPartition(unique_topic, p, OFFSET_BEGINNING) for p in range(2)])
        msgs = drain(c, 400)
    assert offsets_by_partition(msgs) == {0: list(range(200)), 1: list(range(200))}


def test_broker_down_and_up_mid_consume(mock_cluster_factory, unique_topic):
    cluster = mock_cluster_factory(2)
    cluster.create_topic(unique_topic, 1)
    cluster.partition_set_leader(unique_topic, 0, 1)
    produce_numbered(cluster.bootstrap, unique_topic, 300, 1)
    with Consumer({"bootstrap.servers": cluster.bootstrap, "kqactors.hosts": 1,
                   "reconnect.backoff.max.ms": 200, "fetch.error.backoff.ms": 100}) as c:
        c.assign([TopicPartition(unique_topic, 0, OFFSET_BEGINNING)])
        msgs = drain(c, 300)
        cluster.broker_set_down(1)
        down_until = time.monotonic() + 1.5
        while time.monotonic() < down_until:
            msgs.extend(m for m in c.consume(100, 0.2) if m.error() is None)
        cluster.broker_set_up(1)
        produce_numbered(cluster.bootstrap, unique_topic, 300, 1, start=300)
        msgs.extend(drain(c, 300, timeout=30))
    assert [m.offset() for m in msgs] == list(range(600))


@pytest.mark.parametrize("hosts", [2, 0], ids=["toppar-host", "main-host-with-toppars"])
def test_kill_toppar_host_mid_consume_loses_nothing(mock_cluster, unique_topic, hosts):
    """kqactors.hosts=0 puts the ctoppars on the main host, so there the kill takes main and the broker
    actors down with them."""
    mock_cluster.create_topic(unique_topic, 2)
    produce_numbered(mock_cluster.bootstrap, unique_topic, 4000, 2)
    with Consumer({"bootstrap.servers": mock_cluster.bootstrap, "kqactors.hosts": hosts,
                   "queued.min.messages": 200}) as c:
        c.assign([TopicPartition(unique_topic, p, OFFSET_BEGINNING) for p in range(2)])
        victim = c._rt.host_of(ctoppar_name(unique_topic, 0))
        killed = []

        def during(out):
            if len(out) >= 500 and not killed:
                killed.append(c._rt.host_pid(victim))
                c._rt.kill_host(victim)

        msgs = drain(c, 4000, timeout=40, during=during)
        assert killed and killed[0] is not None
        # The supervisor restarts a dead host after a delay; everything may already be consumed by then.
        wait_until(lambda: c._rt.host_restarts(victim) >= 1, 10, f"the supervisor to restart host {victim}",
                   interval=0.1, sleep=c._rt.sleep)
    assert offsets_by_partition(msgs) == {0: list(range(2000)), 1: list(range(2000))}


def test_seek_during_in_flight_fetches_never_delivers_stale(mock_cluster, unique_topic):
    mock_cluster.create_topic(unique_topic, 1)
    produce_numbered(mock_cluster.bootstrap, unique_topic, 3000, 1)
    with Consumer({"bootstrap.servers": mock_cluster.bootstrap, "kqactors.hosts": 1,
                   "fetch.max.bytes": 20000, "message.max.bytes": 20000,
                   "max.partition.fetch.bytes": 20000}) as c:
        c.assign([TopicPartition(unique_topic, 0, OFFSET_BEGINNING)])
        for target in (5, 1000, 17, 2500, 3):
            drain(c, 50, timeout=10)  # fetches are in flight and queued now
            c.seek(TopicPartition(unique_topic, 0, target))
            after = drain(c, 40, timeout=10)
            assert [m.offset() for m in after[:40]] == list(range(target, target + 40))
