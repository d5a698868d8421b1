"""Runs in: unit tests. RecordBatch v2 building, decoding, control batches and re-stamping."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c

from kqactors.records import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    GZIP,
    LOG_APPEND_TIME,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    CompressionError,
    CorruptRecordError,
    RecordBatchBuilder,
    batch_v2,
    build_batch,
    build_control_batch,
    decode_record_set,
    iter_records,
    restamp,
)

ALL_CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]
TS = 1_700_000_000_000

MIXED = [
    (TS, b"key-0", b"value-0", None),
    (TS + 5, None, b"null key", None),
    (TS + 3, b"null value", None, None),
    (TS - 1000, None, None, [("h1", b"v1"), ("h\u00e9", None), ("", b"")]),  # negative delta, unicode key
    (TS + 86_400_000, b"", b"", []),  # empty (not null) key and value
    (TS + 7, b"k" * 300, b"v" * 20_000, [("big", b"x" * 9000)]),  # multi-byte varints everywhere
]


def expected_records(messages, base_offset=0):
    out = []
    for delta, (ts, key, value, headers) in enumerate(messages):
        out.append((base_offset + delta, ts, key, value, tuple(headers or ())))
    return out


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_round_trip_mixed_records(codec: int) -> None:
    batch = build_batch(MIXED, codec=codec, base_offset=42)
    [decoded] = decode_record_set(bytes(batch))
    assert decoded.records == expected_records(MIXED, 42)
    assert decoded.codec == codec
    assert (decoded.base_offset, decoded.last_offset, decoded.record_count) == (42, 47, 6)
    assert decoded.base_timestamp == TS
    assert decoded.max_timestamp == TS + 86_400_000
    assert decoded.timestamp_type == 0
    assert not decoded.is_transactional and not decoded.is_control
    assert decoded.size == len(batch)


@pytest.mark.parametrize("codec", [NONE, LZ4])
def test_many_records_large_offset_deltas(codec: int) -> None:
    messages = [(TS + i, str(i).encode(), b"x" * (i % 200), None) for i in range(20_000)]
    [decoded] = decode_record_set(build_batch(messages, codec=codec))
    assert decoded.records == expected_records(messages)


def test_golden_bytes_single_record() -> None:
    """One record written by hand from the format description must match the builder byte for byte."""
    batch = build_batch([(1000, b"k", b"val", [("h", b"x")])], base_offset=7, producer_id=9, producer_epoch=1,
                        base_sequence=3, partition_leader_epoch=2)  # fmt: skip
    record_body = b"\x00" + b"\x00" + b"\x00" + b"\x02k" + b"\x06val" + b"\x02" + b"\x02h" + b"\x02x"
    records = bytes([len(record_body) * 2]) + record_body
    after_crc = struct.pack(">hiqqqhii", 0, 0, 1000, 1000, 9, 1, 3, 1) + records
    head = struct.pack(">qiib", 7, 4 + 1 + 4 + len(after_crc), 2, 2)
    assert bytes(batch) == head + struct.pack(">I", crc32c(after_crc)) + after_crc


def test_log_append_time_uses_max_timestamp() -> None:
    builder = RecordBatchBuilder(timestamp_type=LOG_APPEND_TIME)
    builder.append_many([(TS, b"a", b"1", None), (TS + 50, b"b", b"2", None), (TS + 20, b"c", b"3", None)])
    [decoded] = decode_record_set(builder.build())
    assert decoded.timestamp_type == 1
    assert [r[1] for r in decoded.records] == [TS + 50] * 3


def test_append_without_timestamp_uses_now() -> None:
    builder = RecordBatchBuilder()
    before = batch_v2.now_ms()
    assert builder.append(None, b"k", b"v") == 0
    assert builder.append(TS, b"k2", b"v2", [("a", b"b")]) == 1
    assert len(builder) == 2
    [decoded] = decode_record_set(builder.build())
    assert before <= decoded.records[0][1] <= batch_v2.now_ms()
    assert decoded.records[1][1:] == (TS, b"k2", b"v2", (("a", b"b"),))
    many = RecordBatchBuilder()
    many.append_many([(None, b"a", b"1", None), (TS, b"b", b"2", None), (None, b"c", b"3", None)])
    stamps = [r[1] for r in decode_record_set(many.build())[0].records]
    assert stamps[0] == stamps[2] >= before and stamps[1] == TS


def test_idempotent_and_transactional_fields() -> None:
    batch = build_batch(
        MIXED[:2], producer_id=123456789, producer_epoch=7, base_sequence=1000, transactional=True
    )
    [decoded] = decode_record_set(batch)
    assert (decoded.producer_id, decoded.producer_epoch, decoded.base_sequence) == (123456789, 7, 1000)
    assert decoded.is_transactional and not decoded.is_control


@pytest.mark.parametrize("commit, marker", [(True, CONTROL_COMMIT), (False, CONTROL_ABORT)])
def test_control_batches(commit: bool, marker: int) -> None:
    control = build_control_batch(commit, producer_id=55, producer_epoch=2, timestamp=TS, base_offset=10,
                                  coordinator_epoch=4)  # fmt: skip
    data = build_batch([(TS, b"k", b"v", None)], base_offset=9, producer_id=55, transactional=True)
    record_set = bytes(data + control)
    batches = decode_record_set(record_set)
    assert [b.is_control for b in batches] == [False, True]
    assert batches[1].is_transactional
    assert batches[1].control_type() == marker
    assert batches[1].records[0][2:4] == (struct.pack(">hh", 0, marker), struct.pack(">hi", 0, 4))
    assert batches[0].control_type() is None
    assert [r[0] for r in iter_records(record_set)] == [9]
    assert len(decode_record_set(record_set, skip_control=True)) == 1


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_restamp_keeps_payload_and_fixes_crc(codec: int, monkeypatch: pytest.MonkeyPatch) -> None:
    messages = [(TS + i, b"k%d" % i, b"payload %d " % i * 20, None) for i in range(50)]
    original = bytes(build_batch(messages, codec=codec))
    monkeypatch.setattr(batch_v2, "compress", lambda *a: pytest.fail("restamp must not recompress"))
    stamped = restamp(original, 987654321, 3, 77, base_offset=500, transactional=True)
    assert stamped[61:] == original[61:]  # records section byte-identical
    assert stamped[17:21] != original[17:21]  # CRC changed
    [decoded] = decode_record_set(bytes(stamped))  # verifies the CRC
    assert (decoded.producer_id, decoded.producer_epoch, decoded.base_sequence) == (987654321, 3, 77)
    assert decoded.is_transactional and decoded.base_offset == 500 and decoded.codec == codec
    assert decoded.records == expected_records(messages, 500)
    from aiokafka.record.default_records import DefaultRecordBatch

    assert DefaultRecordBatch(bytes(stamped)).validate_crc()


def test_restamp_in_place_and_errors() -> None:
    batch = build_batch(MIXED[:1])
    same = restamp(batch, 1, 0, 0)
    assert same is batch
    from_view = restamp(memoryview(bytes(batch)), 2, 0, 0)
    assert decode_record_set(from_view)[0].producer_id == 2
    cleared = restamp(bytes(restamp(batch, 1, 0, 0, transactional=True)), 1, 0, 0, transactional=False)
    assert not decode_record_set(cleared)[0].is_transactional
    with pytest.raises(ValueError, match="too short"):
        restamp(batch[:30], 1, 0, 0)
    legacy_like = bytearray(batch)
    legacy_like[16] = 1
    with pytest.raises(ValueError, match="magic 2"):
        restamp(legacy_like, 1, 0, 0)


def test_builder_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="empty"):
        RecordBatchBuilder().build()
    with pytest.raises(CompressionError, match="codec id 9"):
        RecordBatchBuilder(codec=9)
    with pytest.raises(ValueError, match="compression.level"):
        RecordBatchBuilder(codec=GZIP, level=-5)
    with pytest.raises(TypeError):
        build_batch([(TS, None, "a str value", None)])


def _refresh_crc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, 17, crc32c(memoryview(batch)[21:]))
    return bytes(batch)


def test_bad_crc_is_reported() -> None:
    batch = build_batch(MIXED)
    batch[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC32C mismatch") as info:
        decode_record_set(bytes(batch))
    assert info.value.code == -199 and info.value.offset == 0
    kafka_error = info.value.to_kafka_error()
    assert kafka_error.code() == -199 and "CRC32C mismatch" in kafka_error.str()
    assert decode_record_set(bytes(batch), verify_crc=False)[0].records[-1][4][0][1][-1] == ord("x") ^ 0xFF


def test_unknown_codec_is_a_compression_error() -> None:
    batch = build_batch(MIXED)
    batch[22] = (batch[22] & ~0x07) | 6
    with pytest.raises(CompressionError, match="unknown compression codec id 6") as info:
        decode_record_set(_refresh_crc(batch))
    assert info.value.code == -198
    assert info.value.to_kafka_error().name() == "_BAD_COMPRESSION"


def test_corrupt_compressed_payload() -> None:
    batch = build_batch(MIXED, codec=ZSTD)
    batch[70:80] = b"\x00" * 10
    with pytest.raises(CompressionError, match="zstd decompression failed"):
        decode_record_set(_refresh_crc(batch))


def test_varint_overflow_in_record() -> None:
    batch = build_batch([(TS, b"k", b"v", None)])
    batch[61 + 3 : 61 + 4] = b"\xff" * 11  # replace the offset delta with an endless varint
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    with pytest.raises(CorruptRecordError, match="varint"):
        decode_record_set(_refresh_crc(batch))


def test_record_count_mismatch() -> None:
    batch = build_batch(MIXED[:2])
    struct.pack_into(">i", batch, 57, 3)
    with pytest.raises(CorruptRecordError, match="declares 3 records"):
        decode_record_set(_refresh_crc(batch))
    struct.pack_into(">i", batch, 57, 1)
    with pytest.raises(CorruptRecordError, match="unexpected bytes"):
        decode_record_set(_refresh_crc(batch))


def test_bad_magic() -> None:
    batch = build_batch(MIXED[:1])
    batch[16] = 3
    with pytest.raises(CorruptRecordError, match="unknown magic byte 3"):
        decode_record_set(bytes(batch))
