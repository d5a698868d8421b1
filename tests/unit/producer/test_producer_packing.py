"""Packing app → toppar: round trips, nulls, headers, malformed frames."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kqactors.producer_core.packing import MessagePacker, unpack_messages

_bytes_or_none = st.one_of(st.none(), st.binary(max_size=64))
_headers = st.one_of(st.none(), st.lists(st.tuples(st.text(max_size=8), _bytes_or_none), max_size=4))
_message = st.tuples(st.integers(min_value=-(2**63), max_value=2**63 - 1), _bytes_or_none, _bytes_or_none,
                     _headers)


@settings(max_examples=60, deadline=None)
@given(st.lists(_message, max_size=30))
def test_round_trip_preserves_every_field(messages):
    packer = MessagePacker()
    for index, (ts, key, value, headers) in enumerate(messages):
        packer.append(100 + index, ts, key, value, headers, enq_time=5.0)
    assert len(packer) == len(messages)
    expected_size = packer.byte_size()
    first_msgid, count, first_enq, frame = packer.take()
    assert len(frame) == expected_size
    assert count == len(messages)
    if messages:
        assert first_msgid == 100
        assert first_enq == 5.0
    unpacked = unpack_messages(frame, count)
    expected = [(ts, key, value, list(headers) if headers else None) for ts, key, value, headers in messages]
    assert unpacked == expected


def test_empty_key_and_value_stay_distinct_from_null():
    packer = MessagePacker()
    packer.append(1, 0, b"", None, None, 0.0)
    packer.append(2, 0, None, b"", [("h", b""), ("n", None)], 0.0)
    _, count, _, frame = packer.take()
    assert unpack_messages(frame, count) == [(0, b"", None, None), (0, None, b"", [("h", b""), ("n", None)])]


def test_take_resets_the_buffer():
    packer = MessagePacker()
    packer.append(7, 1, b"k", b"v", None, 0.0)
    packer.take()
    assert len(packer) == 0 and packer.byte_size() == 0
    packer.append(8, 2, b"k2", b"v2", None, 1.0)
    first, count, _, frame = packer.take()
    assert (first, count) == (8, 1)
    assert unpack_messages(frame, 1) == [(2, b"k2", b"v2", None)]


def test_truncated_frame_is_rejected():
    packer = MessagePacker()
    packer.append(1, 0, b"key", b"value", None, 0.0)
    _, count, _, frame = packer.take()
    with pytest.raises(ValueError):
        unpack_messages(frame[:-2], count)
    with pytest.raises(ValueError):
        unpack_messages(frame[:5], count)


def test_trailing_bytes_and_wrong_count_are_rejected():
    packer = MessagePacker()
    packer.append(1, 0, b"a", b"b", None, 0.0)
    packer.append(2, 0, b"c", b"d", None, 0.0)
    _, count, _, frame = packer.take()
    with pytest.raises(ValueError):
        unpack_messages(frame, count - 1)
    with pytest.raises(ValueError):
        unpack_messages(frame, count + 1)
