"""Runs in: unit tests. Varint primitives and the compression codec table."""

from __future__ import annotations

import lz4.frame
import pytest

from kqactors.records import compression as comp
from kqactors.records.errors import CompressionError, CorruptRecordError
from kqactors.records.varint import decode_varint, encode_varint, encode_varint_slow, varint_size

PAYLOAD = b"".join(b"record %d with some repeated text; " % i for i in range(3000))


@pytest.mark.parametrize(
    "value, encoded",
    [
        (0, b"\x00"),
        (-1, b"\x01"),
        (1, b"\x02"),
        (63, b"\x7e"),
        (-64, b"\x7f"),
        (64, b"\x80\x01"),
        (300, b"\xd8\x04"),
    ],
)
def test_varint_known_encodings(value: int, encoded: bytes) -> None:
    assert encode_varint(value) == encoded
    assert decode_varint(encoded, 0) == (value, len(encoded))


@pytest.mark.parametrize("value", [0, 8191, 8192, -2, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63)])
def test_varint_round_trip_edges(value: int) -> None:
    encoded = encode_varint(value)
    assert encoded == encode_varint_slow(value)
    assert len(encoded) == varint_size(value)
    assert decode_varint(b"\xaa" + encoded, 1) == (value, 1 + len(encoded))


def test_varint_errors() -> None:
    with pytest.raises(CorruptRecordError, match="truncated"):
        decode_varint(b"\x80\x80", 0)
    with pytest.raises(CorruptRecordError, match="longer than 10"):
        decode_varint(b"\xff" * 11, 0)
    with pytest.raises(ValueError):
        encode_varint(2**63)


@pytest.mark.parametrize("codec", [comp.GZIP, comp.SNAPPY, comp.LZ4, comp.ZSTD])
@pytest.mark.parametrize("level", [-1, 0, 1, 9, 12])
def test_compress_round_trip_every_codec_and_level(codec: int, level: int) -> None:
    compressed = comp.compress(codec, PAYLOAD, level)
    if not (codec == comp.GZIP and level == 0):  # gzip level 0 stores without compressing
        assert len(compressed) < len(PAYLOAD) // 3
    assert comp.decompress(codec, compressed) == PAYLOAD
    assert comp.decompress(codec, memoryview(compressed)) == PAYLOAD


def test_levels_follow_librdkafka() -> None:
    assert comp.effective_level(comp.GZIP, -1) == 6
    assert comp.effective_level(comp.GZIP, 12) == 9
    assert comp.effective_level(comp.LZ4, -1) == 0
    assert comp.effective_level(comp.ZSTD, -1) == 3
    assert comp.effective_level(comp.SNAPPY, 5) == 0
    assert comp.compress(comp.GZIP, PAYLOAD, 1) != comp.compress(comp.GZIP, PAYLOAD, 9)
    with pytest.raises(ValueError, match="compression.level"):
        comp.effective_level(comp.GZIP, -2)
    with pytest.raises(CompressionError, match="unknown compression codec id 5"):
        comp.effective_level(5, -1)


def test_codec_names() -> None:
    assert [comp.codec_id(n) for n in ("none", "GZIP", "snappy", "lz4", "zstd")] == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="unknown compression codec 'brotli'"):
        comp.codec_id("brotli")


def test_gzip_output_is_gzip_container_and_multi_member_decodes() -> None:
    compressed = comp.compress(comp.GZIP, PAYLOAD)
    assert compressed[:2] == b"\x1f\x8b"
    assert comp.decompress(comp.GZIP, compressed + compressed) == PAYLOAD + PAYLOAD


def test_snappy_writes_raw_and_reads_xerial() -> None:
    raw = comp.compress(comp.SNAPPY, PAYLOAD)
    assert not raw.startswith(comp.XERIAL_MAGIC)
    framed = comp.snappy_xerial_compress(PAYLOAD, block_size=4096)
    assert framed.startswith(comp.XERIAL_MAGIC)
    assert comp.decompress(comp.SNAPPY, framed) == PAYLOAD


def test_snappy_reads_kafka_python_xerial() -> None:
    from kafka.codec import snappy_encode

    framed = snappy_encode(PAYLOAD, xerial_compatible=True)
    assert bytes(framed[:8]) == comp.XERIAL_MAGIC
    assert comp.decompress(comp.SNAPPY, framed) == PAYLOAD


def test_truncated_xerial_is_a_compression_error() -> None:
    framed = comp.snappy_xerial_compress(PAYLOAD)
    with pytest.raises(CompressionError, match="overruns"):
        comp.decompress(comp.SNAPPY, framed[:-10])


def test_lz4_frame_subset_and_header_checksum() -> None:
    frame = comp.compress(comp.LZ4, PAYLOAD)
    flags = frame[4]
    assert flags & 0x20  # independent blocks
    assert not flags & 0x08  # no content size
    checksum_at = comp.lz4_frame_descriptor_end(frame)
    assert frame[checksum_at] == comp.lz4_header_checksum(frame)
    with_size = lz4.frame.compress(PAYLOAD, store_size=True)
    at = comp.lz4_frame_descriptor_end(with_size)
    assert with_size[at] == comp.lz4_header_checksum(with_size)


def old_kafka_lz4(payload: bytes) -> bytes:
    """An lz4 frame as 0.8/0.9-era writers produced it: header checksum hashed over the magic too."""
    frame = bytearray(comp.compress(comp.LZ4, payload))
    frame[comp.lz4_frame_descriptor_end(bytes(frame))] = comp.lz4_header_checksum(
        bytes(frame), kafka_legacy_bug=True
    )
    return bytes(frame)


def test_lz4_legacy_header_checksum_repaired() -> None:
    old = old_kafka_lz4(PAYLOAD)
    assert old != comp.compress(comp.LZ4, PAYLOAD)
    with pytest.raises(CompressionError):
        comp.decompress(comp.LZ4, old)
    assert comp.lz4_decompress_legacy(old) == PAYLOAD
    assert comp.lz4_decompress_legacy(comp.compress(comp.LZ4, PAYLOAD)) == PAYLOAD


@pytest.mark.parametrize("codec", [comp.GZIP, comp.SNAPPY, comp.LZ4, comp.ZSTD])
def test_garbage_and_truncation_raise_compression_error(codec: int) -> None:
    compressed = comp.compress(codec, PAYLOAD)
    for bad in (b"\x00garbage" * 10, compressed[: len(compressed) // 2]):
        with pytest.raises(CompressionError) as info:
            comp.decompress(codec, bad)
        assert info.value.code == -198
    with pytest.raises(CompressionError, match="unknown compression codec id 7"):
        comp.decompress(7, compressed)


def test_zstd_frame_without_content_size() -> None:
    import zstandard

    stream = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    frame = stream.compress(PAYLOAD) + stream.flush()
    assert comp.decompress(comp.ZSTD, frame) == PAYLOAD


@pytest.mark.parametrize("size", [10, 1 << 20, (comp._ZSTD_GUESS_BYTES * 3) // 2])
def test_zstd_without_content_size_below_and_beyond_the_first_guess(size: int) -> None:
    """librdkafka's frames omit the content size: one call into a guessed output serves them, and an output
    beyond the guess still comes out whole (through the bounded stream)."""
    import zstandard

    payload = (PAYLOAD * (size // len(PAYLOAD) + 1))[:size]
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(payload)
    assert zstandard.frame_content_size(frame) == -1
    assert comp.decompress(comp.ZSTD, frame) == payload
    with pytest.raises(CompressionError) as info:
        comp.decompress(comp.ZSTD, frame[:-3])
    assert info.value.code == -198


def test_zstd_without_content_size_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A frame writing more than MAX_DECOMPRESSED_BYTES is refused, whether the guessed output or the stream
    meets the bound first."""
    import zstandard

    frame = zstandard.ZstdCompressor(write_content_size=False).compress(bytes(3 << 20))
    monkeypatch.setattr(comp, "MAX_DECOMPRESSED_BYTES", 1 << 20)  # under the guess: the guess is capped
    with pytest.raises(CompressionError, match="zstd"):
        comp.decompress(comp.ZSTD, frame)
    monkeypatch.setattr(comp, "MAX_DECOMPRESSED_BYTES", (5 << 20) // 2)  # over the guess, under the output
    with pytest.raises(CompressionError, match="zstd"):
        comp.decompress(comp.ZSTD, frame)


def test_the_small_value_table_is_the_slow_encoding() -> None:
    """The table encoders use for -1..SMALL_LIMIT-1 (built arithmetically at import) equals the general encoder."""
    from kqactors.records.varint import SMALL_LIMIT, small_varint_table

    assert small_varint_table() == [encode_varint_slow(n) for n in range(-1, SMALL_LIMIT)]
