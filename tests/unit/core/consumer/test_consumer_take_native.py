"""Runs in: unit tests. MessageBatch.take()'s per-entry loop has a pure-Python reference and a C twin
(``kqactors.native._native.take_entries``): both must give the same Messages, counts, prefetch bytes and skips for
any frame; the C one must leak nothing, leave its Messages to no cycle collection, and refuse a malformed
frame with an exception instead of reading outside it."""

from __future__ import annotations

import gc
import struct
import sys
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kqactors.core.consumer.packing import (
    KIND_EOF,
    KIND_ERROR,
    KIND_SKIP,
    MessageBatch,
    _event_message,
    _take_entries_py,
    pack_headers,
)
from kqactors.message import Message
from kqactors.records.varint import encode_varint

COUNT = struct.Struct("<I")
ENTRY = struct.Struct("<qqiiiiiBi")
INT64 = st.integers(-(2**63), 2**63 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)


def batch_class(impl) -> type[MessageBatch]:
    """MessageBatch on the C twin (``impl`` the extension module) or on the Python reference (None)."""
    take = _take_entries_py if impl is None else impl.take_entries
    return type("Batch", (MessageBatch,), {"__slots__": (), "_take_entries": staticmethod(take)})


def build_frame(entries: list[tuple]) -> bytes:
    """A frame of entries given as ("msg", offset, timestamp, kind, key, value, headers, epoch),
    ("error", offset, code, reason), ("skip", offset, epoch) or ("eof", offset, kind); a headers list of
    None is none, an empty list is stored as a zero count (the writer never does that, a frame may)."""
    index, data = bytearray(), bytearray()

    def put(blob: bytes | None) -> tuple[int, int]:
        if blob is None:
            return -1, -1
        data.extend(blob)
        return len(data) - len(blob), len(blob)

    for entry in entries:
        if entry[0] == "msg":
            _, offset, timestamp, kind, key, value, headers, epoch = entry
            (key_pos, key_len), (value_pos, value_len) = put(key), put(value)
            headers_pos = -1 if headers is None else put(pack_headers(headers) if headers else b"\x00")[0]
            index += ENTRY.pack(offset, timestamp, key_pos, key_len, value_pos, value_len, headers_pos, kind,
                                epoch)
        elif entry[0] == "error":
            _, offset, code, reason = entry
            pos, length = put(reason.encode())
            index += ENTRY.pack(offset, 0, -1, code, pos, length, -1, KIND_ERROR, -1)
        elif entry[0] == "skip":
            index += ENTRY.pack(entry[1], 0, -1, -1, -1, -1, -1, KIND_SKIP, entry[2])
        else:
            index += ENTRY.pack(entry[1], 0, -1, -1, -1, -1, -1, entry[2], -1)
    return COUNT.pack(len(entries)) + bytes(index) + bytes(data)


def fields(message: Message) -> tuple:
    """Everything a Message holds, the error as (code, reason), with the header containers' types."""
    error = message.error()
    headers = message.headers()
    shape = None if headers is None else (type(headers), [type(h) for h in headers])
    error_fields = None if error is None else (error.code(), error.str())
    return (type(message), message.topic(), message.partition(), message.offset(), message.key(),
            message.value(), headers, shape, error_fields, message.timestamp(), message.latency(),
            message.leader_epoch())


maybe_bytes = st.one_of(st.none(), st.binary(max_size=12), st.binary(min_size=200, max_size=1500))
header = st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=12)))
header_lists = st.one_of(st.none(), st.lists(header, max_size=4))
entries = st.one_of(
    st.tuples(st.just("msg"), INT64, INT64, st.integers(0, KIND_ERROR - 1), maybe_bytes, maybe_bytes,
              header_lists, INT32),
    st.tuples(st.just("error"), INT64, INT32, st.text(max_size=20)),
    st.tuples(st.just("skip"), INT64, INT32),
    st.tuples(st.just("eof"), INT64, st.sampled_from([KIND_EOF, 0x13, 0x7F, 0xFF])),
)
MESSAGE = ("msg", 7, 1_700_000_000_000, 1, b"key", b"value" * 20, [("h", b"1"), ("none", None)], 4)


@settings(max_examples=150, deadline=None)
@given(st.lists(entries, max_size=40), st.lists(st.one_of(st.none(), st.integers(0, 6)), max_size=8))
def test_native_take_matches_the_python_reference(native, rows, takes) -> None:
    frame = build_frame(rows)
    py_batch = batch_class(None)("topic", 3, frame, version=2)
    # the app hands the transport's zero-copy view over as it arrived: the C twin reads it in place
    c_batch = batch_class(native)("topic", 3, memoryview(bytearray(frame)), version=2)
    for max_count in [*takes, None]:
        py_messages, py_count, py_used = py_batch.take(max_count)
        c_messages, c_count, c_used = c_batch.take(max_count)
        assert [fields(m) for m in c_messages] == [fields(m) for m in py_messages]
        assert (c_count, c_used, c_batch.skipped, len(c_batch)) == (py_count, py_used, py_batch.skipped,
                                                                    len(py_batch))
        assert (c_batch._cursor, c_batch._paid) == (py_batch._cursor, py_batch._paid)


def test_the_batch_class_uses_kqactors_natives_choice() -> None:
    from kqactors.native import NATIVE

    expected = _take_entries_py if NATIVE is None else NATIVE.take_entries
    assert MessageBatch._take_entries is expected


def test_native_messages_stay_out_of_the_cycle_collector(native) -> None:
    frame = build_frame([MESSAGE, ("error", 8, 5, "boom"), ("eof", 9, KIND_EOF)])
    messages, _, _ = batch_class(native)("t", 0, frame).take()
    assert len(messages) == 3
    message = messages[0]
    assert not gc.is_tracked(message) and not gc.is_tracked(message.timestamp())
    # The header tuples hold only str and bytes; the list is the application's to change, so it is tracked.
    assert gc.is_tracked(message.headers()) and not any(gc.is_tracked(h) for h in message.headers())
    assert all(gc.is_tracked(m) for m in messages[1:])  # events are built in Python
    message.set_value(object())  # an arbitrary object: back under the collector
    assert gc.is_tracked(message)
    reference, _, _ = batch_class(None)("t", 0, frame).take()
    assert gc.is_tracked(reference[0])


def test_consecutive_messages_may_share_their_timestamp_and_epoch(native) -> None:
    rows = [("msg", o, 1_700_000_000_000, 1, None, b"v", None, 70_000) for o in range(3)]
    rows.append(("msg", 3, 1_700_000_000_001, 1, None, b"v", None, 70_000))
    messages, _, _ = batch_class(native)("t", 0, build_frame(rows)).take()
    assert messages[0].timestamp() is messages[2].timestamp()
    assert messages[3].timestamp() == (1, 1_700_000_000_001)
    assert messages[0].leader_epoch() is messages[3].leader_epoch()


def leak_rows() -> list[tuple]:
    return [MESSAGE, ("msg", 8, -1, 0, None, None, [], -1), ("skip", 9, 3), ("error", 10, 2, "reason"),
            ("eof", 11, KIND_EOF), MESSAGE]


def assert_no_growth(run, *watched) -> None:
    """``run()`` again and again leaves the watched objects' reference counts and the heap as they were."""
    run()  # first use: lazy imports, caches
    gc.collect()
    before = [sys.getrefcount(obj) for obj in watched]
    tracemalloc.start()
    try:
        run()
        gc.collect()
        start, _ = tracemalloc.get_traced_memory()
        for _ in range(5):
            run()
        gc.collect()
        end, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [sys.getrefcount(obj) for obj in watched] == before
    assert end - start < 32 * 1024, f"heap grew by {end - start} bytes"


def test_native_take_leaks_nothing(native) -> None:
    topic = "".join(["leak", "-", "topic"])  # objects of this test's own, so their counts are ours
    partition = int("1000003")
    frame = build_frame(leak_rows())
    batch_type = batch_class(native)

    def run() -> None:
        for _ in range(300):
            batch = batch_type(topic, partition, frame)
            while len(batch):
                messages, _, _ = batch.take(2)
                del messages

    assert_no_growth(run, topic, partition, frame, Message, _event_message, native.take_entries)


def test_native_take_leaks_nothing_when_it_raises(native) -> None:
    topic = "".join(["leak", "-", "topic"])
    partition = int("1000003")
    # The last entry's headers (02 02 'a' 02 '1': one header) claim a second one that is not there, so the
    # take fails after building the messages and events before it.
    bad = build_frame([*leak_rows(), ("msg", 12, 0, 1, b"k", b"v", [("a", b"1")], 0)])
    assert bad[-5:] == b"\x02\x02a\x021"
    bad = bad[:-5] + b"\x04" + bad[-4:]
    batch_type = batch_class(native)

    def run() -> None:
        for _ in range(300):
            batch = batch_type(topic, partition, bad)
            with pytest.raises(ValueError):
                batch.take()

    assert_no_growth(run, topic, partition, bad, Message, _event_message)


def corrupt(rows: list[tuple], field: int, value: int, entry: int = 0) -> bytes:
    """The frame of ``rows`` with field ``field`` (in the entry struct's order) of entry ``entry`` set to
    ``value``."""
    frame = bytearray(build_frame(rows))
    at = COUNT.size + entry * ENTRY.size
    values = list(ENTRY.unpack_from(frame, at))
    values[field] = value
    ENTRY.pack_into(frame, at, *values)
    return bytes(frame)


KEY_POS, KEY_LEN, VALUE_POS, VALUE_LEN, HEADERS_POS = 2, 3, 4, 5, 6
PLAIN = [("msg", 1, 0, 1, b"k", b"v" * 10, None, 0)]
WITH_HEADERS = [("msg", 1, 0, 1, None, None, [("name", b"value")], 0)]
ERROR = [("error", 1, 2, "reason")]


def headers_frame(raw_headers: bytes) -> bytes:
    """One message whose headers section is ``raw_headers``, the last bytes of the frame."""
    frame = bytearray(build_frame([("msg", 1, 0, 1, None, None, [], 0)]))
    return bytes(frame[:-1]) + raw_headers


@pytest.mark.parametrize("frame", [
    pytest.param(corrupt(PLAIN, KEY_POS, -1), id="key-before-data"),
    pytest.param(corrupt(PLAIN, KEY_LEN, 12), id="key-past-end"),
    pytest.param(corrupt(PLAIN, KEY_POS, 2**31 - 1), id="key-pos-huge"),
    pytest.param(corrupt(PLAIN, VALUE_LEN, 2**31 - 1), id="value-len-huge"),
    pytest.param(corrupt(PLAIN, VALUE_POS, 2), id="value-past-end"),
    pytest.param(corrupt(WITH_HEADERS, HEADERS_POS, 100), id="headers-past-end"),
    pytest.param(corrupt(ERROR, VALUE_LEN, 7), id="reason-past-end"),
    pytest.param(build_frame(WITH_HEADERS)[:-3], id="headers-truncated"),
    pytest.param(headers_frame(encode_varint(3) + encode_varint(1) + b"a"), id="header-count-too-big"),
    pytest.param(headers_frame(encode_varint(-2)), id="negative-header-count"),
    pytest.param(headers_frame(encode_varint(1) + encode_varint(-1)), id="null-header-name"),
    pytest.param(headers_frame(encode_varint(1) + encode_varint(40) + b"abc"), id="header-name-past-end"),
    pytest.param(headers_frame(encode_varint(1) + encode_varint(1) + b"a" + encode_varint(-3)),
                 id="bad-header-value-length"),
    pytest.param(headers_frame(encode_varint(1) + encode_varint(1) + b"a" + encode_varint(9) + b"xy"),
                 id="header-value-past-end"),
    pytest.param(headers_frame(encode_varint(1) + encode_varint(2) + b"\xff\xfe" + encode_varint(-1)),
                 id="header-name-not-utf8"),
    pytest.param(headers_frame(b"\xff" * 11), id="varint-too-long"),
    pytest.param(headers_frame(b"\xff" * 9 + b"\x7f"), id="varint-past-64-bits"),
    pytest.param(headers_frame(b"\x80"), id="varint-cut-short"),
])  # fmt: skip
def test_native_take_refuses_a_malformed_frame(native, frame) -> None:
    batch = batch_class(native)("t", 0, frame)
    with pytest.raises(ValueError):  # CorruptRecordError, or UnicodeDecodeError for a name
        batch.take()
    assert (len(batch), batch._paid, batch.skipped) == (1, 0, None)  # nothing taken: it raises again
    with pytest.raises(ValueError):
        batch.take()


def test_native_take_checks_its_arguments(native) -> None:
    frame = build_frame([MESSAGE, MESSAGE])
    data_start = COUNT.size + 2 * ENTRY.size
    take = native.take_entries
    for start, stop, base in [(0, 3, data_start), (-1, 1, data_start), (2, 1, data_start),
                              (0, 2, len(frame) + 1), (0, 2, data_start - 1), (0, 0, 2)]:
        with pytest.raises(ValueError):
            take(frame, start, stop, base, "t", 0, _event_message)
    with pytest.raises(TypeError):
        take("not a buffer", 0, 2, data_start, "t", 0, _event_message)
    with pytest.raises(TypeError):
        take(frame, 0, 2, data_start, "t", 0)
    assert len(take(frame, 0, 2, data_start, "t", 0, _event_message)[0]) == 2


@pytest.mark.parametrize("impl", ["python", "native"])
def test_take_reads_a_view_in_place_and_lets_it_go(native, impl) -> None:
    """A frame may be any bytes-like view (a zmq frame's): values come out as bytes of their own, and the
    buffer is not held once take returns (a bytearray can be resized again)."""
    take = _take_entries_py if impl == "python" else native.take_entries
    frame = bytearray(build_frame([MESSAGE, ("error", 8, 5, "boom"), MESSAGE]))
    data_start = COUNT.size + 3 * ENTRY.size
    messages, count, _ = take(frame, 0, 3, data_start, "t", 0, _event_message)
    expected, _, _ = _take_entries_py(bytes(frame), 0, 3, data_start, "t", 0, _event_message)
    assert count == 2 and [fields(m) for m in messages] == [fields(m) for m in expected]
    data = [m for m in messages if m.error() is None]
    assert data and all(type(m.value()) is bytes and type(m.key()) is bytes for m in data)
    frame.extend(b"more")  # raises BufferError while a view of the frame is still exported
    frame[:] = b""
    assert messages[0].value() == MESSAGE[5]
