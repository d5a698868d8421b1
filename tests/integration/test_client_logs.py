"""logger= and debug= on a real broker (the librdkafka mock cluster): librdkafka-style records reach the
application's logger from poll() as confluent-kafka emits them (``logger.log(level, "%s [%s] %s", facility,
"rdkafka#producer-1", message)``), including what code on the actor hosts logs; log_level and
log.connection.close decide which records are made."""

from __future__ import annotations

import logging
import re
import time

import pytest
from support.kafka_io import produce_numbered
from support.waiting import wait_until

from kqactors import Consumer, Producer, TopicPartition


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def client_records(self) -> list[logging.LogRecord]:
        """librdkafka-style records (the facade's own messages, e.g. about a dead host, are plain text)."""
        return [r for r in self.records if isinstance(r.args, tuple) and len(r.args) == 3]

    def facilities(self) -> set[str]:
        return {r.args[0] for r in self.client_records()}

    def messages(self, level: int | None = None, facility: str | None = None) -> list[str]:
        return [r.args[2] for r in self.client_records()
                if (level is None or r.levelno == level) and (facility is None or r.args[0] == facility)]


@pytest.fixture
def app_log(request) -> tuple[logging.Logger, Records]:
    logger = logging.getLogger(f"app.{request.node.name}")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    records = Records()
    logger.addHandler(records)
    yield logger, records
    logger.removeHandler(records)


def test_debug_records_come_from_poll_with_facility_and_client_name(mock_cluster, unique_topic, app_log):
    logger, records = app_log
    mock_cluster.create_topic(unique_topic, 2)
    producer = Producer({"bootstrap.servers": mock_cluster.bootstrap, "logger": logger, "kqactors.hosts": 1,
                         "debug": "broker,topic,msg"})
    try:
        time.sleep(1.0)  # the client connects meanwhile, but nothing is emitted before poll()
        assert records.facilities() == {"INIT"}, "only the app's own first record so far"
        producer.produce(unique_topic, b"hello", key=b"k")
        assert producer.flush(15) == 0
        wait_until(lambda: {"MSGSET", "PRODUCE", "STATE", "CONNECT", "BROKER", "TOPBRK"} <= records.facilities(),
                   10, "broker, topic and msg records", sleep=producer.poll)
    finally:
        producer.close()
    assert records.client_records() == records.records
    for record in records.records:
        assert record.msg == "%s [%s] %s" and record.levelno == logging.DEBUG
        assert re.fullmatch(r"rdkafka#producer-\d+", record.args[1])
        assert record.args[2].startswith("[thrd:")
    assert any(re.search(r"\[thrd:127\.0\.0\.1:\d+/1\]: 127\.0\.0\.1:\d+/1: Broker changed state "
                         r"APIVERSION_QUERY -> UP", m) for m in records.messages(facility="STATE"))
    assert any(f"{unique_topic} [" in m and "delivered" in m for m in records.messages(facility="MSGSET"))
    # what a toppar host logs through Python's logging arrives too, named after its host
    assert any(m.startswith("[thrd:h1]: toppar/") for m in records.messages(facility="MSG"))
    assert "FETCH" not in records.facilities()  # a context not asked for


def test_consumer_debug_cgrp_logs_the_group(mock_cluster, unique_topic, app_log):
    logger, records = app_log
    mock_cluster.create_topic(unique_topic, 1)
    consumer = Consumer({"bootstrap.servers": mock_cluster.bootstrap, "group.id": "g-logs-cgrp", "logger": logger,
                         "debug": "cgrp", "kqactors.hosts": 0})
    try:
        consumer.subscribe([unique_topic])
        wait_until(lambda: any("join state STEADY" in m for m in records.messages(facility="CGRPJOINSTATE")), 20,
                   "the group joined", sleep=consumer.poll)
    finally:
        consumer.close()
    assert any('Group "g-logs-cgrp": coordinator is now broker' in m for m in records.messages(facility="CGRPCOORD"))
    assert "FETCH" not in records.facilities()


def test_consumer_debug_all_logs_fetches_and_protocol(mock_cluster, unique_topic, app_log):
    logger, records = app_log
    mock_cluster.create_topic(unique_topic, 1)
    produce_numbered(mock_cluster.bootstrap, unique_topic, 2, 1)
    consumer = Consumer({"bootstrap.servers": mock_cluster.bootstrap, "group.id": "g-logs", "logger": logger,
                         "debug": "all", "kqactors.hosts": 0})
    try:
        consumer.assign([TopicPartition(unique_topic, 0, 0)])
        got: list = []
        wait_until(lambda: len(got) >= 2, 20, "two messages",
                   sleep=lambda s: got.extend(m for m in consumer.consume(10, s) if m.error() is None))
        consumer.poll(0.2)
    finally:
        consumer.close()
    assert re.fullmatch(r"rdkafka#consumer-\d+", records.records[0].args[1])
    assert {"FETCH", "SEND", "RECV", "APIVERSION", "METADATA", "CONF"} <= records.facilities()
    assert any(f"Fetch topic {unique_topic} [0] at offset 0" in m for m in records.messages(facility="FETCH"))
    assert any("Sent FetchRequest (v" in m for m in records.messages(facility="SEND"))


@pytest.mark.parametrize("log_connection_close", [True, False])
def test_log_connection_close_decides_how_a_broker_disconnect_is_logged(mock_cluster_factory, unique_topic, app_log,
                                                                        log_connection_close):
    logger, records = app_log
    cluster = mock_cluster_factory(num_brokers=1)
    cluster.create_topic(unique_topic, 1)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "logger": logger, "kqactors.hosts": 0,
                         "debug": "broker", "log.connection.close": log_connection_close})
    try:
        producer.produce(unique_topic, b"x")
        assert producer.flush(15) == 0
        cluster.broker_set_down(1)
        wait_until(lambda: any("Disconnected" in m for m in records.messages()), 10, "the disconnect record",
                   sleep=producer.poll)
        errors = [m for m in records.messages(logging.ERROR, "FAIL") if "Disconnected" in m]
        debugs = [m for m in records.messages(logging.DEBUG, "FAIL") if "Disconnected" in m]
        if log_connection_close:
            assert errors and re.search(r"/1: Disconnected \(after \d+ms in state UP\)", errors[0])
        else:
            assert not errors and debugs
    finally:
        cluster.broker_set_up(1)
        producer.close()


def test_log_level_drops_records_below_it_without_debug(mock_cluster_factory, unique_topic, app_log):
    logger, records = app_log
    cluster = mock_cluster_factory(num_brokers=1)
    cluster.broker_set_down(1)
    quiet = Producer({"bootstrap.servers": cluster.bootstrap, "logger": logger, "kqactors.hosts": 0,
                      "log_level": 2})
    loud_records = Records()
    loud_logger = logging.getLogger(f"app.loud.{unique_topic}")
    loud_logger.addHandler(loud_records)
    loud_logger.propagate = False
    loud = Producer({"bootstrap.servers": cluster.bootstrap, "logger": loud_logger, "kqactors.hosts": 0})
    try:
        wait_until(lambda: loud_records.messages(logging.ERROR, "FAIL"), 10, "a connect failure at the default "
                   "log_level", sleep=loud.poll)
        quiet.poll(1.0)
        assert records.records == []  # log_level 2 (critical): the failures (3, error) are not made at all
        assert "Connect to ipv4#127.0.0.1" in loud_records.messages(logging.ERROR, "FAIL")[0]
    finally:
        quiet.close(0.1)
        loud.close(0.1)
