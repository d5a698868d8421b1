"""Runs in: unit tests. Property tests: round trips, and malformed input only ever raises our error types."""

from __future__ import annotations

import struct

from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kqactors.records import (
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    CorruptRecordError,
    build_batch,
    decode_record_set,
    scan_record_set,
)
from kqactors.records import compression as comp

from .legacy_format import legacy_message

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

maybe_bytes = st.one_of(st.none(), st.binary(max_size=300))
headers = st.lists(st.tuples(st.text(max_size=10), maybe_bytes), max_size=3)
messages = st.lists(
    st.tuples(st.integers(0, 2**41), maybe_bytes, maybe_bytes, headers), min_size=1, max_size=30
)
codecs = st.sampled_from([NONE, GZIP, SNAPPY, LZ4, ZSTD])


@FUZZ
@given(messages, codecs, st.integers(0, 2**40))
def test_round_trip_property(msgs, codec, base_offset) -> None:
    [batch] = decode_record_set(bytes(build_batch(msgs, codec=codec, base_offset=base_offset)))
    expected = [(base_offset + i, ts, k, v, tuple(h)) for i, (ts, k, v, h) in enumerate(msgs)]
    assert batch.records == expected
    assert batch.max_timestamp == max(m[0] for m in msgs)


def _decode_everything(data: bytes, verify_crc: bool) -> None:
    try:
        scan_record_set(data)
        decode_record_set(data, verify_crc=verify_crc)
    except CorruptRecordError:
        pass  # CompressionError is a subclass; anything else propagates and fails the test


@FUZZ
@given(st.binary(max_size=400))
def test_random_bytes(data) -> None:
    _decode_everything(data, True)
    _decode_everything(data, False)


def _valid_samples():
    msgs = [(1000 + i, b"k%d" % i, b"value-%d" % i * 3, [("h", b"x")] if i % 2 else None) for i in range(6)]
    samples = [bytes(build_batch(msgs, codec=codec)) for codec in (NONE, GZIP, SNAPPY, LZ4, ZSTD)]
    inner = b"".join(legacy_message(i, 1, b"k", b"v%d" % i, timestamp=5) for i in range(3))
    samples.append(legacy_message(0, 0, b"key", b"value") + legacy_message(1, 1, None, b"v", timestamp=7))
    samples.append(legacy_message(2, 1, None, comp.compress(GZIP, inner), timestamp=5, attributes=GZIP))
    return samples


SAMPLES = _valid_samples()


@FUZZ
@given(
    st.sampled_from(range(len(SAMPLES))),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=6),
    st.integers(0, 10_000),
    st.booleans(),
)
def test_mutated_valid_batches(index, flips, cut, fix_crc) -> None:
    data = bytearray(SAMPLES[index])
    for position, byte in flips:
        data[position % len(data)] = byte
    data = data[: max(1, len(data) - cut % 80)] if cut % 3 == 0 else data
    if fix_crc and len(data) > 61 and data[16] == 2:
        struct.pack_into(">I", data, 17, crc32c(memoryview(data)[21:]))  # reach the record parser
    _decode_everything(bytes(data), True)
    _decode_everything(bytes(data), False)
