"""Adaptive placement of a consumer (kqactors.hosts=-1, the default) on the librdkafka mock cluster, with a
simulated 4-core machine (KQACTORS_CPU_COUNT=4).

Runs in: the pytest process (the consumer's hosts and the mock cluster are child processes). A consumer starts with
its ctoppars (fetch decode) on its main host; as the records it consumes pass kqactors.placement.scale.rate per host,
toppar hosts join and the ctoppars move there, each resuming at the next offset not yet queued for the app. The
app gets every record exactly once, in order per partition, through the moves (assign() and subscribe()). When the
rate drops for kqactors.placement.retire.ms, the hosts retire: the ctoppars move back and the processes exit.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from support.waiting import wait_until  # noqa: E402

from kqactors import Consumer  # noqa: E402
from kqactors.client.consumer import consumer as consumer_module  # noqa: E402
from kqactors.client.consumer.consumer import CTOPPAR_FACTORY  # noqa: E402
from kqactors.message import OFFSET_BEGINNING, TopicPartition  # noqa: E402
from kqactors.ops.consumer import FETCH_START, ctoppar_name  # noqa: E402

pytestmark = [pytest.mark.timeout(120)]

PARTITIONS = 4
BACKLOG = 20_000  # records per partition the producing thread stays ahead of the consumer by, at most


class _Feed:
    """Produces numbered records ("<partition>:<seq>") with confluent-kafka and checks what the consumer gets."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                                                  "enable.idempotence": True})
        self.sent = [0] * PARTITIONS
        self.got = [0] * PARTITIONS
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Produce in a thread while the test consumes: records keep coming, so some are always fetched and queued
        (not yet taken) when a ctoppar moves."""
        def run() -> None:
            while not self._stop.is_set():
                if self.sent[0] - self.got[0] < BACKLOG:
                    self.produce(1_000, flush=False)
                else:
                    self._stop.wait(0.01)
        self._thread = threading.Thread(target=run, name="feed", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        assert self.producer.flush(30) == 0

    def produce(self, per_partition: int, flush: bool = True) -> None:
        for partition in range(PARTITIONS):
            for _ in range(per_partition):
                value = b"%d:%d:" % (partition, self.sent[partition]) + b"." * 30
                while True:
                    try:
                        self.producer.produce(self.topic, value, partition=partition)
                        break
                    except BufferError:
                        self.producer.poll(0.05)
                self.sent[partition] += 1
        self.producer.poll(0)
        if flush:
            assert self.producer.flush(30) == 0

    def take(self, consumer: Consumer, timeout: float = 0.2, count: int = 2_000) -> int:
        """Consume what comes within ``timeout``; every record must be the next one of its partition."""
        messages = consumer.consume(count, timeout)
        for msg in messages:
            assert msg.error() is None, msg.error()
            partition, seq, _ = msg.value().split(b":", 2)
            assert int(partition) == msg.partition()
            assert int(seq) == self.got[msg.partition()], (
                f"partition {msg.partition()}: got record {int(seq)}, expected {self.got[msg.partition()]}")
            self.got[msg.partition()] += 1
        return len(messages)

    def caught_up(self) -> bool:
        return self.got == self.sent


def _hosts_of(consumer: Consumer, topic: str) -> set[str | None]:
    return {consumer._rt.host_of(ctoppar_name(topic, p)) for p in range(PARTITIONS)}


@pytest.mark.parametrize("mode", ["assign", "subscribe"])
def test_consumer_decode_follows_the_rate_and_every_record_comes_once_in_order(mock_cluster_factory, unique_topic,
                                                                                monkeypatch, mode):
    monkeypatch.setenv("KQACTORS_CPU_COUNT", "4")
    cluster = mock_cluster_factory(1)
    cluster.group_initial_rebalance_delay_ms(0)
    cluster.create_topic(unique_topic, PARTITIONS)
    feed = _Feed(cluster.bootstrap, unique_topic)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{unique_topic}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "kqactors.placement.scale.rate": 2_000, "kqactors.placement.retire.ms": 1_500})
    rt = consumer._rt
    try:
        if mode == "assign":
            consumer.assign([TopicPartition(unique_topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        else:
            consumer.subscribe([unique_topic])
        # Flat out: toppar hosts join and the ctoppars move while records are queued and in flight, until two
        # toppar hosts run ctoppars.
        feed.start()
        try:
            deadline = time.monotonic() + 60
            while len(_hosts_of(consumer, unique_topic) - {"h0"}) < 2 and time.monotonic() < deadline:
                feed.take(consumer, count=100)  # small takes: fetched records wait in the queue while ctoppars move
        finally:
            feed.stop()
        wait_until(feed.caught_up, 30, "the records produced so far", sleep=lambda s: feed.take(consumer, 0.1))
        assert len(_hosts_of(consumer, unique_topic) - {"h0"}) >= 2, _hosts_of(consumer, unique_topic)
        assert consumer.moves_done >= PARTITIONS
        if mode == "assign":
            # Nothing more to fetch: the hosts retire one by one, the ctoppars move back, the processes exit.
            pids = [rt.host_pid(key) for key in rt.host_keys[1:]]
            pids = [pid for pid in pids if pid is not None]
            wait_until(lambda: _hosts_of(consumer, unique_topic) == {"h0"}, 60,
                       "every ctoppar back on the main host", sleep=lambda s: feed.take(consumer, 0.05))
            wait_until(lambda: not any(os.path.exists(f"/proc/{pid}") for pid in pids), 30,
                       "the retired toppar hosts' processes to exit", sleep=lambda s: feed.take(consumer, 0.05))
        feed.produce(500)  # still fetched, from wherever the ctoppars are now, right after the last one
        wait_until(feed.caught_up, 30, "the last records", sleep=lambda s: feed.take(consumer, 0.1))
        assert feed.take(consumer, 0.3) == 0, "a record came twice"
    finally:
        consumer.close()


def _move_all(consumer: Consumer, topic: str, index: int) -> None:
    """Move every ctoppar of ``topic`` to host ``index`` as adaptive placement does; the app's thread does not wait
    for the host: each moved ctoppar's ops (its FETCH_START first) are held until it says C_READY."""
    key = consumer._rt.host_keys[index]
    for p in range(PARTITIONS):
        consumer._move_toppar(topic, p, consumer._toppars[(topic, p)], index, force=True)
    for p in range(PARTITIONS):
        toppar = consumer._toppars[(topic, p)]
        assert toppar.host == key and toppar.held and toppar.held[0].type == FETCH_START, toppar.held


def _reading_consumer(mock_cluster_factory, topic: str, records: int) -> tuple[_Feed, Consumer]:
    """A fresh one-broker cluster with ``records`` fed, and a consumer (no adaptive joins of its own) assigned to
    every partition from the beginning, that has read a record of each: its ctoppars run."""
    cluster = mock_cluster_factory(1)
    cluster.create_topic(topic, PARTITIONS)
    feed = _Feed(cluster.bootstrap, topic)
    feed.produce(records)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{topic}",
                         "enable.auto.commit": False, "kqactors.placement.scale.rate": 2_000_000_000})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        wait_until(lambda: min(feed.got) > 0, 30, "a record of every partition",
                   sleep=lambda s: feed.take(consumer, 0.1, count=50))
    except BaseException:
        consumer.close()
        raise
    return feed, consumer


def test_moves_hold_the_ctoppars_ops_until_they_run_and_every_record_comes_once(mock_cluster_factory, unique_topic,
                                                                                monkeypatch):
    """Moved to a toppar host launched a moment before (not even running Python yet), and back to main's host
    (whose directory still names the host they left: an op that overtook the SPAWN would be routed there):
    each time the records fetched but not consumed stay queued, the moved ctoppars fetch from the next record
    not yet queued once they run, and every record comes once, in order."""
    monkeypatch.setenv("KQACTORS_CPU_COUNT", "4")
    feed, consumer = _reading_consumer(mock_cluster_factory, unique_topic, 2_000)
    try:
        index = consumer._handle.add_toppar_host([CTOPPAR_FACTORY])
        key = consumer._rt.host_keys[index]
        _move_all(consumer, unique_topic, index)
        assert consumer.moves_done == PARTITIONS
        wait_until(lambda: not consumer._moving, 60, "the moved ctoppars to run",
                   sleep=lambda s: feed.take(consumer, count=50))
        assert _hosts_of(consumer, unique_topic) == {key}
        feed.produce(1_000)  # fetched by the moved ctoppars
        wait_until(lambda: min(g - s for g, s in zip(feed.got, feed.sent, strict=True)) > -800, 30,
                   "records fetched on the new host", sleep=lambda s: feed.take(consumer, 0.1, count=50))
        _move_all(consumer, unique_topic, 0)  # back, while records are queued
        wait_until(lambda: not consumer._moving, 60, "the ctoppars back on the main host",
                   sleep=lambda s: feed.take(consumer, count=50))
        assert _hosts_of(consumer, unique_topic) == {"h0"}
        feed.produce(500)  # fetched from the main host again, right after the last one
        wait_until(feed.caught_up, 60, "every record", sleep=lambda s: feed.take(consumer))
        assert feed.take(consumer, 0.3) == 0, "a record came twice"
    finally:
        consumer.close()


def test_a_moved_ctoppar_that_never_runs_is_started_on_the_main_host(mock_cluster_factory, unique_topic, monkeypatch):
    """A move whose SPAWN fails on the new host (no answer is waited for, so nothing raises) leaves the ctoppar's
    ops held; once ``_MOVE_WAIT_S`` passes without its C_READY it is started on main's host, waiting for the
    answer there, and fetching goes on from the next record not yet queued."""
    monkeypatch.setenv("KQACTORS_CPU_COUNT", "4")
    monkeypatch.setattr(consumer_module, "_MOVE_WAIT_S", 1.0)
    feed, consumer = _reading_consumer(mock_cluster_factory, unique_topic, 1_000)
    try:
        index = consumer._handle.add_toppar_host([CTOPPAR_FACTORY])
        good = consumer._toppar_args
        consumer._toppar_args = {**good, "partition": "not a partition"}  # the actor's constructor fails there
        toppar = consumer._toppars[(unique_topic, 0)]
        consumer._move_toppar(unique_topic, 0, toppar, index)
        consumer._toppar_args = good
        assert toppar.held, "the move waited for the host"
        feed.produce(500)
        wait_until(feed.caught_up, 60, "every record, partition 0's after its fallback to the main host",
                   sleep=lambda s: feed.take(consumer))
        assert toppar.held is None and consumer._rt.host_of(toppar.name) == "h0"
        assert feed.take(consumer, 0.3) == 0, "a record came twice"
    finally:
        consumer.close()
