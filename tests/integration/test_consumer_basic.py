"""Consumer (assign-based fetching) end to end against real brokers: the librdkafka mock cluster and Tansu.

Messages are produced with confluent-kafka so the consumer is checked against an independent producer.
"""

from __future__ import annotations

import time

import pytest
from integration_helpers import make_topic
from support.kafka_io import drain, produce_numbered
from support.terminal import ctrl_c_in_this_process

from kqactors import Consumer
from kqactors.errors import KafkaError, KafkaException
from kqactors.message import OFFSET_BEGINNING, OFFSET_END, TIMESTAMP_CREATE_TIME, TopicPartition

ck = pytest.importorskip("confluent_kafka")
pytestmark = pytest.mark.integration

PARTITIONS = 3


def produce(bootstrap: str, topic: str, count: int, partitions: int = PARTITIONS, start: int = 0, **conf) -> None:
    """This module's messages carry keys and headers, on all PARTITIONS unless told."""
    produce_numbered(bootstrap, topic, count, partitions, start, keys_and_headers=True, **conf)


def consumer(bootstrap: str, **conf) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "kqactors.hosts": 2, **conf})


@pytest.mark.parametrize("hosts", [2, 0], ids=["toppar-hosts", "toppars-on-main"])
def test_consumes_every_message_in_order_with_content_and_eof(cluster, unique_topic, hosts):
    make_topic(cluster, unique_topic, PARTITIONS)
    produce(cluster.bootstrap, unique_topic, 600)
    with consumer(cluster.bootstrap, **{"enable.partition.eof": True, "kqactors.hosts": hosts}) as c:
        c.assign([TopicPartition(unique_topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        assert sorted(c.assignment()) == [TopicPartition(unique_topic, p) for p in range(PARTITIONS)]
        errors: list = []
        msgs = drain(c, 600, errors=errors)
        deadline = time.monotonic() + 10
        while len([e for e in errors if e.code() == KafkaError._PARTITION_EOF]) < PARTITIONS \
                and time.monotonic() < deadline:
            errors.extend(m.error() for m in c.consume(10, 0.2) if m.error())
        assert len(msgs) == 600
        by_partition: dict[int, list[int]] = {}
        for msg in msgs:
            i = int(msg.headers()[0][1])
            assert msg.topic() == unique_topic
            assert msg.partition() == i % PARTITIONS
            assert msg.value() == b"v%d" % i and msg.key() == b"k%d" % i
            assert msg.headers() == [("i", str(i).encode()), ("none", None)]
            assert msg.timestamp()[0] == TIMESTAMP_CREATE_TIME and msg.timestamp()[1] > 0
            by_partition.setdefault(msg.partition(), []).append(msg.offset())
        for offsets in by_partition.values():
            assert offsets == list(range(len(offsets)))
        eofs = [e for e in errors if e.code() == KafkaError._PARTITION_EOF]
        assert len(eofs) == PARTITIONS
        positions = c.position([TopicPartition(unique_topic, p) for p in range(PARTITIONS)])
        assert [tp.offset for tp in positions] == [200, 200, 200]
        assert c.get_watermark_offsets(TopicPartition(unique_topic, 0), cached=True) == (0, 200)


@pytest.mark.parametrize("broker", ["mock", "tansu"])
def test_no_eof_for_a_partition_cut_by_fetch_max_bytes(request, broker, unique_topic):
    """Two partitions fetched from one broker with fetch.max.bytes below one batch: the broker fills the
    first partition of each response and leaves the other's records empty below its high watermark. That
    partition has not reached its end: one EOF per partition, at the end, after every message."""
    cluster = request.getfixturevalue("tansu") if broker == "tansu" else request.getfixturevalue(
        "mock_cluster_factory")(1)
    make_topic(cluster, unique_topic, 2)
    producer = ck.Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 0})
    for i in range(40):
        producer.produce(unique_topic, value=b"%d" % (i % 10) * 1200, partition=i % 2)
        producer.flush(10)  # one batch per message: every answer carries at least 1,200 bytes
    with consumer(cluster.bootstrap, **{"enable.partition.eof": True, "fetch.max.bytes": 1000,
                                        "message.max.bytes": 1000}) as c:
        c.assign([TopicPartition(unique_topic, p, 0) for p in range(2)])
        offsets: dict[int, list[int]] = {0: [], 1: []}
        eofs: dict[int, list[int]] = {0: [], 1: []}
        deadline = time.monotonic() + 20
        while not (eofs[0] and eofs[1]) and time.monotonic() < deadline:
            for msg in c.consume(100, 0.2):
                if msg.error() is None:
                    offsets[msg.partition()].append(msg.offset())
                elif msg.error().code() == KafkaError._PARTITION_EOF:
                    eofs[msg.partition()].append(msg.offset())
                else:
                    raise AssertionError(msg.error())
        for msg in c.consume(100, 0.5):  # a late EOF or message would show up here
            assert msg.error() is not None and msg.error().code() == KafkaError._PARTITION_EOF, msg
            eofs[msg.partition()].append(msg.offset())
        assert offsets == {0: list(range(20)), 1: list(range(20))}
        assert eofs == {0: [20], 1: [20]}


def test_offset_end_sees_only_new_messages(mock_cluster, unique_topic):
    """Mock cluster only: Tansu's ListOffsets(latest) answers the last batch's base offset + 1, not the end
    (confluent-kafka sees the same), so OFFSET_END cannot be checked there."""
    cluster = mock_cluster
    make_topic(cluster, unique_topic, 1)
    produce(cluster.bootstrap, unique_topic, 50, partitions=1)
    with consumer(cluster.bootstrap) as c:
        c.assign([TopicPartition(unique_topic, 0, OFFSET_END)])
        assert c.consume(10, 1.5) == []  # the end is resolved; nothing old is delivered
        produce(cluster.bootstrap, unique_topic, 20, partitions=1, start=50)
        msgs = drain(c, 20, timeout=15)
        assert [m.offset() for m in msgs] == list(range(50, 70))


def test_seek_and_pause_resume_deliver_from_the_right_offset(cluster, unique_topic):
    make_topic(cluster, unique_topic, 1)
    produce(cluster.bootstrap, unique_topic, 300, partitions=1)
    tp = TopicPartition(unique_topic, 0, 0)
    with consumer(cluster.bootstrap) as c:
        c.assign([tp])
        first = drain(c, 100)
        assert [m.offset() for m in first[:100]] == list(range(100))
        c.seek(TopicPartition(unique_topic, 0, 10))
        again = drain(c, 5)
        assert [m.offset() for m in again[:5]] == [10, 11, 12, 13, 14]
        position = c.position([TopicPartition(unique_topic, 0)])[0].offset
        c.pause([TopicPartition(unique_topic, 0)])
        assert c.consume(100, 1.0) == []
        c.resume([TopicPartition(unique_topic, 0)])
        rest = drain(c, 300 - position)
        assert [m.offset() for m in rest] == list(range(position, 300))


@pytest.mark.parametrize("policy", ["earliest", "latest", "error"])
def test_offset_out_of_range_follows_auto_offset_reset(mock_cluster, unique_topic, policy):
    mock_cluster.create_topic(unique_topic, 1)
    produce(mock_cluster.bootstrap, unique_topic, 30, partitions=1)
    with consumer(mock_cluster.bootstrap, **{"auto.offset.reset": policy}) as c:
        c.assign([TopicPartition(unique_topic, 0, 1000)])
        if policy == "earliest":
            assert [m.offset() for m in drain(c, 30, timeout=15)] == list(range(30))
        elif policy == "latest":
            assert drain(c, 1, timeout=2.5) == []
            produce(mock_cluster.bootstrap, unique_topic, 5, partitions=1, start=30)
            assert [m.offset() for m in drain(c, 5, timeout=15)] == list(range(30, 35))
        else:
            errors: list = []
            assert drain(c, 1, timeout=5, errors=errors) == []
            assert errors and errors[0].code() == KafkaError._AUTO_OFFSET_RESET


def test_small_prefetch_still_delivers_everything(cluster, unique_topic):
    """queued.max.messages.kbytes=1 closes fetching after every response: credit must flow back."""
    make_topic(cluster, unique_topic, 2)
    produce(cluster.bootstrap, unique_topic, 2000, partitions=2)
    with consumer(cluster.bootstrap, **{"queued.max.messages.kbytes": 1, "queued.min.messages": 10}) as c:
        c.assign([TopicPartition(unique_topic, p, OFFSET_BEGINNING) for p in range(2)])
        msgs = drain(c, 2000)
        assert len(msgs) == 2000
        assert len({(m.partition(), m.offset()) for m in msgs}) == 2000


def test_incremental_assign_and_unassign(cluster, unique_topic):
    make_topic(cluster, unique_topic, 2)
    produce(cluster.bootstrap, unique_topic, 40, partitions=2)
    with consumer(cluster.bootstrap) as c:
        c.incremental_assign([TopicPartition(unique_topic, 0, OFFSET_BEGINNING)])
        assert {m.partition() for m in drain(c, 20)} == {0}
        c.incremental_assign([TopicPartition(unique_topic, 1, OFFSET_BEGINNING)])
        with pytest.raises(KafkaException):
            c.incremental_assign([TopicPartition(unique_topic, 1, 0)])
        assert {m.partition() for m in drain(c, 20)} == {1}
        c.incremental_unassign([TopicPartition(unique_topic, 0)])
        assert c.assignment() == [TopicPartition(unique_topic, 1)]
        c.unassign()
        assert c.assignment() == []


def test_metadata_watermarks_and_offsets_for_times(mock_cluster, unique_topic):
    mock_cluster.create_topic(unique_topic, 1)
    before = int(time.time() * 1000) - 1000
    produce(mock_cluster.bootstrap, unique_topic, 10, partitions=1)
    with consumer(mock_cluster.bootstrap) as c:
        meta = c.list_topics(unique_topic, timeout=10)
        assert list(meta.topics[unique_topic].partitions) == [0]
        assert c.get_watermark_offsets(TopicPartition(unique_topic, 0), timeout=10) == (0, 10)
        # the mock cluster answers -1 for every timestamp look-up (confluent-kafka sees the same)
        assert c.offsets_for_times([TopicPartition(unique_topic, 0, before)], timeout=10)[0].error is None


def test_watermarks_follow_a_moved_leader(mock_cluster_factory, unique_topic):
    """Leaders are cached between look-ups; NOT_LEADER from the old one fetches fresh metadata."""
    cluster = mock_cluster_factory(2)
    cluster.create_topic(unique_topic, 1)
    cluster.partition_set_leader(unique_topic, 0, 1)
    produce(cluster.bootstrap, unique_topic, 4, partitions=1)
    with consumer(cluster.bootstrap) as c:
        assert c.get_watermark_offsets(TopicPartition(unique_topic, 0), timeout=10) == (0, 4)
        cluster.partition_set_leader(unique_topic, 0, 2)
        produce(cluster.bootstrap, unique_topic, 3, partitions=1, start=4)
        assert c.get_watermark_offsets(TopicPartition(unique_topic, 0), timeout=10) == (0, 7)


def test_watermark_pair_waits_once_behind_a_held_fetch(mock_cluster, unique_topic):
    """The leader's connection also carries the partition's Fetch, which the broker holds for
    fetch.wait.max.ms when there is nothing new. Right after a message arrives the next Fetch has just gone
    out, so a look-up waits about one fetch.wait.max.ms: both ListOffsets go out at once (one after the
    other they waited two) and the leader comes from cached metadata."""
    wait_s = 2.0
    mock_cluster.create_topic(unique_topic, 1)
    produce(mock_cluster.bootstrap, unique_topic, 2, partitions=1)
    with consumer(mock_cluster.bootstrap, **{"fetch.wait.max.ms": int(wait_s * 1000)}) as c:
        assert c.get_watermark_offsets(TopicPartition(unique_topic, 0), timeout=10) == (0, 2)  # caches the leader
        c.assign([TopicPartition(unique_topic, 0, OFFSET_BEGINNING)])
        assert len(drain(c, 2)) == 2
        produce(mock_cluster.bootstrap, unique_topic, 1, partitions=1, start=2)
        assert len(drain(c, 1)) == 1  # its Fetch was answered: the next one is held from now on
        started = time.monotonic()
        assert c.get_watermark_offsets(TopicPartition(unique_topic, 0), timeout=20) == (0, 3)
        took = time.monotonic() - started
    assert took < 1.5 * wait_s, f"get_watermark_offsets took {took:.1f} s behind a {wait_s} s fetch wait"


def test_offsets_for_times(tansu, unique_topic):
    make_topic(tansu, unique_topic, 1)
    produce(tansu.bootstrap, unique_topic, 5, partitions=1)
    time.sleep(0.05)
    middle = int(time.time() * 1000)
    time.sleep(0.05)
    produce(tansu.bootstrap, unique_topic, 5, partitions=1, start=5)
    with consumer(tansu.bootstrap) as c:
        found = c.offsets_for_times([TopicPartition(unique_topic, 0, middle)], timeout=10)
        assert found[0].offset == 5 and found[0].error is None
        found = c.offsets_for_times([TopicPartition(unique_topic, 0, 0)], timeout=10)
        assert found[0].offset == 0


def test_unknown_topic_is_reported_not_hung(cluster, unique_topic):
    with consumer(cluster.bootstrap) as c:
        c.assign([TopicPartition(unique_topic + "-missing", 0, OFFSET_BEGINNING)])
        errors: list = []
        deadline = time.monotonic() + 15
        while not errors and time.monotonic() < deadline:
            errors.extend(m.error() for m in c.consume(10, 0.5) if m.error())
        assert errors and errors[0].code() in (KafkaError._UNKNOWN_TOPIC, KafkaError.UNKNOWN_TOPIC_OR_PART)


def test_bad_input_and_closed_consumer(mock_cluster, unique_topic):
    c = consumer(mock_cluster.bootstrap)
    with pytest.raises(TypeError):
        c.assign(TopicPartition(unique_topic, 0))
    with pytest.raises(KafkaException):
        c.assign([TopicPartition(unique_topic, 0, -77)])
    with pytest.raises(KafkaException):
        c.seek(TopicPartition(unique_topic, 0, 5))  # not assigned
    with pytest.raises(ValueError):
        c.consume(0)
    with pytest.raises(TypeError):
        c.poll("1")
    c.close()
    c.close()
    for call in (lambda: c.poll(0), lambda: c.consume(1, 0), lambda: c.assign([]), lambda: c.assignment(),
                 lambda: c.list_topics(), lambda: c.position([])):
        with pytest.raises(RuntimeError):
            call()


def test_ctrl_c_interrupts_a_long_poll(mock_cluster, unique_topic):
    import signal
    import threading

    mock_cluster.create_topic(unique_topic, 1)
    with consumer(mock_cluster.bootstrap) as c:
        c.assign([TopicPartition(unique_topic, 0, OFFSET_END)])
        main_thread = threading.get_ident()
        timer = threading.Timer(0.5, lambda: signal.pthread_kill(main_thread, signal.SIGINT))
        started = time.monotonic()
        with ctrl_c_in_this_process(), pytest.raises(KeyboardInterrupt):
            timer.start()
            c.poll(30)
        assert time.monotonic() - started < 3
        assert c.consume(1, 0.1) == []  # still usable afterwards


def test_error_cb_reports_unreachable_brokers():
    import socket

    with socket.socket() as sock:  # a loopback port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    seen: list = []
    with Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "kqactors.hosts": 1, "error_cb": seen.append}) as c:
        deadline = time.monotonic() + 10
        while not seen and time.monotonic() < deadline:
            assert c.poll(0.2) is None
    assert seen and seen[0].code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT)
