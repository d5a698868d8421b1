"""Runs in: unit tests. The toppar's fused v2 path (records section copied once, entries pointing into it)
must give the app exactly what the reference record decoder reads, for any record shape and codec, and must
turn a malformed batch into one error event without leaking part of it."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from kqactors.core.consumer.decoder import FetchedSlice, SliceDecoder
from kqactors.core.consumer.packing import MessageBatch, MessageBatchWriter
from kqactors.core.consumer.settings import FetchSettings
from kqactors.errors import KafkaError
from kqactors.records import LZ4, NONE, ZSTD, build_batch, decode_record_set
from kqactors.records.batch_v2 import BATCH_HEADER_SIZE, LOG_APPEND_TIME

TS = 1_700_000_000_000
maybe_bytes = st.one_of(st.none(), st.binary(max_size=300))
header_lists = st.lists(st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=20))), max_size=3)
record = st.tuples(st.integers(-5_000, 5_000_000), maybe_bytes, maybe_bytes, header_lists)


def decode_all(records: bytes, fetch_offset: int) -> tuple[list, int]:
    decoded = SliceDecoder(FetchSettings(check_crcs=True)).decode(
        FetchedSlice("t", 1, 0, fetch_offset, fetch_offset, records))
    batch = MessageBatch("t", 1, decoded.frame)
    messages, _count, used = batch.take()
    return messages, used - decoded.nbytes


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(record, min_size=1, max_size=12), min_size=1, max_size=3),
       st.sampled_from([NONE, ZSTD, LZ4]), st.booleans(), st.data())
def test_fused_path_matches_the_reference_decoder(batches, codec, log_append, data) -> None:
    raw = b""
    base = 0
    for rows in batches:
        messages = [(TS + delta, key, value, [(n, v) for n, v in hdrs] or None) for delta, key, value, hdrs in rows]
        options = {"timestamp_type": LOG_APPEND_TIME} if log_append else {}
        raw += bytes(build_batch(messages, base_offset=base, codec=codec, **options))
        base += len(rows) + 3  # gaps between batches, as compaction leaves them
    fetch_offset = data.draw(st.integers(0, base))
    expected = [rec for batch in decode_record_set(raw) for rec in batch.records if rec[0] >= fetch_offset]
    expected_ts_type = [batch.timestamp_type + 1 for batch in decode_record_set(raw)
                        for rec in batch.records if rec[0] >= fetch_offset]
    got, unpaid = decode_all(raw, fetch_offset)
    assert unpaid == 0
    assert [(m.offset(), m.timestamp()[1], m.key(), m.value(), m.headers() or ()) for m in got] == \
        [(o, ts, k, v, list(h) if h else ()) for o, ts, k, v, h in expected]
    assert [m.timestamp()[0] for m in got] == expected_ts_type
    assert all(m.error() is None for m in got)


def test_a_malformed_record_becomes_one_error_event_and_the_next_batch_still_decodes() -> None:
    good = bytes(build_batch([(TS, None, b"x" * 10, None)] * 4, base_offset=0))
    bad = bytearray(build_batch([(TS, None, b"y" * 10, None)] * 4, base_offset=4))
    bad[BATCH_HEADER_SIZE + 6] = 0x7E  # the first record's value length now runs past the batch
    after = bytes(build_batch([(TS, None, b"z", None)], base_offset=8))
    got, _ = decode_all(good + bytes(bad) + after, 0)
    assert [m.offset() for m in got] == [0, 1, 2, 3, 4, 8]
    assert got[4].error() == KafkaError._BAD_MSG
    assert [m.value() for m in got if m.error() is None] == [b"x" * 10] * 4 + [b"z"]


def test_writer_is_unchanged_when_a_section_is_malformed() -> None:
    writer = MessageBatchWriter()
    writer.add_records([(0, TS, None, b"a", ())], 1, -1)
    before = writer.getvalue()
    section = bytes(build_batch([(TS, None, b"v", None)] * 2))[BATCH_HEADER_SIZE:]
    truncated = section[:-1]
    try:
        writer.add_v2_records(truncated, 0, len(truncated), 2, 1, TS, -1, 1, -1)
    except Exception as exc:  # noqa: BLE001 - the type is checked below
        assert type(exc).__name__ in ("CorruptRecordError", "IndexError")
    else:
        raise AssertionError("a truncated records section was accepted")
    assert writer.getvalue() == before and writer.count == 1


def test_partial_takes_pay_exactly_the_frame() -> None:
    writer = MessageBatchWriter()
    section = bytes(build_batch([(TS + i, b"k", b"v" * i, None) for i in range(50)]))[BATCH_HEADER_SIZE:]
    assert writer.add_v2_records(section, 0, len(section), 50, 0, TS, -1, 1, 0, min_offset=5) == 45
    frame = writer.getvalue()
    batch = MessageBatch("t", 0, frame)
    total = 0
    offsets = []
    while len(batch):
        messages, _count, used = batch.take(7)
        total += used
        offsets += [m.offset() for m in messages]
    assert offsets == list(range(5, 50)) and total == len(frame)
    assert struct.unpack_from("<I", frame)[0] == 45
