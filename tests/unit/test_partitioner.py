"""Unit tests for kqactors.partitioner: hash vectors, null/empty key rules, sticky partitioning, custom."""

from __future__ import annotations

import random
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.clock import FakeClock

from kqactors.errors import KafkaError, KafkaException
from kqactors.partitioner import PARTITIONER_NAMES, Partitioner, StickyPartition, fnv1a, murmur2


def _reference_murmur2(data: bytes) -> int:
    """Straightforward transcription of the Java algorithm (masking every step), to check the fast one."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    h = (0x9747B28C ^ len(data)) & mask
    n4 = len(data) // 4
    for i in range(n4):
        k = int.from_bytes(data[4 * i:4 * i + 4], "little")
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = (h * m) & mask
        h ^= k
    rest = data[4 * n4:]
    if len(rest) >= 3:
        h ^= rest[2] << 16
    if len(rest) >= 2:
        h ^= rest[1] << 8
    if rest:
        h ^= rest[0]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    return h ^ (h >> 15)


JAVA_MURMUR2 = {  # Kafka's Utils.murmur2 on these byte strings (signed int32)
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"": 275646681,
}


@pytest.mark.parametrize("data,expected", list(JAVA_MURMUR2.items()))
def test_murmur2_known_java_vectors(data, expected):
    assert murmur2(data) == expected & 0xFFFFFFFF
    assert _reference_murmur2(data) == expected & 0xFFFFFFFF


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_murmur2_fast_path_equals_reference(data):
    assert murmur2(data) == _reference_murmur2(data)


def test_fnv1a_is_absolute_value_of_signed_hash():
    assert fnv1a(b"") == 2128831035  # |int32(0x811C9DC5)|
    for data in (b"a", b"foobar", bytes(range(50))):
        h = 0x811C9DC5
        for byte in data:
            h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
        signed = h - (1 << 32) if h & 0x80000000 else h
        assert fnv1a(data) == abs(signed)


@pytest.mark.parametrize("name", ["consistent", "consistent_random"])
def test_consistent_is_crc32_mod_n(name):
    part = Partitioner(name)
    for key in (b"a", b"hello", b"\x00\xff" * 9):
        for n in (1, 3, 10, 128):
            assert part("t", key, n) == zlib.crc32(key) % n


def test_same_key_same_partition_and_str_keys_are_utf8():
    for name in ("consistent", "murmur2", "fnv1a", "murmur2_random", "fnv1a_random", "consistent_random"):
        part = Partitioner(name)
        assert part("t", "héllo", 17) == part("t", "héllo".encode(), 17) == part("t", bytearray("héllo".encode()), 17)


def test_hash_cache_gives_same_answers():
    part = Partitioner("murmur2")
    keys = [random.Random(1).randbytes(12) for _ in range(50)]
    first = [part("t", k, 13) for k in keys]
    again = [part("t", k, 13) for k in keys]  # cache hits
    assert first == again == [(murmur2(k) & 0x7FFFFFFF) % 13 for k in keys]


def test_non_random_partitioners_map_null_key_to_fixed_partition():
    assert Partitioner("consistent")("t", None, 7) == 0  # crc32 of nothing is 0
    assert Partitioner("murmur2")("t", None, 7) == (murmur2(b"") & 0x7FFFFFFF) % 7
    assert Partitioner("fnv1a")("t", None, 7) == fnv1a(b"") % 7


def test_random_variants_spread_null_keys_when_not_sticky():
    for name in ("random", "consistent_random", "murmur2_random", "fnv1a_random"):
        part = Partitioner(name, sticky_linger_ms=0, rng=random.Random(5))
        seen = {part("t", None, 8) for _ in range(400)}
        assert seen == set(range(8)), name


def test_empty_key_rules():
    # consistent_random: empty key is random; murmur2_random / fnv1a_random: empty key is hashed.
    part = Partitioner("consistent_random", sticky_linger_ms=0, rng=random.Random(1))
    assert len({part("t", b"", 8) for _ in range(200)}) > 1
    for name, expected in (("murmur2_random", (murmur2(b"") & 0x7FFFFFFF) % 9), ("fnv1a_random", fnv1a(b"") % 9)):
        part = Partitioner(name, sticky_linger_ms=0)
        assert {part("t", b"", 9) for _ in range(50)} == {expected}


def test_random_prefers_available_partitions():
    part = Partitioner("random", sticky_linger_ms=0, rng=random.Random(3))
    assert {part("t", b"key", 10, [2, 7]) for _ in range(200)} == {2, 7}


def test_sticky_partition_sticks_until_linger_expires():
    clock = FakeClock()
    part = Partitioner("consistent_random", sticky_linger_ms=50, rng=random.Random(11), clock=clock)
    first = part("t", None, 1000)
    assert all(part("t", None, 1000) == first for _ in range(100))
    clock.now += 0.049
    assert part("t", None, 1000) == first
    choices = set()
    for _ in range(20):
        clock.now += 0.05
        choices.add(part("t", None, 1000))
    assert len(choices) > 1  # a new random partition after each linger period


def test_sticky_is_per_topic_and_keyed_messages_are_unaffected():
    clock = FakeClock()
    part = Partitioner("murmur2_random", sticky_linger_ms=1000, rng=random.Random(2), clock=clock)
    a = {part("a", None, 500) for _ in range(50)}
    b = {part("b", None, 500) for _ in range(50)}
    assert len(a) == 1 and len(b) == 1
    assert part("a", b"k1", 500) == (murmur2(b"k1") & 0x7FFFFFFF) % 500


def test_sticky_moves_off_unavailable_partition():
    clock = FakeClock()
    sticky = StickyPartition(10_000, random.Random(4), clock)
    current = sticky.partition(10)
    others = [p for p in range(10) if p != current]
    assert sticky.partition(10, others) in others
    assert sticky.current in others


def test_sticky_applies_only_to_null_keys_for_random_partitioner():
    clock = FakeClock()
    part = Partitioner("random", sticky_linger_ms=10_000, rng=random.Random(9), clock=clock)
    assert len({part("t", None, 50) for _ in range(100)}) == 1
    assert len({part("t", b"k", 50) for _ in range(100)}) > 1
    assert len({part("t", b"", 50) for _ in range(100)}) > 1


def test_custom_partitioner_callable():
    calls = []

    def by_length(key, partition_count, available):
        calls.append((key, partition_count, available))
        return (len(key) if key else 0) % partition_count

    part = Partitioner(by_length, sticky_linger_ms=100)
    assert part("t", b"abcd", 3, [0, 1, 2]) == 1
    assert part("t", None, 3) == 0
    assert calls == [(b"abcd", 3, [0, 1, 2]), (None, 3, None)]


@pytest.mark.parametrize("result", [5, -1, "1", None, True])
def test_custom_partitioner_bad_result_is_unknown_partition(result):
    part = Partitioner(lambda key, count, available: result)
    with pytest.raises(KafkaException) as info:
        part("t", b"k", 5)
    assert info.value.args[0].code() == KafkaError._UNKNOWN_PARTITION


def test_bad_inputs():
    with pytest.raises(KafkaException) as info:
        Partitioner("bogus")
    assert info.value.args[0].code() == KafkaError._INVALID_ARG and "bogus" in info.value.args[0].str()
    with pytest.raises(KafkaException):
        Partitioner()("t", b"k", 0)
    with pytest.raises(TypeError):
        Partitioner()("t", 12, 3)
    with pytest.raises(ValueError):
        Partitioner("random", sticky_linger_ms=-1)


def test_all_names_construct():
    for name in PARTITIONER_NAMES:
        assert 0 <= Partitioner(name)("t", b"x", 4) < 4


def test_null_key_sticky_ms_says_when_a_caller_may_cache_the_null_key_choice():
    assert Partitioner("consistent_random", sticky_linger_ms=25).null_key_sticky_ms == 25
    assert Partitioner("murmur2_random", sticky_linger_ms=25).null_key_sticky_ms == 25
    assert Partitioner("consistent_random", sticky_linger_ms=0).null_key_sticky_ms == 0
    # Null keys hashed (consistent, murmur2) or handed to a custom partitioner: nothing to cache.
    assert Partitioner("consistent", sticky_linger_ms=25).null_key_sticky_ms == 0
    assert Partitioner("murmur2", sticky_linger_ms=25).null_key_sticky_ms == 0
    assert Partitioner(lambda key, count, available: 0, sticky_linger_ms=25).null_key_sticky_ms == 0
