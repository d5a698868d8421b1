"""Producer end to end against real brokers: the librdkafka mock cluster (3 brokers) and Tansu."""

from __future__ import annotations

import threading
import time

import pytest
from support.waiting import wait_until

from kqactors import Producer
from kqactors.errors import KafkaError, KafkaException

pytestmark = pytest.mark.integration


def _collect():
    reports = []
    lock = threading.Lock()

    def on_delivery(err, msg):
        with lock:
            reports.append((err, msg))

    return reports, on_delivery


@pytest.fixture(params=["mock", "tansu"])
def bootstrap(request):
    if request.param == "mock":
        return request.getfixturevalue("mock_cluster").bootstrap
    return request.getfixturevalue("tansu").bootstrap


@pytest.mark.parametrize("hosts", [2, 0], ids=["toppar-hosts", "toppars-on-main"])
def test_every_message_gets_one_successful_report_with_increasing_offsets(bootstrap, unique_topic, hosts):
    reports, on_delivery = _collect()
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 2, "kqactors.hosts": hosts,
                   "on_delivery": on_delivery}) as producer:
        for i in range(300):
            producer.produce(unique_topic, value=b"v%d" % i, key=b"k%d" % (i % 7),
                             headers=[("h", b"x"), ("n", None)])
        assert producer.flush(30) == 0
        assert len(producer) == 0
    assert len(reports) == 300
    assert all(err is None for err, _ in reports)
    by_partition: dict[int, list[int]] = {}
    for _err, msg in reports:
        assert msg.topic() == unique_topic
        assert msg.latency() is not None and msg.latency() >= 0
        by_partition.setdefault(msg.partition(), []).append(msg.offset())
    for offsets in by_partition.values():
        assert offsets == sorted(offsets)
        assert len(set(offsets)) == len(offsets)
    # The same key always lands on the same partition.
    key_partitions: dict[bytes, set[int]] = {}
    for _err, msg in reports:
        key_partitions.setdefault(msg.key(), set()).add(msg.partition())
    assert key_partitions and all(len(parts) == 1 for parts in key_partitions.values())


def test_idempotent_producer_delivers_in_order(mock_cluster, unique_topic):
    reports, on_delivery = _collect()
    with Producer({"bootstrap.servers": mock_cluster.bootstrap, "enable.idempotence": True,
                   "linger.ms": 1, "batch.num.messages": 10, "kqactors.hosts": 1,
                   "on_delivery": on_delivery}) as producer:
        for i in range(100):
            producer.produce(unique_topic, value=b"%d" % i, partition=0)
        assert producer.flush(30) == 0
    assert [err for err, _ in reports] == [None] * 100
    offsets = [msg.offset() for _, msg in reports]
    values = [int(msg.value()) for _, msg in reports]
    assert values == sorted(values)
    assert offsets == sorted(offsets) and offsets[-1] - offsets[0] == 99


def test_poll_serves_reports_and_config_level_callback(mock_cluster, unique_topic):
    reports, on_delivery = _collect()
    per_message = []
    with Producer({"bootstrap.servers": mock_cluster.bootstrap, "on_delivery": on_delivery,
                   "kqactors.hosts": 1}) as producer:
        producer.produce(unique_topic, b"a")
        producer.produce(unique_topic, b"b", on_delivery=lambda err, msg: per_message.append(msg.value()))
        served = 0
        for _ in range(100):
            served += producer.poll(0.1)
            if served >= 2:
                break
        assert served == 2
    assert [msg.value() for _, msg in reports] == [b"a"]
    assert per_message == [b"b"]


def test_message_too_large_and_bad_arguments_raise(mock_cluster, unique_topic):
    with Producer({"bootstrap.servers": mock_cluster.bootstrap, "message.max.bytes": 1000,
                   "kqactors.hosts": 1}) as producer:
        with pytest.raises(KafkaException) as info:
            producer.produce(unique_topic, b"x" * 2000)
        assert info.value.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
        with pytest.raises(TypeError):
            producer.produce(unique_topic, value=123)
        with pytest.raises(TypeError):
            producer.produce(unique_topic, b"x", partition="0")
        with pytest.raises(TypeError):
            producer.produce(unique_topic, b"x", headers=42)
        producer.produce(unique_topic, b"ok")  # the partition count is known from here on
        assert producer.flush(10) == 0
        with pytest.raises(KafkaException) as info:
            producer.produce(unique_topic, b"x", partition=9999)
        assert info.value.args[0].code() == KafkaError._UNKNOWN_PARTITION


def test_queue_full_raises_buffer_error_and_blocking_form_waits(mock_cluster, unique_topic):
    with Producer({"bootstrap.servers": mock_cluster.bootstrap, "queue.buffering.max.messages": 5,
                   "kqactors.hosts": 1}) as producer:
        for _ in range(5):
            producer.produce(unique_topic, b"x")
        with pytest.raises(BufferError):
            producer.produce(unique_topic, b"x")
        producer.produce(unique_topic, b"y", block_timeout=30)  # waits for reports to free room
        assert producer.flush(30) == 0


def test_close_without_flush_reports_every_message(unique_topic):
    reports, on_delivery = _collect()
    # Nothing listens on this port: messages can never be delivered.
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "on_delivery": on_delivery,
                         "kqactors.hosts": 1, "socket.timeout.ms": 1000})
    for i in range(20):
        producer.produce(unique_topic, b"%d" % i, partition=0)
    producer.close(timeout=0.5)
    assert len(reports) == 20
    assert all(err is not None for err, _ in reports)


def test_list_topics_reports_partitions(mock_cluster):
    mock_cluster.create_topic("lt-topic", partition_cnt=3)
    with Producer({"bootstrap.servers": mock_cluster.bootstrap, "kqactors.hosts": 1}) as producer:
        metadata = producer.list_topics("lt-topic", timeout=10)
        assert sorted(metadata.topics["lt-topic"].partitions) == [0, 1, 2]
        assert len(metadata.brokers) == 3


def test_linger_zero_hands_a_message_over_at_once(mock_cluster, unique_topic):
    """linger.ms=0: the first message after a hand-over wakes the flusher instead of waiting for its timer
    (here stretched to a minute, so only the wake-up can deliver within the poll)."""
    reports, on_delivery = _collect()
    with Producer({"bootstrap.servers": mock_cluster.bootstrap, "linger.ms": 0,
                   "on_delivery": on_delivery}) as producer:
        producer.produce(unique_topic, value=b"warm", partition=0)
        assert producer.flush(30) == 0
        producer._tick_s = 60.0
        time.sleep(0.05)  # the flusher's current short wait ends; its next one lasts a minute
        producer.produce(unique_topic, value=b"now", partition=0)
        producer.produce(unique_topic, value=b"again", partition=0)
        for _ in range(100):
            producer.poll(0.1)
            if len(reports) == 3:
                break
        assert [msg.value() for err, msg in reports if err is None] == [b"warm", b"now", b"again"]


def test_linger_zero_hands_over_from_the_producing_thread_while_the_flusher_sleeps(mock_cluster, unique_topic):
    """linger.ms=0 with an idle flusher: produce() sends the message itself (no flusher wake-up); while a
    toppar is not started yet, the flusher does it (a start may block)."""
    reports, on_delivery = _collect()
    with Producer({"bootstrap.servers": mock_cluster.bootstrap, "linger.ms": 0,
                   "on_delivery": on_delivery}) as producer:
        senders: list[str] = []
        send_many = producer._rt.send_many

        def recording_send_many(items):
            senders.append(threading.current_thread().name)
            return send_many(items)

        producer._rt.send_many = recording_send_many
        producer.produce(unique_topic, value=b"first", partition=0)  # toppar not started: the flusher
        assert producer.flush(30) == 0
        assert senders and set(senders) == {"kqactors-producer-flusher"}
        # No public signal says the flusher went to sleep, and that state is what this test is about.
        wait_until(lambda: producer._flusher_idle, 5, "the flusher to go idle after the flush")
        senders.clear()
        producer.produce(unique_topic, value=b"second", partition=0)
        assert senders == [threading.current_thread().name]
        assert producer.flush(30) == 0
    assert [msg.value() for err, msg in reports if err is None] == [b"first", b"second"]


def test_a_backlog_is_handed_over_by_the_producing_thread_without_waiting_for_linger(mock_cluster, unique_topic):
    """With _flush_messages unsent, produce() hands them over itself, long before linger.ms (and without
    the flusher, which would have to queue for the GIL behind a thread producing flat out)."""
    reports, on_delivery = _collect()
    with Producer({"bootstrap.servers": mock_cluster.bootstrap, "linger.ms": 60_000,
                   "on_delivery": on_delivery}) as producer:
        producer.produce(unique_topic, value=b"warm", partition=0)
        assert producer.flush(30) == 0  # the toppar runs
        producer._flush_messages = 50
        producer._tick_s = 60.0  # the flusher's own hand-over, every tick, would come after a minute
        time.sleep(0.05)  # its current short wait ends
        senders: list[str] = []
        send_many = producer._rt.send_many

        def recording_send_many(items):
            senders.append(threading.current_thread().name)
            return send_many(items)

        producer._rt.send_many = recording_send_many
        for index in range(49):
            producer.produce(unique_topic, value=b"%d" % index, partition=0)
        assert senders == []  # below the mark: linger.ms (a minute) holds them
        producer.produce(unique_topic, value=b"49", partition=0)
        assert senders == [threading.current_thread().name]
        assert producer.flush(30) == 0
    assert [msg.value() for err, msg in reports if err is None] == [b"warm"] + [b"%d" % i for i in range(50)]
