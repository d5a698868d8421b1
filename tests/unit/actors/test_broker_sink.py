"""Unit tests for the broker actor's produce part: XMIT collation and the backpressure threshold
(kqactors.actors.broker.sink)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kqactors.actors.broker.sink import ProduceSink, XmitEntry, collate_produce
from kqactors.core.log import ClientLog
from kqactors.protocol.requests import PRODUCE
from tests.unit.core.test_connection import drain, up_connection


def entry(topic="t", partition=0, acks=-1, size=10, batch_id=0) -> XmitEntry:
    return XmitEntry("toppar", topic, partition, batch_id, 0, acks, 5000, bytes([partition]) * size, 0.0)


def test_collate_takes_one_batch_per_partition_and_keeps_order():
    entries = [entry("t", 0, batch_id=1), entry("t", 1, batch_id=2), entry("t", 0, batch_id=3),
               entry("u", 0, batch_id=4), entry("t", 1, acks=0, batch_id=5), entry("t", 2, batch_id=6)]
    taken, rest = collate_produce(entries)
    assert [e.batch_id for e in taken] == [1, 2, 4, 6]
    assert [e.batch_id for e in rest] == [3, 5]
    taken, rest = collate_produce(rest)
    assert [e.batch_id for e in taken] == [3] and [e.batch_id for e in rest] == [5]


def test_collate_bounds_request_size_but_always_takes_one():
    entries = [entry(partition=p, size=100) for p in range(5)]
    taken, rest = collate_produce(entries, max_bytes=250)
    assert len(taken) == 2 and len(rest) == 3
    taken, _ = collate_produce([entry(size=1000)], max_bytes=10)
    assert len(taken) == 1


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from([-1, 0, 1])), min_size=1, max_size=30))
def test_collate_never_reorders_a_partition(items):
    entries = [entry("t", p, acks, batch_id=i) for i, (p, acks) in enumerate(items)]
    sent: list[XmitEntry] = []
    pending = entries
    while pending:
        taken, pending = collate_produce(pending)
        assert taken, "progress on every call"
        assert len({(e.topic, e.partition) for e in taken}) == len(taken)
        assert len({(e.acks, e.timeout_ms) for e in taken}) == 1
        sent += taken
    for p in range(4):
        ids = [e.batch_id for e in sent if e.partition == p]
        assert ids == sorted(ids)
    assert sorted(e.batch_id for e in sent) == list(range(len(entries)))


class _FakeBroker:
    """What ProduceSink reaches through its broker: a real connection (UP) whose socket takes nothing until
    the test drains it."""

    node_id = 1
    log_name = "127.0.0.1:9092/1"
    socket_timeout_ms = 30000
    max_in_flight = 1000

    def __init__(self) -> None:
        self.conn = up_connection(max_in_flight=1000)
        self.clog = ClientLog(lambda record: None)
        self.ctx = None

    def write(self) -> None:
        pass  # the socket is full: nothing leaves until drain()

    def ensure_connecting(self) -> None:
        pass


def _requests_made(threshold: int) -> list[list[int]]:
    """XMITs of three partitions arriving one per host turn while the socket takes nothing; the partitions of
    each Produce request made."""
    broker = _FakeBroker()
    sink = ProduceSink(broker, threshold)  # type: ignore[arg-type]
    made: list[list[int]] = []
    original = broker.conn.enqueue

    def enqueue(request, now):
        if request.api_key == PRODUCE.api_key:
            entries = request.context[1]
            made.append([e.partition for e in entries])
        original(request, now)

    broker.conn.enqueue = enqueue
    for partition in range(3):
        sink.unsent.append(entry("t", partition, batch_id=partition))
        sink.flush(0.0)
    drain(broker.conn)  # the socket takes everything written so far
    sink.on_output_progress()
    return made


def test_backpressure_threshold_holds_new_requests_and_collates_what_waited():
    assert _requests_made(threshold=1) == [[0], [1, 2]]  # librdkafka's default: one untransmitted request
    assert _requests_made(threshold=1000) == [[0], [1], [2]]  # no backpressure: a request per turn
