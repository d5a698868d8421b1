"""Partitioners: librdkafka's built-in key hashes, sticky partitioning for null keys, custom callables.

Runs in: the app process, once per produced message without an explicit partition (hot path).
Owns the choice of partition for a key: the same partition librdkafka picks for the same key and
partition count (consistent = CRC32, murmur2 = Java-compatible murmur2, fnv1a = 32-bit FNV-1a), and
the sticky behaviour that keeps null-key messages on one partition for ``sticky.partitioning.linger.ms``.

Custom partitioner: any callable ``fn(key, partition_count, available_partitions) -> int`` where ``key``
is the serialised key (``bytes`` or ``None``), ``partition_count`` the topic's partition count, and
``available_partitions`` a sequence of partitions that currently have a leader (or ``None`` when not
known).  confluent-kafka exposes no Python partitioner, so this signature is kqactors' own.  Unlike
librdkafka's C callback, a Python callable is called for every message, null keys included (sticky
partitioning does not bypass it): a custom partitioner exists to be in control.
"""

from __future__ import annotations

import operator
import random as _random
import struct
import time
import zlib
from collections.abc import Callable, Sequence
from typing import Any

from kqactors.errors import KafkaError, KafkaException

__all__ = [
    "murmur2_partition",
    "consistent_partition",
    "fnv1a_partition",
    "murmur2",
    "fnv1a",
    "crc32",
    "PARTITIONER_NAMES",
    "StickyPartition",
    "Partitioner",
    "CustomPartitioner",
]

_MASK32 = 0xFFFFFFFF
_M = 0x5BD1E995
_MURMUR2_SEED = 0x9747B28C
_FNV_OFFSET = 0x811C9DC5
_FNV_PRIME = 0x01000193

CustomPartitioner = Callable[[Any, int, Any], int]

PARTITIONER_NAMES = ("random", "consistent", "consistent_random", "murmur2", "murmur2_random",
                     "fnv1a", "fnv1a_random")

_word_unpackers: dict[int, Any] = {}


def murmur2(data: bytes) -> int:
    """32-bit murmur2 exactly as Kafka's Java client (and librdkafka) computes it; unsigned result.

    Hot path: words are unpacked in one C call, and ``h`` is masked once after the block loop (the low
    32 bits of ``h * m ^ x`` depend only on the low 32 bits of ``h``, so deferring the mask is exact).
    """
    length = len(data)
    h = _MURMUR2_SEED ^ length
    nblocks = length >> 2
    if nblocks:
        unpack = _word_unpackers.get(nblocks)
        if unpack is None:
            unpack = _word_unpackers[nblocks] = struct.Struct(f"<{nblocks}I").unpack_from
        m = _M
        mask = _MASK32
        if nblocks <= 16:
            for k in unpack(data):
                k = (k * m) & mask
                h = (h * m) ^ ((k ^ (k >> 24)) * m)
            h &= mask
        else:  # keep the integers small for long keys
            for k in unpack(data):
                k = (k * m) & mask
                h = ((h * m) ^ ((k ^ (k >> 24)) * m)) & mask
    tail = length & 3
    if tail:
        base = length - tail
        if tail == 3:
            h ^= data[base + 2] << 16
        if tail >= 2:
            h ^= data[base + 1] << 8
        h = ((h ^ data[base]) * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    return h ^ (h >> 15)


def fnv1a(data: bytes) -> int:
    """32-bit FNV-1a of ``data`` folded to its absolute value as a signed int32 (librdkafka's
    Sarama-compatible variant); the result is in 0..2**31 inclusive."""
    h = _FNV_OFFSET
    prime = _FNV_PRIME
    for byte in data:
        h = ((h ^ byte) * prime) & _MASK32
    if h & 0x80000000:
        h = (0x100000000 - h) & _MASK32
    return h


def crc32(data: bytes) -> int:
    """IEEE CRC-32 (zlib's), the hash of librdkafka's consistent partitioner."""
    return zlib.crc32(data)


def _positive_murmur2(data: bytes) -> int:
    return murmur2(data) & 0x7FFFFFFF


# name -> (key hash whose value modulo the partition count is the partition, null key goes random?,
#          empty key goes random?)
_BUILTINS: dict[str, tuple[Callable[[bytes], int] | None, bool, bool]] = {
    "random": (None, True, True),
    "consistent": (zlib.crc32, False, False),
    "consistent_random": (zlib.crc32, True, True),
    "murmur2": (_positive_murmur2, False, False),
    "murmur2_random": (_positive_murmur2, True, False),
    "fnv1a": (fnv1a, False, False),
    "fnv1a_random": (fnv1a, True, False),
}
_PURE_PYTHON_HASHES = (_positive_murmur2, fnv1a)

# Pure-Python hashes cost microseconds per key; real workloads repeat keys, so hash values are
# memoised per partitioner (bounded; the table is simply dropped when full).
HASH_CACHE_SIZE = 65536


def _random_partition(rng: _random.Random, partition_count: int,
                      available: Sequence[int] | None) -> int:
    """Uniform choice among available partitions (all partitions when none is known to be up)."""
    if available:
        return available[int(rng.random() * len(available))]
    return int(rng.random() * partition_count)


class StickyPartition:
    """The partition null-key messages of one topic stick to, renewed every ``linger_ms``.

    Pure state plus an injectable clock: a new random partition is chosen on first use, once
    ``linger_ms`` has passed since the last choice, or when the current one is no longer available.
    """

    __slots__ = ("_interval", "_clock", "_rng", "_current", "_chosen_at")

    def __init__(self, linger_ms: int, rng: _random.Random | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._interval = linger_ms / 1000.0
        self._clock = clock
        self._rng = rng if rng is not None else _random.Random()
        self._current = -1
        self._chosen_at = 0.0

    @property
    def current(self) -> int:
        """The partition currently stuck to (-1 before the first choice)."""
        return self._current

    def partition(self, partition_count: int, available: Sequence[int] | None = None) -> int:
        now = self._clock()
        current = self._current
        if (current < 0 or current >= partition_count or now - self._chosen_at >= self._interval
                or (available and current not in available)):
            current = self._current = _random_partition(self._rng, partition_count, available)
            self._chosen_at = now
        return current


def _as_key_bytes(key: Any) -> bytes | None:
    if key is None or isinstance(key, bytes):
        return key
    if isinstance(key, str):
        return key.encode()
    if isinstance(key, (bytearray, memoryview)):
        return bytes(key)
    raise TypeError(f"message key must be bytes, str or None, not {type(key).__name__}")


class Partitioner:
    """Chooses the partition for a message key, for every topic of one producer.

    ``partitioner`` is one of PARTITIONER_NAMES or a custom callable (see module docstring).
    ``sticky_linger_ms`` is ``sticky.partitioning.linger.ms``; 0 disables sticky partitioning.
    ``rng`` and ``clock`` are injectable for deterministic tests.
    """

    def __init__(self, partitioner: str | CustomPartitioner = "consistent_random", sticky_linger_ms: int = 10,
                 rng: _random.Random | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        if sticky_linger_ms < 0:
            raise ValueError("sticky_linger_ms must be >= 0")
        self._rng = rng if rng is not None else _random.Random()
        self._clock = clock
        self._sticky_linger_ms = sticky_linger_ms
        self._sticky: dict[str, StickyPartition] = {}
        self._custom: CustomPartitioner | None = None
        self._hash_cache: dict[bytes, int] | None = None
        if callable(partitioner):
            self._custom = partitioner
            self.name = getattr(partitioner, "__name__", "custom")
            self._hash, self._null_random, self._empty_random = None, False, False
            return
        if partitioner not in _BUILTINS:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG,
                                            f'Invalid value for configuration property "partitioner": {partitioner}'))
        self.name = partitioner
        self._hash, self._null_random, self._empty_random = _BUILTINS[partitioner]
        if self._hash in _PURE_PYTHON_HASHES:
            self._hash_cache = {}

    @property
    def null_key_sticky_ms(self) -> int:
        """sticky.partitioning.linger.ms when null keys go to a sticky random partition, else 0.

        A caller may then remember the partition this returns for a null key, per topic and partition
        count, for that long and skip the call (the producer's fast path); a custom partitioner or a
        hash partitioner that hashes null keys makes it 0.
        """
        if self._custom is not None or not self._null_random:
            return 0
        return self._sticky_linger_ms

    def __call__(self, topic: str, key: Any, partition_count: int,
                 available: Sequence[int] | None = None) -> int:
        """Partition for ``key`` in a topic with ``partition_count`` partitions.

        ``available``: partitions with a leader right now (random/sticky choices prefer them), or None.
        Raises KafkaException(_UNKNOWN_PARTITION) if the topic has no partitions or a custom
        partitioner returns something that is not a valid partition.
        """
        if partition_count <= 0:
            raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION,
                                            f"Topic {topic} has no partitions to choose from"))
        key = _as_key_bytes(key)
        if self._custom is not None:
            return self._call_custom(topic, key, partition_count, available)
        if key is None:
            if not self._null_random:
                return self._hash_value(b"") % partition_count
        elif key or not self._empty_random:
            if self._hash is not None:
                return self._hash_value(key) % partition_count
            return _random_partition(self._rng, partition_count, available)
        # Random choice for this key: sticky for null keys (and empty keys with consistent_random).
        if self._sticky_linger_ms > 0 and (key is None or self.name == "consistent_random"):
            sticky = self._sticky.get(topic)
            if sticky is None:
                sticky = self._sticky[topic] = StickyPartition(self._sticky_linger_ms, self._rng, self._clock)
            return sticky.partition(partition_count, available)
        return _random_partition(self._rng, partition_count, available)

    def _hash_value(self, key: bytes) -> int:
        cache = self._hash_cache
        if cache is None:
            return self._hash(key)
        value = cache.get(key)
        if value is None:
            if len(cache) >= HASH_CACHE_SIZE:
                cache.clear()
            value = cache[key] = self._hash(key)
        return value

    def _call_custom(self, topic: str, key: bytes | None, partition_count: int,
                     available: Sequence[int] | None) -> int:
        partition = self._custom(key, partition_count, available)
        if not isinstance(partition, int) or isinstance(partition, bool) or not 0 <= partition < partition_count:
            raise KafkaException(KafkaError(
                KafkaError._UNKNOWN_PARTITION,
                f"Custom partitioner returned {partition!r} for topic {topic} with {partition_count} partitions"))
        return partition


# ---- confluent-kafka's module-level partition functions: kqactors.murmur2/consistent/fnv1a -------------

def _partition_of(hash_fn: Callable[[bytes], int], key: Any, partition_count: Any) -> int:
    if not isinstance(key, bytes):
        raise TypeError(f"a bytes-like object is required, not '{type(key).__name__}'")
    count = operator.index(partition_count)
    if count <= 0:
        raise ValueError(f"partition_count must be > 0, got {count}")
    return hash_fn(key) % count


def murmur2_partition(key: bytes, partition_count: int) -> int:
    """The partition of ``key`` by Murmur2 (Java-compatible): confluent_kafka.murmur2(key, partition_count)."""
    return _partition_of(_positive_murmur2, key, partition_count)


def consistent_partition(key: bytes, partition_count: int) -> int:
    """The partition of ``key`` by CRC32: confluent_kafka.consistent(key, partition_count)."""
    return _partition_of(zlib.crc32, key, partition_count)


def fnv1a_partition(key: bytes, partition_count: int) -> int:
    """The partition of ``key`` by FNV-1a: confluent_kafka.fnv1a(key, partition_count)."""
    return _partition_of(fnv1a, key, partition_count)
