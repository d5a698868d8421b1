"""statistics.interval.ms + stats_cb on the librdkafka mock cluster: the JSON comes from poll(), its counters
match what was produced and consumed, and its field names are librdkafka's (checked against the stats
confluent-kafka emits for the same cluster)."""

from __future__ import annotations

import json
import time

import pytest
from support.waiting import wait_until

confluent_kafka = pytest.importorskip("confluent_kafka")

from kqactors import (  # noqa: E402
    Consumer,
    Producer,
)

pytestmark = pytest.mark.timeout(90)

COUNT = 600
# Fields a dashboard written for librdkafka reads; each must be present, under librdkafka's name.
TOP_LEVEL = {"name", "client_id", "type", "ts", "time", "age", "replyq", "msg_cnt", "msg_size", "tx", "tx_bytes",
             "rx", "rx_bytes", "txmsgs", "txmsg_bytes", "rxmsgs", "rxmsg_bytes", "metadata_cache_cnt", "brokers",
             "topics"}
BROKER = {"name", "nodeid", "nodename", "source", "state", "stateage", "outbuf_cnt", "waitresp_cnt", "tx",
          "txbytes", "txerrs", "req_timeouts", "rx", "rxbytes", "rxerrs", "connects", "disconnects", "req", "rtt",
          "toppars"}
PRODUCER_PARTITION = {"partition", "leader", "msgq_cnt", "msgq_bytes", "msgs_inflight", "txmsgs", "txbytes"}
CONSUMER_PARTITION = {"partition", "leader", "fetch_state", "next_offset", "app_offset", "stored_offset",
                      "committed_offset", "lo_offset", "hi_offset", "ls_offset", "consumer_lag", "fetchq_cnt",
                      "rxmsgs", "rxbytes"}


def _serve(client, seconds: float, sink: list | None = None) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if isinstance(client, confluent_kafka.Producer) or isinstance(client, Producer):
            client.poll(0.05)
        else:
            for msg in client.consume(200, 0.05):
                if sink is not None and msg.error() is None:
                    sink.append(msg)


def _names_are_librdkafkas(ours: dict, theirs: dict, path: str) -> None:
    """Every key we emit exists in librdkafka's object at the same place (no invented names)."""
    extra = set(ours) - set(theirs)
    assert not extra, f"{path}: fields librdkafka does not have: {sorted(extra)}"


def test_producer_statistics(mock_cluster_factory, unique_topic) -> None:
    cluster = mock_cluster_factory(3)
    cluster.create_topic(unique_topic, 3)
    ours: list[str] = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "statistics.interval.ms": 200,
                         "stats_cb": ours.append, "enable.idempotence": True})
    try:
        for i in range(COUNT):
            producer.produce(unique_topic, b"v" * 100, partition=i % 3)
        assert producer.flush(15) == 0
        _serve(producer, 0.8)
    finally:
        producer.close()
    snapshots = [json.loads(text) for text in ours]
    assert len(snapshots) >= 2
    last = snapshots[-1]
    assert TOP_LEVEL <= set(last) and last["type"] == "producer" and last["msg_cnt"] == 0
    parts = last["topics"][unique_topic]["partitions"]
    assert sorted(parts) == ["0", "1", "2"] and all(PRODUCER_PARTITION <= set(p) for p in parts.values())
    assert sum(p["txmsgs"] for p in parts.values()) == COUNT == last["txmsgs"]
    assert {p["leader"] for p in parts.values()} <= {b["nodeid"] for b in last["brokers"].values()}
    brokers = [b for b in last["brokers"].values() if b["nodeid"] >= 0]
    assert len(brokers) == 3 and all(BROKER <= set(b) and b["state"] == "UP" for b in brokers)
    assert sum(b["req"].get("Produce", 0) for b in brokers) >= 3
    assert any(b["rtt"]["cnt"] > 0 for s in snapshots for b in s["brokers"].values())  # windows saw round trips
    assert last["tx"] == sum(b["tx"] for b in last["brokers"].values())
    eos = last["eos"]
    assert eos["idemp_state"] == "Assigned" and eos["producer_id"] >= 0 and eos["epoch_cnt"] == 1

    theirs: list[str] = []
    peer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "statistics.interval.ms": 200,
                                     "stats_cb": theirs.append, "enable.idempotence": True})
    peer.produce(unique_topic, b"x", partition=0)
    peer.flush(10)
    _serve(peer, 0.6)
    reference = json.loads(theirs[-1])
    _names_are_librdkafkas(last, reference, "top level")
    _names_are_librdkafkas(eos, reference["eos"], "eos")
    assert reference["eos"]["idemp_state"] == eos["idemp_state"]
    ref_broker = next(b for b in reference["brokers"].values() if b["nodeid"] >= 0)
    _names_are_librdkafkas(brokers[0], ref_broker, "brokers")
    _names_are_librdkafkas(brokers[0]["rtt"], ref_broker["rtt"], "rtt")
    _names_are_librdkafkas(parts["0"], reference["topics"][unique_topic]["partitions"]["0"], "partitions")


def test_consumer_statistics(mock_cluster_factory, unique_topic) -> None:
    cluster = mock_cluster_factory(1)
    cluster.group_initial_rebalance_delay_ms(0)
    cluster.create_topic(unique_topic, 2)
    feeder = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(COUNT):
        feeder.produce(unique_topic, b"v" * 100, partition=i % 2)
    feeder.flush(10)
    ours: list[str] = []
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g-stats", "auto.offset.reset":
                         "earliest", "enable.auto.commit": False, "statistics.interval.ms": 200,
                         "stats_cb": ours.append})
    got: list = []
    try:
        consumer.subscribe([unique_topic])
        deadline = time.monotonic() + 30
        while len(got) < COUNT and time.monotonic() < deadline:
            _serve(consumer, 0.1, got)
        assert len(got) == COUNT
        consumer.commit(asynchronous=False)
        _serve(consumer, 0.8)
    finally:
        consumer.close()
    last = json.loads(ours[-1])
    assert TOP_LEVEL <= set(last) and last["type"] == "consumer" and last["rxmsgs"] == COUNT
    parts = last["topics"][unique_topic]["partitions"]
    assert sorted(parts) == ["0", "1"] and all(CONSUMER_PARTITION <= set(p) for p in parts.values())
    for part in parts.values():
        assert part["app_offset"] == part["committed_offset"] == part["hi_offset"] == COUNT // 2
        assert part["consumer_lag"] == 0 and part["fetchq_cnt"] == 0 and part["rxmsgs"] == COUNT // 2
    assert last["cgrp"]["assignment_size"] == 2 and last["cgrp"]["rebalance_cnt"] >= 1

    theirs: list[str] = []
    peer = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g-stats-peer",
                                     "auto.offset.reset": "earliest", "statistics.interval.ms": 200,
                                     "stats_cb": theirs.append})
    try:
        peer.subscribe([unique_topic])
        deadline = time.monotonic() + 20
        while not any(json.loads(t).get("cgrp", {}).get("assignment_size") for t in theirs[-1:]):
            assert time.monotonic() < deadline
            peer.poll(0.1)
    finally:
        peer.close()
    reference = json.loads(theirs[-1])
    _names_are_librdkafkas(last, reference, "top level")
    _names_are_librdkafkas(last["cgrp"], reference["cgrp"], "cgrp")
    _names_are_librdkafkas(parts["0"], reference["topics"][unique_topic]["partitions"]["0"], "partitions")


def test_no_statistics_without_an_interval(mock_cluster_factory, unique_topic) -> None:
    cluster = mock_cluster_factory(1)
    called: list[str] = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "stats_cb": called.append})
    try:
        producer.produce(unique_topic, b"v")
        producer.flush(10)
        _serve(producer, 0.5)
    finally:
        producer.close()
    assert called == []  # statistics.interval.ms defaults to 0: disabled, as in librdkafka


def test_a_broker_that_goes_down_is_reported_down_and_snapshots_keep_coming(mock_cluster_factory, unique_topic):
    cluster = mock_cluster_factory(2)
    cluster.create_topic(unique_topic, 2)
    cluster.partition_set_leader(unique_topic, 0, 1)
    cluster.partition_set_leader(unique_topic, 1, 2)
    ours: list[str] = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "statistics.interval.ms": 200,
                         "stats_cb": ours.append})
    try:
        for partition in (0, 1):
            producer.produce(unique_topic, b"v", partition=partition)
        assert producer.flush(15) == 0

        def broker_2() -> dict:
            brokers = json.loads(ours[-1])["brokers"] if ours else {}
            return next((b for b in brokers.values() if b["nodeid"] == 2), {})

        wait_until(lambda: broker_2().get("state") == "UP", 20, "broker 2 up in a snapshot", sleep=producer.poll)
        cluster.broker_set_down(2)
        deadline = time.monotonic() + 20

        # down: reported DOWN (or reconnecting) with its disconnect counted — or, once a metadata refresh no longer
        # lists it (the mock leaves a down broker out), removed from the snapshots as librdkafka does
        while ours and broker_2() and (broker_2().get("state") not in ("DOWN", "CONNECT", "INIT")
                                       or not broker_2().get("disconnects")):
            assert time.monotonic() < deadline, f"broker 2 still reported as {broker_2()}"
            producer.poll(0.1)
        count = len(ours)
        _serve(producer, 0.6)
        assert len(ours) > count  # snapshots keep coming while a broker is down
        up = next(b for b in json.loads(ours[-1])["brokers"].values() if b["nodeid"] == 1)
        assert up["state"] == "UP"
    finally:
        cluster.broker_set_up(2)
        producer.close()
