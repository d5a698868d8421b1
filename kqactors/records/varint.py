"""Runs in: any process that encodes or decodes record batches (toppar hosts, broker actors, tests).

Owns the zig-zag varint/varlong primitives of the v2 record format. Encoding of small values (the common
case: lengths, offset deltas, header counts) is a table lookup; decoding helpers are the slow path used when
the inlined one- and two-byte fast paths in the batch reader do not apply.
"""

from __future__ import annotations

from .errors import CorruptRecordError

#: Values in [-1, SMALL_LIMIT) are encoded by table lookup; -1 is the "null" length.
SMALL_LIMIT = 1 << 13

#: Kafka varints are at most 5 bytes (int32), varlongs at most 10 bytes (int64).
MAX_VARLONG_BYTES = 10


def _encode_unsigned(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def zigzag(value: int) -> int:
    """Map a signed 64-bit integer onto an unsigned one so small magnitudes stay small."""
    return (value << 1) ^ (value >> 63)


def encode_varint_slow(value: int) -> bytes:
    """Zig-zag varlong encoding of any int64 (no table)."""
    if not -(1 << 63) <= value < (1 << 63):
        raise ValueError(f"varint value {value} does not fit in 64 bits")
    return _encode_unsigned(zigzag(value) & 0xFFFFFFFFFFFFFFFF)


# _SMALL[n + 1] is the encoding of n for -1 <= n < SMALL_LIMIT: zig-zag values below 2**14, one or two bytes,
# built without a call per entry (every host that builds batches makes it at start-up; SMALL_LIMIT <= 2**13)
_SMALL: list[bytes] = [bytes((z,)) if z < 0x80 else bytes(((z & 0x7F) | 0x80, z >> 7))
                       for z in [1, *range(0, SMALL_LIMIT << 1, 2)]]


def encode_varint(value: int) -> bytes:
    """Zig-zag varint/varlong encoding; table lookup for small values."""
    if -1 <= value < SMALL_LIMIT:
        return _SMALL[value + 1]
    return encode_varint_slow(value)


def small_varint_table() -> list[bytes]:
    """The lookup table (index = value + 1) for encoders that inline the fast path."""
    return _SMALL


def varint_size(value: int) -> int:
    """Number of bytes ``encode_varint(value)`` produces."""
    unsigned = zigzag(value) & 0xFFFFFFFFFFFFFFFF
    size = 1
    while unsigned > 0x7F:
        unsigned >>= 7
        size += 1
    return size


def decode_varint(data: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Decode one zig-zag varlong at ``pos``; returns (value, position after it).

    Raises CorruptRecordError when the buffer ends inside the varint or it is longer than 10 bytes.
    """
    result = 0
    shift = 0
    end = len(data)
    for _ in range(MAX_VARLONG_BYTES):
        if pos >= end:
            raise CorruptRecordError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
    raise CorruptRecordError("varint longer than 10 bytes")
