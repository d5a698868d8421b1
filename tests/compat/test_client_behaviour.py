"""Client behaviours side by side with confluent-kafka: each scenario runs on both clients and must come out
the same (the facts asserted were read off confluent-kafka 2.16.1 / librdkafka 2.16.0).

- no bootstrap.servers (or no broker reachable): the client is created; produced messages fail with
  _MSG_TIMED_OUT at message.timeout.ms (not at a lookup timeout of the client's own); poll()/consume() return
  nothing; list_topics() raises _TRANSPORT; cluster_id() raises _TIMED_OUT.
- subscribe() to a topic that does not exist: poll() returns UNKNOWN_TOPIC_OR_PART for it at once.
- produce_batch(): the count queued, ``_error`` in the dicts it could not queue, the argument errors.
- consume(n, timeout) waits for n messages or the timeout; cluster_id(); memberid().

Runs in: the pytest process (the mock cluster and kqactors' hosts are child processes).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import confluent_kafka
import pytest

import kqactors
from kqactors.testing._process import free_loopback_port

pytestmark = [pytest.mark.timeout(120)]

PEERS = [pytest.param(confluent_kafka, id="confluent"), pytest.param(kqactors, id="kqactors")]

_quiet = logging.getLogger("kqactors.tests.quiet")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False


def _conf(kafka: Any, **conf: Any) -> dict[str, Any]:
    """``conf`` plus a silent logger; for kqactors one host process (light on a shared machine)."""
    out = {"logger": _quiet, **conf}
    if kafka is kqactors:
        out["kqactors.hosts"] = 0
    return out


class Reports:
    """Delivery reports as (error code or 0, partition or None, seconds since ``start``)."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.items: list[tuple[int, int | None, float]] = []

    def __call__(self, err: Any, msg: Any) -> None:
        self.items.append((err.code() if err is not None else 0, msg.partition(), time.monotonic() - self.start))


# ---- no broker ---------------------------------------------------------------------------------------------

NO_BROKER = {
    "no bootstrap.servers": {},
    "only socket.timeout.ms": {"socket.timeout.ms": 10},
    "unreachable broker": {"bootstrap.servers": "127.0.0.1:{port}"},
}


def _no_broker_conf(name: str) -> dict[str, Any]:
    return {k: v.format(port=free_loopback_port()) if isinstance(v, str) else v for k, v in NO_BROKER[name].items()}


@pytest.mark.parametrize("kafka", PEERS)
@pytest.mark.parametrize(("setup", "timeout_ms"), [("no bootstrap.servers", 1500), ("only socket.timeout.ms", 3000),
                                                   ("unreachable broker", 1500)])
def test_without_a_broker_messages_time_out_at_message_timeout_ms(kafka, setup, timeout_ms):
    producer = kafka.Producer(_conf(kafka, **_no_broker_conf(setup), **{"message.timeout.ms": timeout_ms}))
    reports = Reports()
    producer.produce("t", b"partitioner's choice", on_delivery=reports)
    producer.produce("t", b"explicit partition", partition=2, on_delivery=reports)
    assert producer.flush(timeout_ms / 1000 + 5) == 0
    assert [(code, partition) for code, partition, _ in reports.items] == \
        [(kafka.KafkaError._MSG_TIMED_OUT, None), (kafka.KafkaError._MSG_TIMED_OUT, 2)]
    for _code, _partition, took in reports.items:
        assert timeout_ms / 1000 - 0.1 < took < timeout_ms / 1000 + 1.0


@pytest.mark.parametrize("kafka", PEERS)
@pytest.mark.parametrize("setup", sorted(NO_BROKER))
def test_without_a_broker_calls_fail_as_librdkafka(kafka, setup):
    conf = _conf(kafka, **_no_broker_conf(setup))
    producer = kafka.Producer(conf)
    consumer = kafka.Consumer({**conf, "group.id": "g-no-broker"})
    try:
        for client in (producer, consumer):
            with pytest.raises(kafka.KafkaException) as info:
                client.list_topics(timeout=0.5)
            assert info.value.args[0].code() == kafka.KafkaError._TRANSPORT
            with pytest.raises(kafka.KafkaException) as info:
                client.cluster_id(0.3)
            assert info.value.args[0].code() == kafka.KafkaError._TIMED_OUT
        assert isinstance(producer.poll(0.2), int)  # it counts served log and error events too: no fixed number
        assert consumer.poll(0.2) is None
        assert consumer.consume(5, 0.2) == []
        consumer.subscribe(["t"])
        assert consumer.poll(0.3) is None
        assert consumer.memberid() is None
    finally:
        consumer.close()


@pytest.mark.parametrize("kafka", PEERS)
def test_a_missing_topic_fails_its_messages_after_the_propagation_time(kafka, mock_cluster_factory, unique_topic):
    """The broker says the topic does not exist: its messages wait topic.metadata.propagation.max.ms (topic
    creation is asynchronous), then fail with UNKNOWN_TOPIC_OR_PART, and produce() then raises _UNKNOWN_TOPIC."""
    cluster = mock_cluster_factory(1)
    cluster.topic_set_error(unique_topic, "UNKNOWN_TOPIC_OR_PART")
    producer = kafka.Producer(_conf(kafka, **{"bootstrap.servers": cluster.bootstrap, "message.timeout.ms": 20000,
                                              "topic.metadata.propagation.max.ms": 1500}))
    reports = Reports()
    producer.produce(unique_topic, b"partitioner's choice", on_delivery=reports)
    producer.produce(unique_topic, b"explicit", partition=1, on_delivery=reports)
    assert producer.flush(15) == 0
    assert [(code, partition) for code, partition, _ in reports.items] == \
        [(kafka.KafkaError.UNKNOWN_TOPIC_OR_PART, None), (kafka.KafkaError.UNKNOWN_TOPIC_OR_PART, 1)]
    assert all(1.4 < took < 4.0 for _, _, took in reports.items), reports.items
    with pytest.raises(kafka.KafkaException) as info:
        producer.produce(unique_topic, b"late")
    assert info.value.args[0].code() == kafka.KafkaError._UNKNOWN_TOPIC


# ---- subscribing to a missing topic ------------------------------------------------------------------------

@pytest.mark.parametrize("kafka", PEERS)
def test_subscribing_to_a_missing_topic_is_reported_at_once_by_poll(kafka, mock_cluster, unique_topic):
    missing = unique_topic + "-missing"
    mock_cluster.create_topic(unique_topic, 1)
    consumer = kafka.Consumer(_conf(kafka, **{"bootstrap.servers": mock_cluster.bootstrap, "group.id": unique_topic,
                                              "auto.offset.reset": "earliest"}))
    try:
        started = time.monotonic()
        consumer.subscribe([missing, unique_topic])
        event = None
        while event is None and time.monotonic() - started < 10:
            event = consumer.poll(0.2)
        took = time.monotonic() - started
        assert event is not None and event.error() is not None
        assert event.error().code() == kafka.KafkaError.UNKNOWN_TOPIC_OR_PART
        assert f"Subscribed topic not available: {missing}" in event.error().str()
        assert (event.topic(), event.partition(), event.offset()) == (missing, 0, None)
        assert took < 3, f"reported after {took:.1f} s"
        # the other topic is consumed as usual, and the missing one is not reported again meanwhile
        producer = confluent_kafka.Producer({"bootstrap.servers": mock_cluster.bootstrap})
        producer.produce(unique_topic, b"there")
        assert producer.flush(10) == 0
        seen = []
        deadline = time.monotonic() + 20
        while not any(m.error() is None for m in seen) and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None:
                seen.append(msg)
        assert [m.value() for m in seen] == [b"there"]
    finally:
        consumer.close()


# ---- produce_batch -----------------------------------------------------------------------------------------

def _batch_outcome(kafka: Any, bootstrap: str, topic: str) -> dict[str, Any]:
    """What a run of produce_batch() calls does on one client, in plain data."""
    delivered: list[tuple[str, bytes, int]] = []

    def named(name: str) -> Callable[..., None]:
        return lambda err, msg: delivered.append((name, msg.value(), msg.partition() if err is None else -1))

    producer = kafka.Producer(_conf(kafka, **{"bootstrap.servers": bootstrap, "message.max.bytes": 2000,
                                              "queue.buffering.max.messages": 5, "on_delivery": named("default")}))
    out: dict[str, Any] = {}

    def errors(messages: list[dict]) -> list[int | None]:
        return [m["_error"].code() if "_error" in m else None for m in messages]

    first = [{"value": b"a", "partition": 2}, {"value": "b", "key": "k"}, {"value": b"x" * 5000},
             {"value": b"c", "callback": named("own")}, {"value": b"d", "headers": [("h", b"v")]}, {"value": b"e"},
             {"value": b"f"}]
    out["first"] = (producer.produce_batch(topic, first), errors(first))
    assert producer.flush(15) == 0
    out["first delivered"] = sorted((name, value) for name, value, _ in delivered)
    delivered.clear()
    second = [{"value": b"g"}, {"value": b"h", "partition": 1}]
    out["second"] = (producer.produce_batch(topic, second, partition=3, callback=named("callback"),
                                            on_delivery=named("on_delivery")), errors(second))
    assert producer.flush(15) == 0
    out["second delivered"] = sorted(delivered)
    delivered.clear()
    third = [{"value": b"i"}, {"value": b"j", "partition": 1}]
    out["third"] = (producer.produce_batch(topic, third, partition=7), errors(third))
    out["empty"] = producer.produce_batch(topic, [])
    raised = []
    for bad in ([{"value": 1}], ({"value": b"a"},), [1], [{"value": b"a", "timestamp": 5}],
                [{"value": b"a", "headers": 5}], [{"value": b"a", "partition": "x"}], [{"key": 2.5}]):
        try:
            producer.produce_batch(topic, bad)
        except Exception as exc:  # noqa: BLE001 - the exception's type is the outcome
            raised.append(type(exc).__name__)
        else:
            raised.append(None)
    out["raised"] = raised
    assert producer.flush(15) == 0
    out["nothing else delivered"] = delivered == []
    return out


def test_produce_batch_matches_confluent_kafka(mock_cluster, unique_topic):
    mock_cluster.create_topic(unique_topic, 4)
    peer = _batch_outcome(confluent_kafka, mock_cluster.bootstrap, unique_topic)
    ours = _batch_outcome(kqactors, mock_cluster.bootstrap, unique_topic)
    assert ours == peer
    KE = kqactors.KafkaError
    # what confluent-kafka did: a message's own partition and headers are not used; failed ones get _error
    assert peer["first"] == (5, [None, None, KE.MSG_SIZE_TOO_LARGE, None, None, None, KE._QUEUE_FULL])
    assert peer["first delivered"] == [("default", v) for v in (b"a", b"b", b"d", b"e")] + [("own", b"c")]
    assert peer["second"] == (2, [None, None]) and peer["second delivered"] == [("callback", b"g", 3),
                                                                                ("callback", b"h", 3)]
    assert peer["third"] == (0, [KE._UNKNOWN_PARTITION, KE._UNKNOWN_PARTITION]) and peer["empty"] == 0
    assert peer["raised"] == ["TypeError", "TypeError", "TypeError", "NotImplementedError", "ValueError",
                              "TypeError", "TypeError"]


# ---- consume(), cluster_id(), memberid() -------------------------------------------------------------------

@pytest.mark.parametrize("kafka", PEERS)
def test_consume_waits_for_num_messages_or_the_timeout(kafka, mock_cluster, unique_topic):
    mock_cluster.create_topic(unique_topic, 1)
    producer = confluent_kafka.Producer({"bootstrap.servers": mock_cluster.bootstrap})
    for i in range(3):
        producer.produce(unique_topic, b"%d" % i)
    assert producer.flush(10) == 0
    consumer = kafka.Consumer(_conf(kafka, **{"bootstrap.servers": mock_cluster.bootstrap, "group.id": unique_topic}))
    try:
        consumer.assign([kafka.TopicPartition(unique_topic, 0, 0)])
        assert [m.value() for m in consumer.consume(1, 15)] == [b"0"]  # fetched: the others are there too
        started = time.monotonic()
        got = consumer.consume(10, 1.0)  # two are there, ten are asked for: it waits the whole second
        took = time.monotonic() - started
        assert [m.value() for m in got] == [b"1", b"2"]
        assert 0.9 < took < 1.6, took
        for i in range(3, 6):
            producer.produce(unique_topic, b"%d" % i)
        assert producer.flush(10) == 0
        started = time.monotonic()
        got = consumer.consume(2, 15)  # three arrive, two are asked for: back as soon as two are there
        assert [m.value() for m in got] == [b"3", b"4"] and time.monotonic() - started < 5
        started = time.monotonic()
        assert [m.value() for m in consumer.consume(5, 0)] in ([], [b"5"])  # timeout 0: what is there, at once
        assert time.monotonic() - started < 0.5
    finally:
        consumer.close()


@pytest.mark.parametrize("kafka", PEERS)
def test_cluster_id_and_memberid(kafka, mock_cluster, unique_topic):
    mock_cluster.create_topic(unique_topic, 1)
    conf = _conf(kafka, **{"bootstrap.servers": mock_cluster.bootstrap})
    producer = kafka.Producer(conf)
    cluster_id = producer.cluster_id(10)
    assert isinstance(cluster_id, str) and cluster_id
    assert producer.list_topics(timeout=10).cluster_id == cluster_id
    assert producer.cluster_id(0) == cluster_id  # known now: no wait
    with pytest.raises(TypeError):
        producer.cluster_id("soon")
    consumer = kafka.Consumer({**conf, "group.id": unique_topic})
    try:
        assert consumer.cluster_id(10) == cluster_id
        assert consumer.memberid() is None  # not in the group yet
        consumer.subscribe([unique_topic])
        deadline = time.monotonic() + 20
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.2)
        member = consumer.memberid()
        assert isinstance(member, str) and member
    finally:
        consumer.close()
    with pytest.raises(RuntimeError):
        consumer.memberid()
