"""Runs in: pytest. The client handle every facade shares (kqactors.client.handle) and the runtime monitor it
reacts to: ACTORS_DOWN notices enqueued by the supervisor the moment a host dies, served without pumping;
ERR / STATS / CHILD_EXITED handling; the shared timeout rule. No broker: ``main`` is a sample actor."""

from __future__ import annotations

import json
import logging
import threading

import pytest

from kqactors.client.handle import ClientHandle, timeout_seconds
from kqactors.config import Config
from kqactors.errors import KafkaError, KafkaException
from kqactors.ops import client as ops
from kqactors.runtime import CHILD_EXITED, Op

ECHO = "support.sample_actors:EchoActor"


def _handle(kind: str = "producer", **extra) -> ClientHandle:
    return ClientHandle(Config({"bootstrap.servers": "127.0.0.1:1", "kqactors.hosts": 1, **extra}, kind=kind),
                        kind, logging.getLogger("test"))


def test_timeout_seconds() -> None:
    assert timeout_seconds(None, 3.0) == 3.0
    assert timeout_seconds(-1, 3.0) == 3.0
    assert timeout_seconds(2) == 2.0
    assert timeout_seconds(None) == float("inf")
    for bad in (True, "1"):
        with pytest.raises(TypeError):
            timeout_seconds(bad)


def test_no_bootstrap_servers_is_allowed_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    """As librdkafka: a client without bootstrap.servers is created; it says it will not connect."""
    with caplog.at_level(logging.INFO, logger="test"):
        handle = ClientHandle(Config({}, kind="consumer"), "consumer", logging.getLogger("test"))
    assert not handle.shipped.get("bootstrap.servers")
    assert "No `bootstrap.servers` configured" in caplog.text


def test_statistics_are_switched_off_for_main_without_a_callback() -> None:
    assert _handle(**{"statistics.interval.ms": 100}).shipped["statistics.interval.ms"] == 0
    handle = _handle(**{"statistics.interval.ms": 100, "stats_cb": lambda s: None})
    assert handle.shipped["statistics.interval.ms"] == 100 and handle.stats is not None


def test_err_goes_to_error_cb_and_a_fatal_one_is_recorded_once() -> None:
    errors: list[KafkaError] = []
    fatal: list[KafkaError] = []
    handle = _handle(error_cb=errors.append)
    handle.on_fatal = fatal.append
    assert handle.handle_op(Op(ops.ERR, ops.err_payload(KafkaError._TRANSPORT, "down"))) == 1
    assert handle.fatal is None and not fatal
    for _ in range(2):
        handle.handle_op(Op(ops.ERR, ops.err_payload(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, "seq", fatal=True)))
    assert [e.code() for e in errors] == [KafkaError._TRANSPORT] + [KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER] * 2
    assert len(fatal) == 1 and fatal[0].fatal() and handle.fatal is fatal[0]


def test_err_without_error_cb_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    handle = _handle(kind="consumer")
    with caplog.at_level("ERROR", logger="test"):
        handle.handle_op(Op(ops.ERR, ops.err_payload(KafkaError._TRANSPORT, "down")))
    # librdkafka's record for an error nobody handles: facility ERROR, the client's name, the error
    assert f"ERROR [{handle.name}] [thrd:app]: {handle.name}: down" in caplog.text


def test_stats_are_completed_with_the_facade_fields() -> None:
    seen: list[dict] = []
    handle = _handle(**{"statistics.interval.ms": 100, "stats_cb": lambda s: seen.append(json.loads(s))})
    handle.stats_fields = lambda: ({"msg_cnt": 7}, None)
    assert handle.handle_op(Op(ops.STATS, {"type": "producer", "brokers": {}, "topics": {}})) == 1
    assert seen and seen[0]["msg_cnt"] == 7 and seen[0]["name"].startswith("rdkafka#producer-")
    assert _handle().handle_op(Op(ops.STATS, {})) == 0  # no stats_cb: nothing served


def test_other_ops_are_left_to_the_facade() -> None:
    handle = _handle()
    restarted: list[Op] = []
    handle.on_restarted = restarted.append
    assert handle.handle_op(Op(CHILD_EXITED, {"name": "x"})) == 0 and len(restarted) == 1
    assert handle.handle_op(Op("DR", {})) is None


def test_started_handle_reports_a_dead_host_to_its_handlers() -> None:
    handle = _handle(kind="consumer")
    deaths: list[tuple[str, list[str], int]] = []
    handle.on_actors_down(lambda host, names, restarts: deaths.append((host, names, restarts)))
    rt = handle.start(ECHO, [ECHO])
    try:
        assert rt.host_keys == ["h0", "h1"] and handle.toppar_hosts() == range(1, 2)
        assert rt.request("main", Op("ECHO", 1), 10).payload == 1
        woken = threading.Event()
        handle.wake_on_notice(woken.set)
        handle.serve_notices()
        assert deaths == []
        rt.kill_host("h0")
        assert woken.wait(10)
        handle.serve_notices()  # no pumping: the supervisor enqueued it in this process
        assert deaths == [("h0", ["log/h0", "main"], 1)]  # main and the host's log forwarder
    finally:
        handle.close()
    handle.close()  # twice is fine


def test_a_fatal_err_reaches_the_producer_through_its_handle() -> None:
    from kqactors import Producer

    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "kqactors.hosts": 0, "error_cb": errors.append})
    try:
        served = producer._handle_op(Op(ops.ERR, ops.err_payload(KafkaError.INVALID_PRODUCER_EPOCH, "fenced",
                                                                 fatal=True)))
        assert served == 1 and errors and errors[0].fatal()
        assert producer._fatal is errors[0] is producer._handle.fatal
        with pytest.raises(KafkaException) as info:
            producer.produce("t", b"v")
        assert info.value.args[0].code() == KafkaError._FATAL
    finally:
        producer.close(timeout=0)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _app_logger(name: str) -> tuple[logging.Logger, _Records]:
    logger = logging.getLogger(f"test.handle.{name}")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    records = _Records()
    logger.handlers[:] = [records]
    return logger, records


def test_log_ops_reach_the_logger_as_confluent_kafka_emits_them() -> None:
    logger, records = _app_logger("log")
    handle = _handle(logger=logger)
    assert records.records == []  # no debug context: no INIT record
    served = handle.handle_op(Op(ops.LOG, ops.log_payload(3, "FAIL", "[thrd:main]: broker down")))
    assert served == 1  # the application's own logger was called from poll()
    (record,) = records.records
    assert (record.levelno, record.msg) == (logging.ERROR, "%s [%s] %s")
    assert record.args == ("FAIL", handle.name, "[thrd:main]: broker down")
    assert handle.name.startswith("rdkafka#producer-")
    handle.handle_op(Op(ops.LOG, ops.log_payload(7, "STATE", "x")))
    handle.handle_op(Op(ops.LOG, ops.log_payload(5, "NOTICE", "y")))
    assert [r.levelno for r in records.records[1:]] == [logging.DEBUG, logging.INFO]
    assert _handle().handle_op(Op(ops.LOG, ops.log_payload(3, "FAIL", "z"))) == 0  # no logger configured


def test_debug_contexts_log_init_and_the_configuration_at_construction() -> None:
    logger, records = _app_logger("init")
    handle = _handle(logger=logger, debug="conf", **{"client.id": "svc", "linger.ms": 7})
    messages = [(r.args[0], r.args[2]) for r in records.records]
    assert handle.name.startswith("svc#producer-")
    assert messages[0][0] == "INIT" and f"{handle.name} initialized" in messages[0][1]
    assert ("CONF", "[thrd:app]:   queue.buffering.max.ms = 7.0") in messages  # linger.ms, by its real name


def test_throttle_ops_call_throttle_cb_with_a_throttle_event() -> None:
    from kqactors import ThrottleEvent

    events: list[ThrottleEvent] = []
    handle = _handle(throttle_cb=events.append)
    assert handle.handle_op(Op(ops.THROTTLE, ops.throttle_payload("127.0.0.1:9092", 1, 1500))) == 1
    (event,) = events
    assert (event.broker_name, event.broker_id, event.throttle_time) == ("127.0.0.1:9092", 1, 1.5)
    assert _handle().handle_op(Op(ops.THROTTLE, ops.throttle_payload("b:1", 1, 5))) == 0  # nobody listens
