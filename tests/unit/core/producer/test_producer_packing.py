"""Packing app → toppar: round trips, nulls, headers, malformed frames — on the pure-Python packer and
its C twin (``impl``), plus a byte-for-byte comparison of the two."""

from __future__ import annotations

import struct
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kqactors.core.producer.packing import PyMessagePacker, unpack_messages


def packer_class(impl):
    return PyMessagePacker if impl is None else impl.Packer


_bytes_or_none = st.one_of(st.none(), st.binary(max_size=64))
_headers = st.one_of(st.none(), st.lists(st.tuples(st.text(max_size=8), _bytes_or_none), max_size=4))
_message = st.tuples(st.integers(min_value=-(2**63), max_value=2**63 - 1), _bytes_or_none, _bytes_or_none,
                     _headers)


@settings(max_examples=60, deadline=None)
@given(messages=st.lists(_message, max_size=30))
def test_round_trip_preserves_every_field(impl, messages):
    packer = packer_class(impl)()
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


def test_empty_key_and_value_stay_distinct_from_null(impl):
    packer = packer_class(impl)()
    packer.append(1, 0, b"", None, None, 0.0)
    packer.append(2, 0, None, b"", [("h", b""), ("n", None)], 0.0)
    _, count, _, frame = packer.take()
    assert unpack_messages(frame, count) == [(0, b"", None, None), (0, None, b"", [("h", b""), ("n", None)])]


def test_take_resets_the_buffer(impl):
    packer = packer_class(impl)()
    packer.append(7, 1, b"k", b"v", None, 0.0)
    packer.take()
    assert len(packer) == 0 and packer.byte_size() == 0
    packer.append(8, 2, b"k2", b"v2", None, 1.0)
    first, count, _, frame = packer.take()
    assert (first, count) == (8, 1)
    assert unpack_messages(frame, 1) == [(2, b"k2", b"v2", None)]


def test_truncated_frame_is_rejected(impl):
    packer = packer_class(impl)()
    packer.append(1, 0, b"key", b"value", None, 0.0)
    _, count, _, frame = packer.take()
    with pytest.raises(ValueError):
        unpack_messages(frame[:-2], count)
    with pytest.raises(ValueError):
        unpack_messages(frame[:5], count)


def test_trailing_bytes_and_wrong_count_are_rejected(impl):
    packer = packer_class(impl)()
    packer.append(1, 0, b"a", b"b", None, 0.0)
    packer.append(2, 0, b"c", b"d", None, 0.0)
    _, count, _, frame = packer.take()
    with pytest.raises(ValueError):
        unpack_messages(frame, count - 1)
    with pytest.raises(ValueError):
        unpack_messages(frame, count + 1)


# ---- the C twin against the reference, byte for byte ------------------------------------------------------

# Large values (so frames cross SEGMENT_BYTES and get cuts) built from a size, not drawn byte by byte.
_big = st.one_of(st.none(), st.binary(max_size=64),
                 st.builds(lambda size, fill: bytes([fill]) * size, st.integers(5000, 40_000), st.integers(0, 255)))
_big_message = st.tuples(st.integers(min_value=-(2**63), max_value=2**63 - 1), _big, _big, _headers)


def _fill(packer, messages, first_msgid, pending):
    for index, (ts, key, value, headers) in enumerate(messages):
        if index % 2:
            packer.append(first_msgid + index, ts, key, value, headers, 1.5 + index)
        else:
            packer.append_pending(first_msgid + index, ts, key, value, headers, 1.5 + index, pending,
                                  None if index % 3 else print, index)


def _state(packer):
    return (len(packer), packer.count, packer.nbytes, packer.byte_size(), packer.headers,
            [list(cut) for cut in packer.cuts])


@settings(max_examples=80, deadline=None)
@given(rounds=st.lists(st.lists(_big_message, max_size=12), min_size=1, max_size=3),
       first=st.integers(min_value=0, max_value=2**40))
def test_native_packer_writes_the_same_bytes_as_python(native, rounds, first):
    py, c = PyMessagePacker(), native.Packer()
    py_pending: dict = {}
    c_pending: dict = {}
    for messages in rounds:  # several frames through the same packers: take() must reset everything
        _fill(py, messages, first, py_pending)
        _fill(c, messages, first, c_pending)
        assert _state(c) == _state(py)
        c_cuts, py_cuts = c.cuts, py.cuts
        assert c.take() == py.take()
        assert c_cuts == py_cuts  # a list read before take() keeps its content (take_all hands it over)
        assert _state(c) == _state(py) == (0, 0, 0, 0, 0, [])
        first += len(messages)
    assert c_pending == py_pending


def test_native_cuts_follow_segment_bytes(native):
    from kqactors.core.producer.packing import SEGMENT_BYTES

    py, c = PyMessagePacker(), native.Packer()
    value = b"v" * 1000
    for msgid in range(1, 300):
        headers = [("h", b"x")] if msgid % 7 == 0 else None
        py.append(msgid, msgid, None, value, headers, 0.0)
        c.append(msgid, msgid, None, value, headers, 0.0)
    assert len(c.cuts) == len(py.cuts) == py.nbytes // SEGMENT_BYTES
    assert c.cuts == py.cuts
    assert c.take() == py.take()


@pytest.mark.parametrize("bad", [
    dict(key="str"), dict(value=bytearray(b"v")), dict(headers=[("h", "str")]), dict(headers=[(b"h", b"v")]),
    dict(headers=[("h",)]), dict(headers=5), dict(timestamp=2**63), dict(timestamp="1"),
    dict(headers=[("h", None)] * 65536),
])
def test_native_rejects_bad_fields_without_touching_the_frame(native, bad):
    packer = native.Packer()
    packer.append(1, 5, b"k", b"v", None, 2.0)
    before = _state(packer)
    pending: dict = {}
    fields = dict(timestamp=7, key=b"k", value=b"v", headers=None) | bad
    with pytest.raises((TypeError, struct.error)):
        packer.append_pending(2, fields["timestamp"], fields["key"], fields["value"], fields["headers"], 3.0,
                              pending, None, 1)
    assert _state(packer) == before and pending == {}
    assert packer.take()[:3] == (1, 1, 2.0)


def test_native_packer_does_not_leak(native):
    """Every reference the C packer takes is given back: the objects' reference counts return to where
    they were, and the pending entries hold exactly one reference to each field."""
    key, value, headers = b"key-" * 10, b"value" * 20, [("name", b"hv"), ("n", None)]
    callback = print
    counts = [sys.getrefcount(obj) for obj in (key, value, headers, callback)]
    packer = native.Packer()
    for _ in range(3):
        pending: dict = {}
        for msgid in range(1, 2001):
            packer.append_pending(msgid, 1, key, value, headers, 0.5, pending, callback, 10)
        assert [sys.getrefcount(obj) - 2000 for obj in (key, value, headers, callback)] == counts
        packer.take()
        del pending
    assert [sys.getrefcount(obj) for obj in (key, value, headers, callback)] == counts
