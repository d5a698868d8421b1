"""Runs in: unit tests. Legacy MessageSet v0/v1 decoding, hand-built and from kafka-python's encoder."""

from __future__ import annotations

import struct

import pytest

from kqactors.records import GZIP, LZ4, SNAPPY, CompressionError, CorruptRecordError, decode_record_set
from kqactors.records import compression as comp

from .legacy_format import legacy_message

TS = 1_600_000_000_000


def flat(record_set: bytes):
    return [r for b in decode_record_set(record_set) for r in b.records]


def test_uncompressed_v0_and_v1() -> None:
    data = (
        legacy_message(0, 0, None, b"v0 value")
        + legacy_message(1, 0, b"key", None)
        + legacy_message(2, 1, b"k", b"v1", timestamp=TS)
        + legacy_message(3, 1, b"k", b"lat", timestamp=TS + 9, attributes=0x08)
    )
    assert flat(data) == [
        (0, -1, None, b"v0 value", ()),
        (1, -1, b"key", None, ()),
        (2, TS, b"k", b"v1", ()),
        (3, TS + 9, b"k", b"lat", ()),
    ]
    assert [b.timestamp_type for b in decode_record_set(data)] == [-1, -1, 0, 1]


def _compress_inner(codec: int, inner: bytes, magic: int) -> bytes:
    if codec == SNAPPY:
        return comp.snappy_xerial_compress(inner)  # what Java clients wrote for legacy sets
    if codec == LZ4 and magic == 0:
        frame = bytearray(comp.compress(LZ4, inner))
        at = comp.lz4_frame_descriptor_end(bytes(frame))
        frame[at] = comp.lz4_header_checksum(bytes(frame), kafka_legacy_bug=True)
        return bytes(frame)
    return comp.compress(codec, inner)


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4])
def test_v1_compressed_wrapper_relative_offsets(codec: int) -> None:
    inner = b"".join(legacy_message(i, 1, b"k%d" % i, b"v%d" % i, timestamp=TS + i) for i in range(3))
    wrapper = legacy_message(
        102, 1, None, _compress_inner(codec, inner, 1), timestamp=TS + 2, attributes=codec
    )
    [batch] = decode_record_set(wrapper)
    assert batch.records == [(100 + i, TS + i, b"k%d" % i, b"v%d" % i, ()) for i in range(3)]
    assert (batch.base_offset, batch.last_offset, batch.record_count, batch.codec) == (100, 102, 3, codec)


def test_v1_wrapper_log_append_time_overrides_inner() -> None:
    inner = b"".join(legacy_message(i, 1, None, b"v", timestamp=TS + i) for i in range(2))
    wrapper = legacy_message(
        51, 1, None, comp.compress(GZIP, inner), timestamp=TS + 999, attributes=GZIP | 0x08
    )
    assert [r[:2] for r in flat(wrapper)] == [(50, TS + 999), (51, TS + 999)]


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4])
def test_v0_compressed_wrapper_absolute_offsets(codec: int) -> None:
    inner = b"".join(legacy_message(200 + i, 0, None, b"value %d" % i) for i in range(4))
    wrapper = legacy_message(203, 0, None, _compress_inner(codec, inner, 0), attributes=codec)
    assert flat(wrapper) == [(200 + i, -1, None, b"value %d" % i, ()) for i in range(4)]


def test_legacy_errors() -> None:
    good = bytearray(legacy_message(0, 1, b"k", b"v", timestamp=TS))
    good[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC-32 mismatch"):
        decode_record_set(bytes(good))
    assert decode_record_set(bytes(good), verify_crc=False)[0].records[0][3] == b"w"
    zstd_wrapper = legacy_message(0, 1, None, comp.compress(4, b"x"), timestamp=TS, attributes=4)
    with pytest.raises(CompressionError, match="not valid for magic 1"):
        decode_record_set(zstd_wrapper)
    nested = legacy_message(0, 1, None, comp.compress(GZIP, legacy_message(0, 1, None, b"x", attributes=GZIP)),
                            attributes=GZIP)  # fmt: skip
    with pytest.raises(CorruptRecordError, match="nested compressed"):
        decode_record_set(nested)
    bad_len = bytearray(legacy_message(0, 0, b"key", b"v"))
    struct.pack_into(">i", bad_len, 18, 1000)
    struct.pack_into(">I", bad_len, 12, __import__("zlib").crc32(bad_len[16:]))
    with pytest.raises(CorruptRecordError, match="key length 1000 out of bounds"):
        decode_record_set(bytes(bad_len))
    with pytest.raises(CorruptRecordError, match="null value"):
        decode_record_set(legacy_message(0, 0, None, None, attributes=GZIP))
    with pytest.raises(CompressionError, match="gzip decompression failed"):
        decode_record_set(legacy_message(0, 0, None, b"not gzip", attributes=GZIP))


# ------------------------------------------------------------------ cross-check with kafka-python's encoder

KAFKA_PYTHON_CASES = [(0, 0), (0, GZIP), (0, SNAPPY), (1, 0), (1, GZIP), (1, SNAPPY), (1, LZ4)]


@pytest.mark.parametrize("magic, codec", KAFKA_PYTHON_CASES)
def test_decodes_kafka_python_legacy_builder(magic: int, codec: int) -> None:
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
    values = [(b"key %d" % i if i % 3 else None, b"value %d" % i * 10 if i % 4 else None) for i in range(10)]
    for i, (key, value) in enumerate(values):
        builder.append(i, TS + i, key, value)
    data = bytearray(builder.build())
    if codec and magic == 1:
        # A producer leaves the wrapper offset at 0; a broker stores the last inner offset there and the
        # inner offsets (0..9) are relative to it.
        struct.pack_into(">q", data, 0, 1000 + 9)
        expected_offsets = list(range(1000, 1010))
    else:
        expected_offsets = list(range(10))  # magic 0 inner offsets are absolute
    records = flat(bytes(data))
    assert [r[0] for r in records] == expected_offsets
    assert [(r[2], r[3]) for r in records] == values
    assert [r[1] for r in records] == ([-1] * 10 if magic == 0 else [TS + i for i in range(10)])
