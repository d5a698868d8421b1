"""Runs in: unit tests. Encoding records straight from packed PRODUCE frames (``append_packed``) and the
frame scan/size estimate the partition core uses to cut batches (``kqactors.records.packed``)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kqactors.core.producer.packing import pack_messages, record_size_estimate
from kqactors.records import LZ4, NONE, RecordBatchBuilder, decode_record_set
from kqactors.records.packed import ENTRY, frame_size_estimate, scan_packed

optional_bytes = st.one_of(st.none(), st.binary(max_size=300))
header = st.tuples(st.text(max_size=8), optional_bytes)
message = st.tuples(
    st.integers(min_value=0, max_value=2**50),
    optional_bytes,
    optional_bytes,
    st.one_of(st.none(), st.lists(header, min_size=1, max_size=3)),
)


def encode_tuples(messages, codec=NONE):
    builder = RecordBatchBuilder(codec=codec, producer_id=7, producer_epoch=1, base_sequence=3)
    builder.append_many(messages)
    return bytes(builder.build())


def encode_packed(ranges, codec=NONE):
    builder = RecordBatchBuilder(codec=codec, producer_id=7, producer_epoch=1, base_sequence=3)
    total = sum(builder.append_packed(frame, start, end) for frame, start, end in ranges)
    return bytes(builder.build()), total


@settings(max_examples=60, deadline=None)
@given(st.lists(message, min_size=1, max_size=30), st.data())
def test_packed_encoding_is_byte_identical_to_encoding_tuples(messages, data):
    frame, count, _headers = pack_messages(messages)
    # Split the frame at an entry boundary, as a batch cut across two chunks does.
    split_at = data.draw(st.integers(min_value=0, max_value=count))
    _taken, middle, _size = scan_packed(frame, 0, split_at, 1 << 60, False)
    built, total = encode_packed([(frame, 0, middle), (frame, middle, len(frame))])
    assert total == count
    assert built == encode_tuples(messages)


def test_packed_records_decode_to_what_was_produced_with_compression():
    messages = [(1_700_000_000_000 + i, None if i % 3 else b"k%d" % i, b"value-%d" % i * 20,
                 [("h", b"x"), ("n", None)] if i == 4 else None) for i in range(50)]
    frame, _count, _headers = pack_messages(messages)
    built, _total = encode_packed([(frame, 0, len(frame))], codec=LZ4)
    (batch,) = decode_record_set(built)
    records = batch.records
    assert [r[2] for r in records] == [m[1] for m in messages]
    assert [r[3] for r in records] == [m[2] for m in messages]
    assert [r[1] for r in records] == [m[0] for m in messages]
    assert records[4][4] == (("h", b"x"), ("n", None))
    assert batch.producer_id == 7 and batch.base_sequence == 3


def test_a_range_that_does_not_end_on_an_entry_is_rejected():
    frame, _count, _headers = pack_messages([(1, None, b"abc", None), (2, b"k", b"def", None)])
    with pytest.raises(ValueError):
        RecordBatchBuilder().append_packed(frame, 0, len(frame) - 1)
    with pytest.raises(ValueError):
        RecordBatchBuilder().append_packed(frame[:-2], 0, len(frame) - 2)
    with pytest.raises(ValueError):
        RecordBatchBuilder().append_packed(frame[:ENTRY.size - 1], 0, ENTRY.size - 1)


def test_frame_size_estimate_equals_the_per_message_estimates():
    messages = [(0, b"key", b"v" * 40, None), (0, None, None, [("name", b"xy"), ("é", None)]), (0, b"", b"", [])]
    frame, count, headers = pack_messages(messages)
    expected = sum(
        record_size_estimate(len(k or b""), len(v or b""),
                             sum(10 + len(n.encode()) + len(hv or b"") for n, hv in (h or ())))
        for _ts, k, v, h in messages)
    assert frame_size_estimate(len(frame), count, headers) == expected
    taken, end, size = scan_packed(frame, 0, 10, 1 << 30, False)
    assert (taken, end, size) == (3, len(frame), expected)


def test_scan_stops_at_the_count_and_byte_budget_but_may_take_one_oversized_message():
    frame, _count, _headers = pack_messages([(0, None, b"x" * 100, None)] * 5)
    one = record_size_estimate(0, 100, 0)
    assert scan_packed(frame, 0, 2, 1 << 30, False)[0] == 2
    assert scan_packed(frame, 0, 10, 3 * one, False)[0] == 3
    assert scan_packed(frame, 0, 10, one - 1, False)[0] == 0
    taken, end, size = scan_packed(frame, 0, 10, one - 1, True)
    assert (taken, size) == (1, one)
    # Continuing from where a scan stopped walks the rest.
    assert scan_packed(frame, end, 10, 1 << 30, False)[0] == 4
    with pytest.raises(ValueError):
        scan_packed(frame[:-1], 0, 10, 1 << 30, False)
