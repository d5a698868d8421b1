"""Runs in: unit tests. The C twins in ``kqactors.native._native_records`` against their pure-Python references:
``pack_v2_records`` (the consumer's record index) and ``RecordBatchBuilder.append_packed`` (the producer's
record encoder) must give the same bytes and return values for any input, raise the same exception type
for any malformed input (leaving the same state behind), and leak nothing."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import tracemalloc
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kqactors.core.consumer import packing as consumer_packing
from kqactors.core.producer.packing import pack_messages
from kqactors.records import CorruptRecordError, RecordBatchBuilder, batch_v2, build_batch
from kqactors.records.batch_v2 import BATCH_HEADER_SIZE
from kqactors.records.packed import ENTRY, HEADER, scan_packed
from kqactors.records.reader_v2 import pack_v2_records
from kqactors.records.varint import encode_varint

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
TS = 1_700_000_000_000
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ENTRY_PACK = consumer_packing._ENTRY.pack

# Keys and values: null, empty, short, and long enough for 2- and 3-byte length varints.
payloads = st.one_of(
    st.none(),
    st.just(b""),
    st.binary(max_size=40),
    st.integers(64, 20_000).map(lambda n: bytes(range(256)) * (n // 256) + bytes(n % 256)),
)
header_values = st.one_of(st.none(), st.binary(max_size=12), st.integers(64, 300).map(lambda n: b"h" * n))
headers = st.lists(st.tuples(st.text(max_size=6), header_values), max_size=3)
deltas = st.one_of(st.integers(-64, 63), st.integers(-(2**20), 2**20), st.integers(-(2**50), 2**50))


# ---- pack_v2_records --------------------------------------------------------------------------------------


def encode_record(timestamp_delta: int, offset_delta: int, key, value, hdrs) -> bytes:
    """One v2 record with any deltas (build_batch only makes offset deltas 0, 1, 2...)."""
    def field(data):
        return encode_varint(-1) if data is None else encode_varint(len(data)) + data

    body = b"\0" + encode_varint(timestamp_delta) + encode_varint(offset_delta) + field(key) + field(value)
    body += encode_varint(len(hdrs))
    for name, header_value in hdrs:
        body += field(name.encode() if isinstance(name, str) else name) + field(header_value)
    return encode_varint(len(body)) + body


def run_pack(impl, data, pos, end, count, *, delta=0, base_offset=0, base_timestamp=TS, fixed_timestamp=-1,
             timestamp_type=1, leader_epoch=-1, min_offset=0):
    """(return value or exception type, index bytes) of one implementation (None = Python)."""
    index = bytearray(b"earlier entries")
    args = (data, pos, end, count, delta, base_offset, base_timestamp, fixed_timestamp, timestamp_type,
            leader_epoch, min_offset)
    try:
        if impl is None:
            result = pack_v2_records(index, ENTRY_PACK, *args)
        else:
            result = impl.pack_v2_records(index, *args)
    except Exception as exc:  # noqa: BLE001 - the type is what is compared
        result = type(exc)
    return result, bytes(index)


def assert_same_pack(native, *args, **kwargs):
    python = run_pack(None, *args, **kwargs)
    c = run_pack(native, *args, **kwargs)
    assert c == python
    return python[0]


records = st.lists(st.tuples(deltas, deltas, payloads, payloads, headers), min_size=1, max_size=12)


@FUZZ
@given(records, st.binary(max_size=5), st.binary(max_size=5), st.data())
def test_pack_v2_records_writes_the_same_index_as_python(native_records, rows, prefix, suffix, data) -> None:
    section = b"".join(encode_record(*row) for row in rows)
    buffer = prefix + section + suffix
    pos, end = len(prefix), len(prefix) + len(section)
    base_offset = data.draw(st.integers(0, 2**62))
    offsets = [base_offset + row[1] for row in rows]
    result = assert_same_pack(
        native_records, buffer, pos, end, len(rows),
        delta=data.draw(st.integers(-pos, 2**20)),
        base_offset=base_offset,
        base_timestamp=data.draw(st.integers(-1, 2**50)),
        fixed_timestamp=data.draw(st.sampled_from([-1, -1, TS])),
        timestamp_type=data.draw(st.integers(0, 2)),
        leader_epoch=data.draw(st.integers(INT32_MIN, INT32_MAX)),
        min_offset=data.draw(st.sampled_from([0, min(offsets), max(offsets), max(offsets) + 1, 2**62])),
    )  # fmt: skip
    assert result not in (CorruptRecordError, ValueError), "a valid section was rejected"


@FUZZ
@given(st.lists(st.tuples(st.integers(0, 2**41), payloads, payloads, headers), min_size=1, max_size=20),
       st.integers(0, 2**40), st.booleans(), st.data())
def test_pack_v2_records_on_batches_the_producer_builds(native_records, messages, base_offset, log_append,
                                                        data) -> None:
    messages = [(ts, key, value, hdrs or None) for ts, key, value, hdrs in messages]
    batch = bytes(build_batch(messages, base_offset=base_offset))
    fixed = max(m[0] for m in messages) if log_append else -1
    min_offset = base_offset + data.draw(st.integers(0, len(messages)))
    added, _last = assert_same_pack(native_records, batch, BATCH_HEADER_SIZE, len(batch), len(messages),
                                    base_offset=base_offset, base_timestamp=messages[0][0],
                                    fixed_timestamp=fixed, min_offset=min_offset)
    assert added == base_offset + len(messages) - min_offset


def valid_section() -> bytes:
    """Four records, small so that random mutations mostly hit structure (lengths, varints, headers)."""
    rows = [(0, 0, None, b"v", []), (5, 1, b"k", b"", [("h", b"x"), ("n", None)]),
            (-3, 2, b"", None, []), (70_000, 300, b"kk", b"w" * 70, [("é", b"")])]
    return b"".join(encode_record(*row) for row in rows)


def test_every_truncation_raises_corrupt_record_error_in_both(native_records) -> None:
    section = valid_section()
    for cut in range(len(section)):
        for count in (4, 5):
            assert assert_same_pack(native_records, section[:cut], 0, cut, count) is CorruptRecordError, cut
            # The buffer goes on past the end of the range: the range still ends the records.
            assert assert_same_pack(native_records, section, 0, cut, count) is CorruptRecordError, cut


@FUZZ
@given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=6),
       st.integers(0, 6), st.binary(max_size=8), st.data())
def test_mutated_sections_fail_alike(native_records, mutations, count_change, inserted, data) -> None:
    section = bytearray(valid_section())
    for where, value in mutations:
        section[where % len(section)] = value
    at = data.draw(st.integers(0, len(section)))
    section[at:at] = inserted
    buffer = bytes(section) + data.draw(st.binary(max_size=4))
    assert_same_pack(native_records, buffer, 0, len(section), 4 + count_change - 2,
                     min_offset=data.draw(st.integers(-2, 400)))


@FUZZ
@given(st.binary(max_size=200), st.integers(0, 8))
def test_random_bytes_fail_alike(native_records, section, count) -> None:
    assert_same_pack(native_records, section, 0, len(section), count)


def record_with(body: bytes) -> bytes:
    return encode_varint(len(body)) + body


@pytest.mark.parametrize(
    ("section", "count", "kwargs"),
    [
        pytest.param(b"\x80" * 11, 1, {}, id="record-length-varint-longer-than-10-bytes"),
        pytest.param(b"\xff" * 9 + b"\x02", 1, {}, id="record-length-varint-past-64-bits"),
        pytest.param(b"\x01" + b"\0" * 6, 1, {}, id="negative-record-length"),
        pytest.param(b"\x00" + b"\0" * 6, 1, {}, id="zero-record-length"),
        pytest.param(record_with(b"\0\0\0\0\0\0")[:-1], 1, {}, id="record-length-past-the-end"),
        pytest.param(record_with(b"\0" + b"\xff" * 9 + b"\x02" + b"\0\0\0\0"), 1, {},
                     id="timestamp-delta-past-64-bits"),
        pytest.param(record_with(b"\0\0" + b"\x80" * 10 + b"\0\0\0\0"), 1, {}, id="offset-delta-11-bytes"),
        pytest.param(record_with(b"\0\0\0\x03\0\0"), 1, {}, id="negative-key-length"),
        pytest.param(record_with(b"\0\0\0\x81\x00\0\0"), 1, {}, id="null-key-in-two-bytes"),
        pytest.param(record_with(b"\0\0\0\0\x05\0"), 1, {}, id="negative-value-length"),
        pytest.param(record_with(b"\0\0\0\x7e\0\0"), 1, {}, id="key-past-the-record"),
        pytest.param(record_with(b"\0\0\0\0\0\x01"), 1, {}, id="negative-header-count"),
        pytest.param(record_with(b"\0\0\0\0\0\x02\x01\x00"), 1, {}, id="null-header-key"),
        pytest.param(record_with(b"\0\0\0\0\0\x02\x02\xff\x00"), 1, {}, id="header-key-not-utf8"),
        pytest.param(record_with(b"\0\0\0\0\0\x02\x06\xed\xa0\x80\x00"), 1, {}, id="header-key-surrogate"),
        pytest.param(record_with(b"\0\0\0\0\0\x02\x00\x03"), 1, {}, id="header-value-length-minus-2"),
        pytest.param(record_with(b"\0\0\0\0\0\x02\x00\x10"), 1, {}, id="header-value-past-the-record"),
        pytest.param(record_with(b"\0\0\0\0\0\xfe\xff\xff\xff\x0f\x00\x01"), 1, {}, id="huge-header-count"),
        pytest.param(record_with(b"\0\0\0\0\0\0\0"), 1, {}, id="fields-shorter-than-the-record"),
        pytest.param(record_with(b"\0\0\0\0\0\0") + b"\0", 1, {}, id="bytes-after-the-last-record"),
        pytest.param(record_with(b"\0\0\0\0\0\0"), 2, {}, id="fewer-records-than-declared"),
        pytest.param(record_with(b"\0\0\x02\0\0\0"), 1, {"base_offset": INT64_MAX}, id="offset-past-int64"),
        pytest.param(record_with(b"\0\x02\0\0\0\0"), 1, {"base_timestamp": INT64_MAX},
                     id="timestamp-past-int64"),
        pytest.param(record_with(b"\0\0\0\0\0\0"), 1, {"delta": INT32_MAX}, id="position-past-int32"),
    ],
)
def test_malformed_records_raise_corrupt_record_error_in_both(native_records, section, count, kwargs) -> None:
    assert assert_same_pack(native_records, section, 0, len(section), count, **kwargs) is CorruptRecordError


@pytest.mark.parametrize(
    ("section", "kwargs", "expected"),
    [
        pytest.param(record_with(b"\0" + b"\xff" * 9 + b"\x01" + b"\0\0\0\0"), {"fixed_timestamp": 5}, (1, 0),
                     id="10-byte-timestamp-delta-ignored-under-log-append-time"),
        pytest.param(record_with(b"\0\0\x01\0\0\0"), {"base_offset": INT64_MIN, "min_offset": 0}, (0, -1),
                     id="offset-below-int64-is-filtered"),
        pytest.param(record_with(b"\0\0\x02\0\0\x80\x00"), {}, (1, 1), id="zero-header-count-in-two-bytes"),
        pytest.param(record_with(b"\0\0\0\x80\x00\0\0"), {}, (1, 0), id="key-length-in-two-bytes"),
    ],
)
def test_edge_cases_that_decode_alike(native_records, section, kwargs, expected) -> None:
    assert assert_same_pack(native_records, section, 0, len(section), 1, **kwargs) == expected


def test_a_range_outside_the_buffer_is_a_value_error_in_both(native_records) -> None:
    section = record_with(b"\0\0\0\0\0\0")
    for pos, end in ((-1, len(section)), (2, 1), (0, len(section) + 1)):
        assert assert_same_pack(native_records, section, pos, end, 1) is ValueError


def test_index_entry_layout_is_the_consumers(native_records) -> None:
    assert native_records.INDEX_ENTRY_FORMAT == consumer_packing._ENTRY.format
    assert native_records.INDEX_ENTRY_SIZE == consumer_packing._ENTRY.size


def test_message_batch_writer_runs_the_c_twin(native_records) -> None:
    assert consumer_packing._native_records is native_records
    good = bytes(build_batch([(TS + i, b"k", b"v" * i, [("h", b"x")] if i == 2 else None) for i in range(5)]))
    bad = good[: len(good) - 3]
    frames = []
    for impl in (None, native_records):
        with mock.patch.object(consumer_packing, "_native_records", impl):
            writer = consumer_packing.MessageBatchWriter()
            assert writer.add_v2_records(good, BATCH_HEADER_SIZE, len(good), 5, 0, TS, -1, 1, 0, 2) == 3
            with pytest.raises(CorruptRecordError):
                writer.add_v2_records(bad, BATCH_HEADER_SIZE, len(bad), 5, 0, TS, -1, 1, 0)
            frames.append((writer.getvalue(), writer.count, writer.last_offset))
    assert frames[0] == frames[1]


# ---- append_packed ----------------------------------------------------------------------------------------


timestamps = st.one_of(st.integers(0, 2**50), st.integers(INT64_MIN // 2, INT64_MAX // 2))
messages = st.lists(st.tuples(timestamps, payloads, payloads, st.one_of(st.none(), headers)), min_size=1,
                    max_size=15)


def builder_state(builder: RecordBatchBuilder) -> tuple:
    return bytes(builder._records), builder._count, builder._base_timestamp, builder._max_timestamp


def run_append(impl, ranges, start_count=0, earlier=None):
    """(return values or exception type, builder state) after appending ``ranges`` with one implementation."""
    builder = RecordBatchBuilder()
    if earlier is not None:  # a builder that already holds records
        builder._records += b"earlier"
        builder._base_timestamp, builder._max_timestamp = earlier
    builder._count = start_count
    results = []
    with mock.patch.object(batch_v2, "_native_records", impl):
        for frame, start, end in ranges:
            try:
                results.append(builder.append_packed(frame, start, end))
            except Exception as exc:  # noqa: BLE001 - the type is what is compared
                results.append(type(exc))
    return results, builder_state(builder)


def assert_same_append(native, *args, **kwargs):
    python = run_append(None, *args, **kwargs)
    assert run_append(native, *args, **kwargs) == python
    return python


@FUZZ
@given(messages, st.sampled_from([0, 1, 8191, 8192, 2**40]), st.one_of(st.none(), st.tuples(timestamps, timestamps)),
       st.data())
def test_append_packed_encodes_the_same_bytes_as_python(native_records, msgs, start_count, earlier, data):
    frame, count, _headers = pack_messages(msgs)
    split = data.draw(st.integers(0, count))
    _taken, middle, _size = scan_packed(frame, 0, split, 1 << 60, False)
    prefix = data.draw(st.binary(max_size=3))
    framed = prefix + frame + b"tail"
    ranges = [(framed, len(prefix), len(prefix) + middle), (framed, len(prefix) + middle, len(prefix) + len(frame))]
    results, state = assert_same_append(native_records, ranges, start_count, earlier)
    assert results == [split, count - split]
    assert state[1] == start_count + count


def packed_frame() -> bytes:
    frame, _count, _headers = pack_messages([
        (TS, b"key", b"v" * 300, None), (TS - 5, None, b"", [("h", b"x"), ("é", None)]), (TS + 9, b"", None, None),
    ])  # fmt: skip
    return frame


def test_every_truncated_frame_is_a_value_error_in_both(native_records) -> None:
    frame = packed_frame()
    boundaries = {scan_packed(frame, 0, n, 1 << 60, False)[1] for n in range(4)}
    for cut in range(len(frame)):
        for data in (frame, frame[:cut]):
            results, _state = assert_same_append(native_records, [(data, 0, cut)], earlier=(TS, TS))
            assert (results[0] is ValueError) == (cut not in boundaries), cut


@FUZZ
@given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=6), st.data())
def test_mutated_frames_fail_alike(native_records, mutations, data) -> None:
    frame = bytearray(packed_frame())
    for where, value in mutations:
        frame[where % len(frame)] = value
    end = data.draw(st.integers(0, len(frame)))
    assert_same_append(native_records, [(bytes(frame), 0, end)], earlier=data.draw(st.sampled_from([None, (0, 0)])))


def test_negative_lengths_are_null_and_timestamp_overflow_is_a_value_error(native_records) -> None:
    odd = ENTRY.pack(TS, -7, -100, 1) + HEADER.pack(1, -9) + b"n"
    (results, state) = assert_same_append(native_records, [(odd, 0, len(odd))])
    assert results == [1]
    assert state[0].endswith(b"\x01\x01\x02\x02n\x01")  # null key, null value, one header with a null value
    extremes, _count, _headers = pack_messages([(INT64_MIN, None, b"a", None), (INT64_MAX, None, b"b", None)])
    results, state = assert_same_append(native_records, [(extremes, 0, len(extremes))])
    assert results == [ValueError] and state == builder_state(RecordBatchBuilder())
    results, _state = assert_same_append(native_records, [(extremes, 0, len(extremes))], earlier=(1, 1))
    assert results == [ValueError]


def test_a_range_outside_the_frame_is_a_value_error_in_both(native_records) -> None:
    frame = packed_frame()
    for start, end in ((-1, len(frame)), (5, 4), (0, len(frame) + 1)):
        assert assert_same_append(native_records, [(frame, start, end)])[0] == [ValueError]


def test_the_builder_runs_the_c_twin(native_records) -> None:
    assert batch_v2._native_records is native_records


def test_kqactors_native_0_switches_off_every_native_path() -> None:
    code = ("import kqactors.native as n; from kqactors.records import batch_v2; "
            "from kqactors.core.consumer import packing; "
            "print(n.NATIVE, n.NATIVE_RECORDS, batch_v2._native_records, packing._native_records)")
    env = {**os.environ, "KQACTORS_NATIVE": "0"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["None"] * 4


# ---- references and memory -----------------------------------------------------------------------------------


def test_no_reference_or_memory_leaks(native_records) -> None:
    section = valid_section()
    bad_section = section[:-1]
    frame = packed_frame()
    bad_frame = frame[:-1]
    args = (0, 0, TS, -1, 1, 7, 0)

    def exercise(rounds: int) -> None:
        for _ in range(rounds):
            index = bytearray()
            native_records.pack_v2_records(index, section, 0, len(section), 4, *args)
            for data in (bad_section, section):
                try:
                    native_records.pack_v2_records(index, data, 0, len(data), 5, *args)
                except CorruptRecordError:
                    pass
            try:
                native_records.pack_v2_records(index, section, 0, len(section) + 1, 4, *args)
            except ValueError:
                pass
            records = bytearray()
            native_records.append_packed(records, frame, 0, len(frame), 0, None, -1)
            native_records.append_packed(records, frame, 0, 0, 3, None, -1)
            native_records.append_packed(records, frame, 0, len(frame), 3, TS, TS)
            try:
                native_records.append_packed(records, bad_frame, 0, len(bad_frame), 0, None, -1)
            except ValueError:
                pass

    watched = [section, bad_section, frame, bad_frame, CorruptRecordError, None, TS]
    exercise(50)  # warm up: the lazy import of CorruptRecordError, caches
    gc.collect()
    before = [sys.getrefcount(obj) for obj in watched]
    tracemalloc.start()
    try:
        exercise(20)
        gc.collect()
        baseline = tracemalloc.get_traced_memory()[0]
        exercise(2000)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - baseline
    finally:
        tracemalloc.stop()
    after = [sys.getrefcount(obj) for obj in watched]
    # None's count is shared with every thread an earlier test left running, so it is allowed a little drift; a
    # leak of one reference per call would move it by thousands over the 2000 rounds
    none_at = watched.index(None)
    assert abs(after.pop(none_at) - before.pop(none_at)) < 200
    assert after == before
    assert grown < 16 * 1024, f"{grown} bytes still allocated after 2000 rounds"
