"""Runs in: unit tests. The toppar → app message frame: round trips, inline events, partial takes and the
byte accounting that prefetch credit relies on."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kqactors.core.consumer.packing import MessageBatch, MessageBatchWriter, pack_headers, unpack_headers
from kqactors.errors import KafkaError

maybe_bytes = st.one_of(st.none(), st.binary(max_size=40))
headers = st.lists(st.tuples(st.text(max_size=8), maybe_bytes), max_size=3)
record = st.tuples(st.integers(-1, 2**62), maybe_bytes, maybe_bytes, headers)


@settings(max_examples=60, deadline=None)
@given(st.lists(record, max_size=30), st.integers(0, 2), st.integers(-1, 1000))
def test_round_trip(records, ts_type, epoch) -> None:
    writer = MessageBatchWriter()
    rows = [(offset, ts, key, value, tuple(hdrs)) for offset, (ts, key, value, hdrs) in enumerate(records)]
    writer.add_records(rows, ts_type, epoch)
    frame = writer.getvalue()
    assert len(frame) == writer.nbytes
    batch = MessageBatch("topic", 5, frame, version=3)
    messages, count, used = batch.take()
    assert count == len(rows) and used == len(frame) and len(batch) == 0
    for message, (offset, ts, key, value, hdrs) in zip(messages, rows, strict=True):
        assert (message.topic(), message.partition(), message.offset()) == ("topic", 5, offset)
        assert (message.key(), message.value(), message.timestamp()) == (key, value, (ts_type, ts))
        assert message.headers() == (list(hdrs) if hdrs else None)
        assert message.leader_epoch() == (None if epoch < 0 else epoch)
        assert message.error() is None


def test_min_offset_filters_records() -> None:
    writer = MessageBatchWriter()
    added = writer.add_records([(o, 0, None, b"v", ()) for o in range(10)], 1, -1, min_offset=7)
    assert added == 3 and writer.last_offset == 9
    assert [m.offset() for m in MessageBatch("t", 0, writer.getvalue()).take()[0]] == [7, 8, 9]


def test_events_travel_in_order_with_messages() -> None:
    writer = MessageBatchWriter()
    writer.add_records([(0, 1, None, b"a", ())], 1, -1)
    writer.add_error(1, KafkaError._BAD_MSG, "broken batch")
    writer.add_records([(2, 1, None, b"c", ())], 1, -1)
    writer.add_eof(3)
    assert writer.count == 4 and writer.messages == 2
    messages = list(MessageBatch("t", 0, writer.getvalue()))
    assert [m.offset() for m in messages] == [0, 1, 2, 3]
    assert messages[1].error() == KafkaError._BAD_MSG and messages[1].error().str() == "broken batch"
    assert messages[3].error() == KafkaError._PARTITION_EOF
    assert [m.value() for m in messages if m.error() is None] == [b"a", b"c"]


def test_skip_entries_yield_no_message_and_report_the_last_skip_of_each_take() -> None:
    writer = MessageBatchWriter()
    writer.add_records([(0, 1, None, b"a", ())], 1, -1)
    writer.add_skip(3, 2)  # e.g. a transaction marker at 3 (and hidden records before it)
    writer.add_eof(4)
    assert writer.count == 3 and writer.messages == 1
    batch = MessageBatch("t", 0, writer.getvalue())
    messages, count, _ = batch.take(1)
    assert [m.offset() for m in messages] == [0] and count == 1 and batch.skipped is None
    messages, count, _ = batch.take(1)
    assert messages == [] and count == 0 and batch.skipped == (3, 2)
    messages, count, _ = batch.take()
    assert [m.error() for m in messages] == [KafkaError._PARTITION_EOF] and batch.skipped is None


def test_partial_takes_add_up_to_the_frame() -> None:
    writer = MessageBatchWriter()
    writer.add_records([(o, 0, b"k" * o, b"v" * (o * 3), (("h", b"x"),) if o % 2 else ()) for o in range(25)], 1, 0)
    frame = writer.getvalue()
    batch = MessageBatch("t", 0, frame)
    offsets, total_msgs, total_bytes = [], 0, 0
    while len(batch):
        messages, count, used = batch.take(7)
        offsets += [m.offset() for m in messages]
        total_msgs += count
        total_bytes += used
    assert offsets == list(range(25)) and total_msgs == 25 and total_bytes == len(frame)
    assert batch.take() == ([], 0, 0)


def test_headers_codec() -> None:
    hdrs = [("a", b"1"), ("ü", None), ("", b"")]
    assert unpack_headers(pack_headers(hdrs)) == hdrs


@pytest.mark.parametrize("frame", [b"", b"\x05\x00\x00\x00"])
def test_short_frames_are_rejected(frame: bytes) -> None:
    with pytest.raises(ValueError):
        MessageBatch("t", 0, frame)
