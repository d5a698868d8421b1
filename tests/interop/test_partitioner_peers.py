"""Interop: kqactors' partitioners pick exactly librdkafka's partition for the same key and count.

Calls the partitioner functions exported by the librdkafka bundled with confluent-kafka via ctypes
(rd_kafka_msg_partitioner_<name>(rkt, key, keylen, partition_cnt, rkt_opaque, msg_opaque)).  The
``*_random`` variants dereference ``rkt`` only for keys they send to the random partitioner, so they
are called here only with keys they hash.
"""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import os
import random

import pytest

from kqactors.partitioner import Partitioner, murmur2

pytestmark = pytest.mark.interop

HASHING = ("consistent", "murmur2", "fnv1a")


def _load_librdkafka() -> ctypes.CDLL | None:
    spec = importlib.util.find_spec("confluent_kafka")
    if spec is None or spec.origin is None:
        return None
    site = os.path.dirname(os.path.dirname(spec.origin))
    candidates = sorted(glob.glob(os.path.join(site, "confluent_kafka.libs", "librdkafka*.so*")))
    if not candidates:
        return None
    return ctypes.CDLL(candidates[0])


@pytest.fixture(scope="module")
def rdkafka_partitioners():
    lib = _load_librdkafka()
    if lib is None:
        pytest.skip("confluent-kafka's bundled librdkafka is not installed")
    functions = {}
    for name in HASHING + ("consistent_random", "murmur2_random", "fnv1a_random"):
        fn = getattr(lib, f"rd_kafka_msg_partitioner_{name}")
        fn.restype = ctypes.c_int32
        fn.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int32,
                       ctypes.c_void_p, ctypes.c_void_p]
        functions[name] = fn
    return functions


def _random_keys(rng: random.Random, count: int) -> list[bytes]:
    keys = [rng.randbytes(rng.randint(1, 64)) for _ in range(count)]
    keys += [str(i).encode() for i in range(200)]  # short ASCII keys exercise every tail length
    keys += [b"\xff" * n for n in range(1, 9)] + [b"\x80\x00\x00\x00", b"a" * 1000]
    return keys


@pytest.mark.parametrize("name", HASHING + ("consistent_random", "murmur2_random", "fnv1a_random"))
def test_same_partition_as_librdkafka_for_random_keys(rdkafka_partitioners, name):
    rdkafka = rdkafka_partitioners[name]
    rng = random.Random(hash(name) & 0xFFFF)
    ours = Partitioner(name, sticky_linger_ms=0)
    mismatches = []
    for key in _random_keys(rng, 3000):
        count = rng.choice((1, 2, 3, 7, 12, 64, 100, 1000, rng.randint(1, 100_000)))
        expected = rdkafka(None, key, len(key), count, None, None)
        got = ours("topic", key, count)
        if got != expected:
            mismatches.append((key, count, expected, got))
    assert not mismatches, mismatches[:5]


@pytest.mark.parametrize("name", HASHING)
def test_null_and_empty_keys_map_like_librdkafka(rdkafka_partitioners, name):
    rdkafka = rdkafka_partitioners[name]
    ours = Partitioner(name)
    for count in (1, 2, 5, 7, 100, 999):
        expected_null = rdkafka(None, None, 0, count, None, None)
        expected_empty = rdkafka(None, b"", 0, count, None, None)
        assert ours("t", None, count) == expected_null
        assert ours("t", b"", count) == expected_empty


def test_murmur2_random_hashes_empty_key_like_librdkafka(rdkafka_partitioners):
    # An empty but non-null key is hashed (not randomised) by murmur2_random and fnv1a_random.
    for name in ("murmur2_random", "fnv1a_random"):
        for count in (3, 10, 77):
            expected = rdkafka_partitioners[name](None, b"", 0, count, None, None)
            assert Partitioner(name)("t", b"", count) == expected


def test_murmur2_matches_kafka_python(rdkafka_partitioners):
    kafka_partitioner = pytest.importorskip("kafka.partitioner.default")
    rng = random.Random(7)
    for _ in range(2000):
        key = rng.randbytes(rng.randint(0, 50))
        assert murmur2(key) & 0x7FFFFFFF == kafka_partitioner.murmur2(key) & 0x7FFFFFFF
