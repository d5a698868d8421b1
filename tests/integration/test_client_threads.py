"""Clients used from many threads at once, as confluent-kafka allows: eight threads producing while another
polls (every message reported once, to its own callback), and several threads polling one consumer (every
message handed out once).

Runs in: the pytest process (the mock cluster and the clients' hosts are child processes).
"""

from __future__ import annotations

import collections
import threading
import time

import pytest
from support.kafka_io import produce_numbered

from kqactors import Consumer, Producer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

THREADS = 8
PER_THREAD = 3000


@pytest.mark.parametrize("path", ["produce", "_produce_py"])
def test_eight_producing_threads_and_a_polling_thread(mock_cluster, unique_topic, path):
    """Through produce() (the C twin when kqactors.native is built) and through its Python reference; every
    tenth message has headers (the C produce() hands those to the reference)."""
    mock_cluster.create_topic(unique_topic, 4)
    producer = Producer({"bootstrap.servers": mock_cluster.bootstrap, "kqactors.hosts": 1, "linger.ms": 5,
                         "queue.buffering.max.messages": 5000})
    produce_one = getattr(producer, path)
    seen: collections.Counter = collections.Counter()
    wrong: list = []
    lock = threading.Lock()

    def callback_for(tag: bytes):
        def delivered(err, msg) -> None:
            if err is not None or msg.value() != tag:
                wrong.append((tag, err, msg.value()))
            with lock:
                seen[tag] += 1
        return delivered

    stop = threading.Event()
    failures: list[BaseException] = []

    def poller() -> None:
        while not stop.is_set():
            producer.poll(0.05)

    def produce(thread: int) -> None:
        try:
            for i in range(PER_THREAD):
                tag = b"%d-%d" % (thread, i)
                key = tag if i % 3 else None  # keyed and sticky-partitioned messages
                headers = [("i", tag)] if i % 10 == 0 else None
                while True:
                    try:
                        produce_one(unique_topic, tag, key=key, on_delivery=callback_for(tag), headers=headers)
                        break
                    except BufferError:
                        time.sleep(0.001)  # the polling thread frees room
                if i % 1000 == 0:
                    producer.poll(0)  # producing threads serve reports too
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            failures.append(exc)

    polling = threading.Thread(target=poller)
    producing = [threading.Thread(target=produce, args=(t,)) for t in range(THREADS)]
    try:
        polling.start()
        for thread in producing:
            thread.start()
        for thread in producing:
            thread.join(60)
        assert producer.flush(30) == 0
    finally:
        stop.set()
        polling.join(10)
        producer.close()
    assert not failures, failures
    assert not wrong, wrong[:5]
    assert len(seen) == THREADS * PER_THREAD and set(seen.values()) == {1}, "each message reported exactly once"


def test_several_threads_polling_one_consumer_get_each_message_once(mock_cluster, unique_topic):
    count, partitions = 8000, 4
    mock_cluster.create_topic(unique_topic, partitions)
    produce_numbered(mock_cluster.bootstrap, unique_topic, count, partitions)
    consumer = Consumer({"bootstrap.servers": mock_cluster.bootstrap, "group.id": unique_topic,
                         "auto.offset.reset": "earliest", "kqactors.hosts": 1})
    got: list[tuple[int, int, bytes]] = []
    errors: list = []
    lock = threading.Lock()

    def worker(index: int) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with lock:
                if len(got) >= count:
                    return
            if index % 2:
                batch = consumer.consume(100, 0.2)
            else:
                msg = consumer.poll(0.2)
                batch = [msg] if msg is not None else []
            for msg in batch:
                if msg.error() is not None:
                    errors.append(msg.error())
                    continue
                with lock:
                    got.append((msg.partition(), msg.offset(), msg.value()))

    try:
        consumer.subscribe([unique_topic])
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(90)
    finally:
        consumer.close()
    assert not errors, errors[:5]
    counted = collections.Counter((p, o) for p, o, _ in got)
    assert len(got) == count and set(counted.values()) == {1}, "each message handed out exactly once"
    by_partition = collections.defaultdict(set)
    for partition, offset, value in got:
        by_partition[partition].add(offset)
        assert value == b"v%d" % (offset * partitions + partition)
    assert {p: sorted(offsets) for p, offsets in by_partition.items()} == \
        {p: list(range(count // partitions)) for p in range(partitions)}
