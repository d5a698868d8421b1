"""Unit tests for the broker actor's produce part: XMIT collation (kqactors.actors.broker.sink)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kqactors.actors.broker.sink import XmitEntry, collate_produce


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
