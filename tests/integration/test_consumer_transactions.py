"""Transactional topics end to end: a confluent-kafka transactional producer writes committed and aborted
transactions (and plain messages) on several partitions; a kqactors Consumer reads them under both isolation
levels, and a confluent-kafka consumer reads the same topic as the reference.

What the two test brokers do with transactions (probed with raw Fetch requests and with confluent-kafka as
both producer and read_committed consumer; also noted in kqactors/testing/tansu.py and mock_cluster.py):

- Both write real COMMIT and ABORT control batches (transactional + control attributes, one record each)
  after the transaction's data, so control records and the offsets they take are exercised on both.
- Neither lists aborted transactions in Fetch responses (``aborted_transactions`` is always empty, under
  read_committed too), so no client can tell aborted data apart: confluent-kafka's read_committed consumer
  delivers the aborted messages on both brokers. The tests therefore compare kqactors with confluent-kafka
  on the same topic instead of expecting aborted data to be hidden; hiding it from a broker's
  aborted-transaction list is covered by the SliceDecoder unit tests.
- Tansu keeps the last stable offset: while a transaction is open, Fetch under read_committed reports
  LSO = the open transaction's first offset and returns nothing at or beyond it. The mock cluster reports
  LSO = high watermark and returns open transactions' data to read_committed fetches, so the open-transaction
  test runs on Tansu only. A read_committed consumer that catches up with a transaction still open on the
  mock (data flushed, EndTxn not yet handled; a slow or loaded producer widens that window) therefore gets
  partition EOF at the offset the marker is about to take, e.g. 3 and 6 for this SCRIPT; librdkafka too.
- The mock cluster answers one record batch per partition per Fetch and stores control batches with a CRC
  of 0 (never computed).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from typing import NamedTuple

import pytest
from integration_helpers import make_topic

from kqactors import Consumer
from kqactors.errors import KafkaError
from kqactors.message import OFFSET_BEGINNING, TopicPartition

ck = pytest.importorskip("confluent_kafka")
pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

PARTITIONS = 3
COMMIT, ABORT, PLAIN, OPEN = "commit", "abort", "plain", "open"

# (kind, messages per partition) in production order; ends with an aborted transaction so that every
# partition's log ends with aborted data and an ABORT marker.
SCRIPT = [(COMMIT, 3), (ABORT, 2), (PLAIN, 2), (COMMIT, 1), (ABORT, 3), (PLAIN, 1), (COMMIT, 2), (ABORT, 2)]


class Produced(NamedTuple):
    partition: int
    offset: int
    value: bytes
    kind: str


class TxnWriter:
    """A transactional and a plain confluent-kafka producer on one topic; remembers every message's offset
    (from its delivery report) and kind."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.produced: list[Produced] = []
        self.txn = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic}",
                                "linger.ms": 1})
        self.txn.init_transactions(15)
        self.plain = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
        self._count = 0

    def send_plain(self, partitions: Iterable[int], per_partition: int) -> None:
        self._send(self.plain, PLAIN, partitions, per_partition)

    def _send(self, producer, kind: str, partitions: Iterable[int], per_partition: int) -> None:
        def on_delivery(err, msg) -> None:
            assert err is None, err
            self.produced.append(Produced(msg.partition(), msg.offset(), msg.value(), kind))

        for i in range(per_partition):
            for partition in partitions:
                self._count += 1
                label = b"plain" if kind == PLAIN else b"txn"
                producer.produce(self.topic, value=b"%s-%d-p%d-%d" % (label, self._count, partition, i),
                                 partition=partition, on_delivery=on_delivery)
        # Flushed before commit or abort: an abort would otherwise purge what is still queued, and the
        # aborted data must really be in the log.
        assert producer.flush(15) == 0

    def begin(self, partitions: Iterable[int], per_partition: int) -> None:
        self.txn.begin_transaction()
        self._send(self.txn, OPEN, partitions, per_partition)

    def end(self, commit: bool) -> None:
        kind = COMMIT if commit else ABORT
        self.produced = [p._replace(kind=kind) if p.kind == OPEN else p for p in self.produced]
        if commit:
            self.txn.commit_transaction(15)
        else:
            self.txn.abort_transaction(15)

    def run(self, script: Iterable[tuple[str, int]], partitions: Iterable[int]) -> None:
        partitions = list(partitions)
        for kind, per_partition in script:
            if kind == PLAIN:
                self.send_plain(partitions, per_partition)
            else:
                self.begin(partitions, per_partition)
                self.end(kind == COMMIT)

    def by_partition(self, kinds: Iterable[str]) -> dict[int, list[tuple[int, bytes]]]:
        kinds = set(kinds)
        out: dict[int, list[tuple[int, bytes]]] = {}
        for p in sorted(self.produced, key=lambda p: (p.partition, p.offset)):
            if p.kind in kinds:
                out.setdefault(p.partition, []).append((p.offset, p.value))
        return out


def kq_consumer(bootstrap: str, isolation: str, **conf) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "isolation.level": isolation, "enable.partition.eof": True,
                     "kqactors.hosts": 1, **conf})


def ck_consumer(bootstrap: str, isolation: str):
    return ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"ref-{uuid.uuid4().hex[:8]}",
                        "isolation.level": isolation, "enable.partition.eof": True,
                        "enable.auto.commit": False})


class Read(NamedTuple):
    messages: dict[int, list[tuple[int, bytes]]]
    eofs: dict[int, list[int]]


def read_until_eof(consumer, partitions: Iterable[int], timeout: float = 20.0,
                   min_eof: dict[int, int] | None = None) -> Read:
    """Messages per partition (offset, value) and partition-EOF offsets, until every partition reported an
    EOF (at or beyond ``min_eof[partition]`` when given). Works for both clients (same Message API)."""
    messages: dict[int, list[tuple[int, bytes]]] = {}
    eofs: dict[int, list[int]] = {}
    wanted = set(partitions)
    min_eof = min_eof or {}
    deadline = time.monotonic() + timeout

    def done() -> bool:
        return all(eofs.get(p) and eofs[p][-1] >= min_eof.get(p, 0) for p in wanted)

    while not done() and time.monotonic() < deadline:
        for msg in consumer.consume(500, 0.2):
            error = msg.error()
            if error is None:
                messages.setdefault(msg.partition(), []).append((msg.offset(), msg.value()))
            elif error.code() == KafkaError._PARTITION_EOF:
                eofs.setdefault(msg.partition(), []).append(msg.offset())
            else:
                raise AssertionError(f"unexpected consumer error: {error}")
    assert done(), f"no partition EOF on every partition in {timeout}s: {eofs}"
    return Read(messages, eofs)


def high_watermarks(bootstrap: str, topic: str, partitions: Iterable[int]) -> dict[int, int]:
    """Log end offsets by ListOffsets, asked while no transaction is open (Tansu answers 0 to read_committed
    ListOffsets(latest) while one is, and the last batch's base offset + 1 for the end: exact here because the
    logs measured end with a one-record marker batch)."""
    probe = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "hwm-probe"})
    try:
        return {p: probe.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=10)[1] for p in partitions}
    finally:
        probe.close()


def assert_markers_in_log(writer: TxnWriter, high: dict[int, int], transactions: int) -> None:
    """Precondition: the broker wrote one control record per transaction and partition (the offsets no
    produced message took), else these tests would not exercise control records at all."""
    for partition, end in high.items():
        data = {p.offset for p in writer.produced if p.partition == partition}
        assert len(set(range(end)) - data) == transactions, (partition, end, sorted(data))


def positions(consumer, topic: str, partitions: Iterable[int]) -> dict[int, int]:
    return {tp.partition: tp.offset for tp in consumer.position([TopicPartition(topic, p) for p in partitions])}


# ---- tests ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_isolation_levels_match_confluent_and_skip_control_records(cluster, unique_topic, isolation):
    make_topic(cluster, unique_topic, PARTITIONS)
    writer = TxnWriter(cluster.bootstrap, unique_topic)
    writer.run(SCRIPT, range(PARTITIONS))
    high = high_watermarks(cluster.bootstrap, unique_topic, range(PARTITIONS))
    assert_markers_in_log(writer, high, sum(1 for kind, _ in SCRIPT if kind != PLAIN))

    with kq_consumer(cluster.bootstrap, isolation) as c:
        c.assign([TopicPartition(unique_topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        got = read_until_eof(c, range(PARTITIONS))
        kq_positions = positions(c, unique_topic, range(PARTITIONS))
    reference = ck_consumer(cluster.bootstrap, isolation)
    try:
        reference.assign([ck.TopicPartition(unique_topic, p, ck.OFFSET_BEGINNING) for p in range(PARTITIONS)])
        expected = read_until_eof(reference, range(PARTITIONS))
        ck_positions = {tp.partition: tp.offset for tp in
                        reference.position([ck.TopicPartition(unique_topic, p) for p in range(PARTITIONS)])}
    finally:
        reference.close()

    # Interop: exactly what librdkafka delivers, in the same order, with the same offsets.
    assert got.messages == expected.messages
    # Every committed and plain message, in offset order; every delivered message is a produced one (so no
    # control record got through: the markers took the offsets no produced message has).
    visible = writer.by_partition([COMMIT, PLAIN])
    produced = writer.by_partition([COMMIT, PLAIN, ABORT])
    for partition in range(PARTITIONS):
        delivered = got.messages[partition]
        assert [o for o, _ in delivered] == sorted(o for o, _ in delivered)
        assert set(delivered) <= set(produced[partition])
        assert set(visible[partition]) <= set(delivered)
        if isolation == "read_uncommitted":
            assert delivered == produced[partition]  # aborted data included
    # The position and the EOF are past the trailing aborted data and ABORT marker: the log end.
    assert kq_positions == ck_positions == high
    assert {p: e[0] for p, e in got.eofs.items()} == high


def test_open_transaction_is_held_back_until_commit(tansu, unique_topic):
    """Tansu only (the mock cluster has no last stable offset): read_committed stops at the open transaction,
    read_uncommitted does not, and the held-back messages arrive once it commits; librdkafka agrees."""
    make_topic(tansu, unique_topic, 2)
    writer = TxnWriter(tansu.bootstrap, unique_topic)
    writer.run([(COMMIT, 2), (PLAIN, 1), (COMMIT, 1)], range(2))
    stable = high_watermarks(tansu.bootstrap, unique_topic, range(2))
    writer.begin(range(2), 3)
    writer.send_plain([0], 2)  # plain messages after the open transaction's data
    log_end = {p: max(m.offset for m in writer.produced if m.partition == p) + 1 for p in range(2)}
    assignment = [TopicPartition(unique_topic, p, OFFSET_BEGINNING) for p in range(2)]

    committed = kq_consumer(tansu.bootstrap, "read_committed")
    reference = ck_consumer(tansu.bootstrap, "read_committed")
    try:
        committed.assign(assignment)
        reference.assign([ck.TopicPartition(unique_topic, p, ck.OFFSET_BEGINNING) for p in range(2)])
        before = read_until_eof(committed, range(2))
        visible = writer.by_partition([COMMIT, PLAIN])
        assert before.messages == {p: [m for m in msgs if m[0] < stable[p]] for p, msgs in visible.items()}
        assert {p: e[0] for p, e in before.eofs.items()} == stable  # EOF at the LSO, past the last marker
        assert positions(committed, unique_topic, range(2)) == stable
        assert committed.consume(100, 1.0) == []  # nothing beyond the LSO while the transaction is open
        reference_before = read_until_eof(reference, range(2))
        assert reference_before == before

        with kq_consumer(tansu.bootstrap, "read_uncommitted") as uncommitted:
            uncommitted.assign(assignment)
            everything = read_until_eof(uncommitted, range(2), min_eof=log_end)
        assert everything.messages == writer.by_partition([COMMIT, PLAIN, OPEN])
        assert {p: e[0] for p, e in everything.eofs.items()} == log_end  # read_uncommitted ends at the HWM

        writer.end(commit=True)
        high = high_watermarks(tansu.bootstrap, unique_topic, range(2))
        after = read_until_eof(committed, range(2), min_eof=high)
        held_back = {p: [m for m in msgs if m[0] >= stable[p]]
                     for p, msgs in writer.by_partition([COMMIT, PLAIN]).items()}
        assert after.messages == held_back and all(held_back.values())
        assert positions(committed, unique_topic, range(2)) == high
        assert read_until_eof(reference, range(2), min_eof=high).messages == held_back
    finally:
        committed.close()
        reference.close()


def test_group_commit_after_transactions_is_the_log_end(mock_cluster_factory, unique_topic):
    """subscribe(), consume everything, commit: the committed offsets are past the final ABORT markers, and
    librdkafka reads the same offsets back for the group, so the group's next member re-reads nothing."""
    cluster = mock_cluster_factory(1)
    cluster.group_initial_rebalance_delay_ms(0)
    make_topic(cluster, unique_topic, 2)
    writer = TxnWriter(cluster.bootstrap, unique_topic)
    writer.run(SCRIPT, range(2))
    high = high_watermarks(cluster.bootstrap, unique_topic, range(2))
    group = {"group.id": f"g-{unique_topic}", "session.timeout.ms": 6000, "heartbeat.interval.ms": 300,
             "auto.offset.reset": "earliest", "enable.auto.commit": False}

    with kq_consumer(cluster.bootstrap, "read_committed", **group) as c:
        c.subscribe([unique_topic])
        got = read_until_eof(c, range(2), timeout=30)
        c.commit(asynchronous=False)
        committed = c.committed([TopicPartition(unique_topic, p) for p in range(2)], timeout=10)
    visible = writer.by_partition([COMMIT, PLAIN])
    produced = writer.by_partition([COMMIT, PLAIN, ABORT])
    for partition in range(2):
        assert set(visible[partition]) <= set(got.messages[partition]) <= set(produced[partition])
    assert {tp.partition: tp.offset for tp in committed} == high

    reference = ck.Consumer({"bootstrap.servers": cluster.bootstrap, **group})
    try:
        seen = reference.committed([ck.TopicPartition(unique_topic, p) for p in range(2)], timeout=10)
    finally:
        reference.close()
    assert {tp.partition: tp.offset for tp in seen} == high
