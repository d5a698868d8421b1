"""Configuration properties that used to be accepted and do nothing, each shown doing what librdkafka does, on a
real broker (the librdkafka mock cluster): socket options on the broker sockets, idle connection close,
address family, automatic topic creation, the topic propagation wait, metadata cache expiry, the response
size limit and the coordinator query interval."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import time

import pytest
from support.waiting import wait_until

from kqactors import Consumer, KafkaError, Producer


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[tuple[int, str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if isinstance(record.args, tuple) and len(record.args) == 3:
            self.messages.append((record.levelno, record.args[0], record.args[2]))

    def having(self, text: str) -> list[tuple[int, str, str]]:
        return [m for m in self.messages if text in m[2]]


@pytest.fixture
def app_log(request):
    logger = logging.getLogger(f"app.effects.{request.node.name}")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    records = Records()
    logger.addHandler(records)
    yield logger, records
    logger.removeHandler(records)


def _producer(bootstrap: str, **conf) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "kqactors.hosts": 0, "linger.ms": 0, **conf})


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2) to read the client's sockets")
def test_socket_options_are_set_on_the_broker_sockets(fresh_cluster, unique_topic):
    fresh_cluster.create_topic(unique_topic, 1)
    port = fresh_cluster.bootstrap.split(",")[0].rpartition(":")[2]

    def client_sockets() -> str:
        return subprocess.run(["ss", "-tnoem", "state", "established", f"dport = :{port}"], capture_output=True,
                              text=True, check=True).stdout

    with _producer(fresh_cluster.bootstrap, **{"socket.keepalive.enable": True, "socket.send.buffer.bytes": 100000,
                                               "socket.receive.buffer.bytes": 200000}) as producer:
        producer.produce(unique_topic, b"x")
        assert producer.flush(15) == 0
        shown = client_sockets()
    assert "timer:(keepalive" in shown  # SO_KEEPALIVE
    assert "tb200000" in shown and "rb400000" in shown  # SO_SNDBUF / SO_RCVBUF (Linux reports them doubled)
    with _producer(fresh_cluster.bootstrap) as producer:
        producer.produce(unique_topic, b"x")
        assert producer.flush(15) == 0
        shown = client_sockets()
    assert "keepalive" not in shown and "tb200000" not in shown


def test_idle_connections_are_closed_and_reopened_for_new_work(fresh_cluster, unique_topic, app_log):
    logger, records = app_log
    fresh_cluster.create_topic(unique_topic, 1)
    stats: list[dict] = []
    with _producer(fresh_cluster.bootstrap, logger=logger, debug="broker", stats_cb=lambda s: stats.append(
            json.loads(s)), **{"connections.max.idle.ms": 1000, "statistics.interval.ms": 200,
                               "topic.metadata.refresh.interval.ms": 60000}) as producer:
        producer.produce(unique_topic, b"before")
        assert producer.flush(15) == 0
        wait_until(lambda: records.having("Connection max idle time exceeded"), 10, "an idle close",
                   sleep=producer.poll)
        wait_until(lambda: stats and any(b["state"] == "INIT" for b in stats[-1]["brokers"].values()), 5,
                   "the broker reported INIT (no connection, none needed)", sleep=producer.poll)
        producer.produce(unique_topic, b"after")
        assert producer.flush(15) == 0  # the next work opened a new connection
    (level, facility, _), *_ = records.having("Connection max idle time exceeded")
    assert (level, facility) == (logging.DEBUG, "FAIL")
    assert not records.having("ALL_BROKERS_DOWN")


def test_broker_address_family_limits_which_addresses_are_used(fresh_cluster, unique_topic, app_log):
    logger, records = app_log
    fresh_cluster.create_topic(unique_topic, 1)
    with _producer(fresh_cluster.bootstrap, **{"broker.address.family": "v4"}) as producer:
        producer.produce(unique_topic, b"x")
        assert producer.flush(15) == 0
    errors: list[KafkaError] = []
    with _producer(fresh_cluster.bootstrap, logger=logger, error_cb=errors.append,
                   **{"broker.address.family": "v6"}) as producer:  # 127.0.0.1 is not an IPv6 address
        wait_until(lambda: records.having("address family not allowed by broker.address.family"), 10,
                   "the refused address", sleep=producer.poll)
        wait_until(lambda: errors, 10, "an error", sleep=producer.poll)
    assert errors[0].code() in (KafkaError._RESOLVE, KafkaError._ALL_BROKERS_DOWN)


def test_allow_auto_create_topics_and_the_propagation_wait(fresh_cluster, unique_topic):
    reports: list[tuple[KafkaError | None, float]] = []
    started = time.monotonic()
    with _producer(fresh_cluster.bootstrap, **{"allow.auto.create.topics": False,
                                               "topic.metadata.propagation.max.ms": 1500}) as producer:
        producer.produce(unique_topic, b"x", on_delivery=lambda err, msg: reports.append(
            (err, time.monotonic() - started)))
        assert producer.flush(15) == 0
        assert unique_topic not in producer.list_topics(timeout=5).topics  # not created
    ((error, after),) = reports
    assert error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART  # as librdkafka (tests/compat/test_client_behaviour.py)
    assert 1.4 <= after < 8  # declared missing once topic.metadata.propagation.max.ms had passed
    reports.clear()
    with _producer(fresh_cluster.bootstrap) as producer:  # the producer's default: true
        producer.produce(unique_topic, b"x", on_delivery=lambda err, msg: reports.append((err, 0.0)))
        assert producer.flush(15) == 0
    assert reports == [(None, 0.0)]


@pytest.mark.parametrize("allow", [False, True])
def test_a_consumer_subscribing_creates_topics_only_when_allowed(fresh_cluster, unique_topic, allow):
    consumer = Consumer({"bootstrap.servers": fresh_cluster.bootstrap, "group.id": f"g-create-{allow}",
                         "kqactors.hosts": 0, "allow.auto.create.topics": allow})
    try:
        consumer.subscribe([unique_topic])
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline and unique_topic not in consumer.list_topics(timeout=5).topics:
            consumer.poll(0.2)
        assert (unique_topic in consumer.list_topics(timeout=5).topics) is allow
    finally:
        consumer.close()


def test_metadata_cache_entries_expire_after_metadata_max_age(fresh_cluster, unique_topic):
    fresh_cluster.create_topic(unique_topic, 2)
    stats: list[dict] = []
    with _producer(fresh_cluster.bootstrap, stats_cb=lambda s: stats.append(json.loads(s)),
                   **{"statistics.interval.ms": 200, "metadata.max.age.ms": 1000,
                      "topic.metadata.refresh.interval.ms": -1}) as producer:
        producer.produce(unique_topic, b"x")
        assert producer.flush(15) == 0
        wait_until(lambda: stats and stats[-1]["metadata_cache_cnt"] == 1, 5, "the topic cached",
                   sleep=producer.poll)
        wait_until(lambda: stats[-1]["metadata_cache_cnt"] == 0, 5, "the entry expired", sleep=producer.poll)
        producer.produce(unique_topic, b"y", partition=1)  # a partition not started yet: fresh metadata
        assert producer.flush(15) == 0


def test_a_response_larger_than_receive_message_max_bytes_fails_the_connection(fresh_cluster, unique_topic,
                                                                               app_log):
    logger, records = app_log
    fresh_cluster.create_topic(unique_topic, 64)  # its Metadata response is larger than 1000 bytes
    with _producer(fresh_cluster.bootstrap, logger=logger, **{"receive.message.max.bytes": 1000}) as producer:
        producer.produce(unique_topic, b"x")
        wait_until(lambda: records.having("increase receive.message.max.bytes"), 15, "the refused response",
                   sleep=producer.poll)
        producer.purge()
    (level, facility, text), *_ = records.having("increase receive.message.max.bytes")
    assert (level, facility) == (logging.ERROR, "FAIL") and "Invalid response size" in text


def test_the_group_coordinator_is_queried_every_coordinator_query_interval(fresh_cluster, unique_topic):
    fresh_cluster.create_topic(unique_topic, 1)
    consumer = Consumer({"bootstrap.servers": fresh_cluster.bootstrap, "group.id": "g-coord-query",
                         "kqactors.hosts": 0, "coordinator.query.interval.ms": 500})
    try:
        consumer.subscribe([unique_topic])
        consumer.poll(1.0)
        fresh_cluster.start_request_tracking()
        consumer.poll(2.2)
        finds = [r for r in fresh_cluster.get_requests() if r.api_key == 10]  # FindCoordinator
        assert len(finds) >= 3
    finally:
        fresh_cluster.stop_request_tracking()
        consumer.close()
