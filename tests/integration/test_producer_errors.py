"""Producer error paths against the librdkafka mock cluster: bad arguments and configuration, errors the
broker returns that must not be retried, unknown topics, and a close() that leaves nothing behind.

Runs in: the pytest process (producer hosts and the mock cluster are child processes). Every produced
message must end in exactly one delivery report and nothing may hang.
"""

from __future__ import annotations

import os
import threading
import time

import psutil
import pytest

from kqactors import Producer
from kqactors.errors import KafkaError, KafkaException

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

PRODUCE = 0  # Produce api key
FAST = {"kqactors.hosts": 1, "linger.ms": 2, "retry.backoff.ms": 20, "message.timeout.ms": 20_000}


class Reports:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: list[tuple[KafkaError | None, bytes]] = []
        self.partitions: list[int] = []

    def __call__(self, err: KafkaError | None, msg) -> None:
        with self.lock:
            self.items.append((err, msg.value()))
            self.partitions.append(msg.partition())

    def codes(self) -> list[int]:
        return [err.code() if err else 0 for err, _ in self.items]


BAD_PRODUCE_ARGS = [
    pytest.param({"value": 123}, id="int-value"),
    pytest.param({"value": b"x", "key": 1.5}, id="float-key"),
    pytest.param({"value": b"x", "partition": "0"}, id="str-partition"),
    pytest.param({"value": b"x", "headers": 42}, id="int-headers"),
    pytest.param({"value": b"x", "headers": [("k", 5)]}, id="int-header-value"),
    pytest.param({"value": b"x", "timestamp": "now"}, id="str-timestamp"),
]


@pytest.mark.parametrize("kwargs", BAD_PRODUCE_ARGS)
def test_wrong_argument_types_raise_type_error_like_confluent_kafka(mock_cluster, unique_topic, kwargs):
    import confluent_kafka

    peer = confluent_kafka.Producer({"bootstrap.servers": mock_cluster.bootstrap})
    with pytest.raises(TypeError):
        peer.produce(unique_topic, **kwargs)
    peer.flush(1)
    with Producer({"bootstrap.servers": mock_cluster.bootstrap, **FAST}) as producer:
        with pytest.raises(TypeError):
            producer.produce(unique_topic, **kwargs)
        with pytest.raises(TypeError):
            producer.produce(None, b"x")
        assert len(producer) == 0


@pytest.mark.parametrize("conf, name", [
    ({"no.such.property": 1}, "no.such.property"),
    ({"linger.ms": "soon"}, "queue.buffering.max.ms"),  # librdkafka names an alias by its canonical name
    ({"acks": "several"}, "acks"),
    ({"compression.type": "rar"}, "compression.codec"),
    ({"batch.num.messages": -5}, "batch.num.messages"),
])
def test_unknown_or_invalid_config_raises_kafka_exception_naming_the_property(conf, name):
    started = time.monotonic()
    with pytest.raises(KafkaException) as info:
        Producer({"bootstrap.servers": "127.0.0.1:1", **conf})
    assert name in str(info.value)
    assert info.value.args[0].code() == KafkaError._INVALID_ARG
    assert time.monotonic() - started < 5


def test_oversized_message_gets_msg_size_too_large(mock_cluster, unique_topic):
    with Producer({"bootstrap.servers": mock_cluster.bootstrap, "message.max.bytes": 10_000, **FAST}) as producer:
        with pytest.raises(KafkaException) as info:
            producer.produce(unique_topic, b"x" * 20_000)
        assert info.value.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
        assert len(producer) == 0


@pytest.mark.parametrize("error", ["MSG_SIZE_TOO_LARGE", "TOPIC_AUTHORIZATION_FAILED"])
def test_non_retriable_broker_error_is_reported_and_nothing_is_stuck(mock_cluster_factory, unique_topic, error):
    cluster = mock_cluster_factory(num_brokers=1)
    cluster.create_topic(unique_topic, partition_cnt=1)
    reports = Reports()
    with Producer({"bootstrap.servers": cluster.bootstrap, "on_delivery": reports, **FAST}) as producer:
        producer.produce(unique_topic, b"warm-up")
        assert producer.flush(15) == 0
        cluster.push_request_errors(PRODUCE, [error])
        cluster.start_request_tracking()
        producer.produce(unique_topic, b"rejected")
        assert producer.flush(15) == 0
        produce_requests = [r for r in cluster.get_requests() if r.api_key == PRODUCE]
        assert len(produce_requests) == 1, "a non-retriable error must not be retried"
        producer.produce(unique_topic, b"after")
        assert producer.flush(15) == 0
    code = KafkaError.MSG_SIZE_TOO_LARGE if error == "MSG_SIZE_TOO_LARGE" else KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert [(c, v) for c, (_, v) in zip(reports.codes(), reports.items, strict=True)] == \
        [(0, b"warm-up"), (code, b"rejected"), (0, b"after")]


def test_unknown_topic_is_reported_without_hanging(mock_cluster_factory, unique_topic):
    cluster = mock_cluster_factory(num_brokers=1)
    cluster.topic_set_error(unique_topic, "UNKNOWN_TOPIC_OR_PART")
    reports = Reports()
    partitions: list[int] = []
    # as librdkafka, a topic reported missing fails its messages only once topic.metadata.propagation.max.ms
    # (default 30 s) has passed since it was first produced to (else message.timeout.ms comes first)
    with Producer({"bootstrap.servers": cluster.bootstrap, "on_delivery": reports, "socket.timeout.ms": 2000,
                   "topic.metadata.propagation.max.ms": 1000, **FAST}) as producer:
        started = time.monotonic()
        for i in range(5):
            producer.produce(unique_topic, b"%d" % i)
        producer.produce(unique_topic, b"explicit", partition=2,
                         on_delivery=lambda err, msg: partitions.append(msg.partition()))
        assert producer.flush(15) == 0
        assert time.monotonic() - started < 15
    assert len(reports.items) == 5
    assert set(reports.codes()) <= {KafkaError._UNKNOWN_TOPIC, KafkaError.UNKNOWN_TOPIC_OR_PART}
    assert partitions == [2]  # the partition asked for
    assert reports.partitions == [None] * 5  # never partitioned: librdkafka's unassigned partition (-1),
    # which confluent-kafka's Message.partition() reads as None


def test_first_produce_to_a_new_topic_does_not_wait_for_metadata(mock_cluster_factory, unique_topic):
    """As librdkafka's UA partition: messages wait in the producer while the topic's metadata is fetched
    (here slowed by a 1.5 s broker round trip), then go out in produce order; produce() never blocks."""
    cluster = mock_cluster_factory(num_brokers=1)
    reports = Reports()
    with Producer({"bootstrap.servers": cluster.bootstrap, "on_delivery": reports, **FAST}) as producer:
        assert producer.list_topics(timeout=10)  # connected, before the topic exists
        cluster.create_topic(unique_topic, partition_cnt=3)
        cluster.broker_set_rtt(1, 1500)
        started = time.monotonic()
        for i in range(200):
            producer.produce(unique_topic, b"%d" % i, key=b"k%d" % (i % 4))
        producing_took = time.monotonic() - started
        assert len(producer) == 200  # held messages count as queued
        assert producer.flush(30) == 0
    assert producing_took < 1.0, f"produce() blocked for {producing_took:.2f} s"
    assert reports.codes() == [0] * 200
    by_key: dict[bytes, list[int]] = {}
    for _err, value in reports.items:
        by_key.setdefault(b"k%d" % (int(value) % 4), []).append(int(value))
    assert len(by_key) == 4 and all(values == sorted(values) for values in by_key.values())  # per key: in order


def test_held_messages_count_against_the_queue_limit_and_purge(mock_cluster_factory, unique_topic):
    cluster = mock_cluster_factory(num_brokers=1)
    reports = Reports()
    with Producer({"bootstrap.servers": cluster.bootstrap, "on_delivery": reports,
                   "queue.buffering.max.messages": 3, **FAST}) as producer:
        assert producer.list_topics(timeout=10)
        cluster.create_topic(unique_topic, partition_cnt=1)
        cluster.broker_set_rtt(1, 3000)
        for i in range(3):
            producer.produce(unique_topic, b"%d" % i)
        with pytest.raises(BufferError):
            producer.produce(unique_topic, b"too many")
        producer.purge(in_queue=True, in_flight=False)
        assert producer.poll(5) == 3
        cluster.broker_set_rtt(1, 0)
    assert reports.codes() == [KafkaError._PURGE_QUEUE] * 3
    assert [value for _, value in reports.items] == [b"0", b"1", b"2"]


def _own_children() -> set[int]:
    return {child.pid for child in psutil.Process().children(recursive=True)}


def _connections() -> int:
    return len(psutil.Process().net_connections(kind="all"))


def test_close_leaves_no_process_socket_or_ipc_file(mock_cluster, unique_topic):
    before_children = _own_children()
    before_connections = _connections()
    reports = Reports()
    producer = Producer({"bootstrap.servers": mock_cluster.bootstrap, "on_delivery": reports, **FAST,
                         "kqactors.hosts": 2})
    run_dir = producer._rt.run_dir
    for i in range(1000):
        producer.produce(unique_topic, b"%d" % i)
    hosts = _own_children() - before_children
    assert run_dir is None or os.path.isdir(run_dir)
    assert len(hosts) >= 3, "main host plus two toppar hosts"
    producer.close()
    assert len(reports.items) == 1000, "every message gets exactly one report"
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and (_own_children() - before_children):
        time.sleep(0.05)
    assert not (_own_children() - before_children), "host processes left after close()"
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in hosts)
    assert _connections() <= before_connections, "sockets left open after close()"
    assert run_dir is None or not os.path.exists(run_dir), f"ipc directory {run_dir} left after close()"
    producer.close()  # a second close is a no-op
    with pytest.raises(RuntimeError):
        producer.produce(unique_topic, b"late")


def test_explicit_partitions_of_a_new_topic_wait_too(mock_cluster_factory, unique_topic):
    """An explicit partition also waits for the topic's metadata; one beyond the partition count then fails
    in its delivery report (_UNKNOWN_PARTITION), the others are delivered in order."""
    cluster = mock_cluster_factory(num_brokers=1)
    reports = Reports()
    with Producer({"bootstrap.servers": cluster.bootstrap, "on_delivery": reports, **FAST}) as producer:
        assert producer.list_topics(timeout=10)
        cluster.create_topic(unique_topic, partition_cnt=2)
        cluster.broker_set_rtt(1, 1000)
        started = time.monotonic()
        for i in range(6):
            producer.produce(unique_topic, b"%d" % i, partition=(1, 5)[i % 2])
        assert time.monotonic() - started < 0.8
        assert producer.flush(30) == 0
    assert [v for e, v in reports.items if e is None] == [b"0", b"2", b"4"]
    assert sorted(err.code() for err, _ in reports.items if err is not None) == [KafkaError._UNKNOWN_PARTITION] * 3


def test_close_while_a_new_topic_is_being_looked_up(mock_cluster_factory, unique_topic):
    """close() does not wait out a slow metadata lookup: the held message gets its one report."""
    cluster = mock_cluster_factory(num_brokers=1)
    reports = Reports()
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "on_delivery": reports, **FAST})
    assert producer.list_topics(timeout=10)
    cluster.create_topic(unique_topic, partition_cnt=1)
    cluster.broker_set_rtt(1, 5000)
    producer.produce(unique_topic, b"held")
    started = time.monotonic()
    producer.close(timeout=0.5)
    assert time.monotonic() - started < 8
    assert reports.codes() in ([KafkaError._PURGE_QUEUE], [KafkaError._DESTROY])
