"""Runs in: any process (broker actors on the hot path). Owns the Kafka wire primitives.

Readers take a ``memoryview`` and an offset and return ``(value, new_offset)``; writers append to a
``bytearray`` (or a :class:`ChunkedWriter`, which lets large record sets ride as separate buffers instead of
being copied). Generated message modules call these directly, so they are kept small and allocation-light.
Truncated input surfaces as ``struct.error``/``IndexError``/:class:`TruncatedError`; the message-level
``decode`` turns all of them into :class:`~kqactors.protocol.errors.ProtocolError`.
"""

from __future__ import annotations

import struct
from typing import Any

__all__ = [
    "I8", "I16", "I32", "I64", "U16", "U32", "F64", "BOOL", "UUID_LEN", "ZERO_UUID",
    "ChunkedWriter", "TruncatedError",
    "read_uvarint", "write_uvarint", "uvarint_bytes", "read_varint", "write_varint", "read_varlong",
    "write_varlong", "zigzag_encode", "zigzag_decode",
    "read_string", "read_nullable_string", "read_compact_string", "read_compact_nullable_string",
    "write_string", "write_nullable_string", "write_compact_string", "write_compact_nullable_string",
    "read_bytes", "read_nullable_bytes", "read_compact_bytes", "read_compact_nullable_bytes",
    "write_bytes", "write_nullable_bytes", "write_compact_bytes", "write_compact_nullable_bytes",
    "read_records", "read_compact_records", "write_records", "write_compact_records",
    "read_array_len", "read_compact_array_len", "write_array_len", "write_compact_array_len",
    "read_uuid", "write_uuid", "read_prim_array", "write_prim_array",
    "read_unknown_tags", "skip_tags", "write_unknown_tags", "write_tag",
]

I8 = struct.Struct(">b")
I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")
U16 = struct.Struct(">H")
U32 = struct.Struct(">I")
F64 = struct.Struct(">d")
BOOL = struct.Struct(">?")
UUID_LEN = 16
ZERO_UUID = bytes(16)

_PRIM_CODES = {"int8": "b", "int16": "h", "int32": "i", "int64": "q", "uint16": "H", "uint32": "I",
               "float64": "d", "bool": "?"}
_PRIM_SIZES = {"b": 1, "h": 2, "i": 4, "q": 8, "H": 2, "I": 4, "d": 8, "?": 1}

# Record sets at least this large are spliced into a ChunkedWriter as their own buffer rather than copied.
SPLICE_THRESHOLD = 2048

# Single-byte unsigned varints are by far the most common (compact lengths, tag counts): precompute them.
_SMALL_UVARINTS = tuple(bytes((i,)) for i in range(128))


class TruncatedError(ValueError):
    """A length prefix points past the end of the buffer (the message is truncated or corrupt)."""


class ChunkedWriter(bytearray):
    """A bytearray that can splice large buffers in by reference, producing a list of chunks.

    Small fields are appended in place; ``splice`` closes the current run and adds the big buffer as its
    own chunk, so ``sendmsg``/zmq multipart can send record batches without copying them.
    """

    __slots__ = ("chunks",)

    def __init__(self) -> None:
        super().__init__()
        self.chunks: list[Any] = []

    def splice(self, data: Any) -> None:
        if self:
            self.chunks.append(bytes(self))
            self.clear()
        self.chunks.append(data)

    def finish(self) -> list[Any]:
        """Return the chunks written so far (the writer is left empty)."""
        chunks = self.chunks
        if self:
            chunks.append(bytes(self))
            self.clear()
        self.chunks = []
        return chunks


# --- varints -------------------------------------------------------------------------------------------

def read_uvarint(b: memoryview, p: int) -> tuple[int, int]:
    """Read an unsigned LEB128 varint (at most 5 bytes for 32-bit values, 10 for 64-bit)."""
    byte = b[p]
    if byte < 0x80:
        return byte, p + 1
    value = byte & 0x7F
    shift = 7
    p += 1
    while True:
        byte = b[p]
        p += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, p
        shift += 7
        if shift > 63:
            raise ValueError("varint is longer than 10 bytes")


def uvarint_bytes(value: int) -> bytes:
    if 0 <= value < 128:
        return _SMALL_UVARINTS[value]
    if value < 0:
        raise ValueError(f"unsigned varint cannot be negative: {value}")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def write_uvarint(out: bytearray, value: int) -> None:
    if 0 <= value < 128:
        out.append(value)
    else:
        out += uvarint_bytes(value)


def zigzag_encode(value: int) -> int:
    return (value << 1) ^ (value >> 63)


def zigzag_decode(value: int) -> int:
    return (value >> 1) ^ -(value & 1)


def read_varint(b: memoryview, p: int) -> tuple[int, int]:
    """Signed zigzag varint (32-bit range)."""
    raw, p = read_uvarint(b, p)
    return (raw >> 1) ^ -(raw & 1), p


read_varlong = read_varint


def write_varint(out: bytearray, value: int) -> None:
    if not -(1 << 31) <= value < (1 << 31):
        raise ValueError(f"varint out of range: {value}")
    write_uvarint(out, ((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def write_varlong(out: bytearray, value: int) -> None:
    if not -(1 << 63) <= value < (1 << 63):
        raise ValueError(f"varlong out of range: {value}")
    write_uvarint(out, ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


# --- strings -------------------------------------------------------------------------------------------

def _slice(b: memoryview, p: int, n: int) -> memoryview:
    end = p + n
    if end > len(b):
        raise TruncatedError(f"field of {n} bytes at offset {p} runs past the end ({len(b)} bytes)")
    return b[p:end]


def read_string(b: memoryview, p: int) -> tuple[str, int]:
    (n,) = I16.unpack_from(b, p)
    if n < 0:
        raise ValueError("null string in a non-nullable field")
    p += 2
    return str(_slice(b, p, n), "utf-8"), p + n


def read_nullable_string(b: memoryview, p: int) -> tuple[str | None, int]:
    (n,) = I16.unpack_from(b, p)
    p += 2
    if n < 0:
        return None, p
    return str(_slice(b, p, n), "utf-8"), p + n


def read_compact_string(b: memoryview, p: int) -> tuple[str, int]:
    n, p = read_uvarint(b, p)
    if n == 0:
        raise ValueError("null string in a non-nullable field")
    n -= 1
    return str(_slice(b, p, n), "utf-8"), p + n


def read_compact_nullable_string(b: memoryview, p: int) -> tuple[str | None, int]:
    n, p = read_uvarint(b, p)
    if n == 0:
        return None, p
    n -= 1
    return str(_slice(b, p, n), "utf-8"), p + n


def write_string(out: bytearray, value: str) -> None:
    data = value.encode()
    if len(data) > 0x7FFF:
        raise ValueError(f"string of {len(data)} bytes is too long for an int16 length")
    out += I16.pack(len(data))
    out += data


def write_nullable_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out += b"\xff\xff"
    else:
        write_string(out, value)


def write_compact_string(out: bytearray, value: str) -> None:
    data = value.encode()
    write_uvarint(out, len(data) + 1)
    out += data


def write_compact_nullable_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out.append(0)
    else:
        write_compact_string(out, value)


# --- bytes and records ---------------------------------------------------------------------------------

def read_bytes(b: memoryview, p: int) -> tuple[bytes, int]:
    (n,) = I32.unpack_from(b, p)
    if n < 0:
        raise ValueError("null bytes in a non-nullable field")
    p += 4
    return bytes(_slice(b, p, n)), p + n


def read_nullable_bytes(b: memoryview, p: int) -> tuple[bytes | None, int]:
    (n,) = I32.unpack_from(b, p)
    p += 4
    if n < 0:
        return None, p
    return bytes(_slice(b, p, n)), p + n


def read_compact_bytes(b: memoryview, p: int) -> tuple[bytes, int]:
    n, p = read_uvarint(b, p)
    if n == 0:
        raise ValueError("null bytes in a non-nullable field")
    n -= 1
    return bytes(_slice(b, p, n)), p + n


def read_compact_nullable_bytes(b: memoryview, p: int) -> tuple[bytes | None, int]:
    n, p = read_uvarint(b, p)
    if n == 0:
        return None, p
    n -= 1
    return bytes(_slice(b, p, n)), p + n


def read_records(b: memoryview, p: int) -> tuple[memoryview | None, int]:
    """Record sets are returned as a zero-copy slice of the response buffer (or None)."""
    (n,) = I32.unpack_from(b, p)
    p += 4
    if n < 0:
        return None, p
    return _slice(b, p, n), p + n


def read_compact_records(b: memoryview, p: int) -> tuple[memoryview | None, int]:
    n, p = read_uvarint(b, p)
    if n == 0:
        return None, p
    n -= 1
    return _slice(b, p, n), p + n


def _nbytes(value: Any) -> int:
    return value.nbytes if isinstance(value, memoryview) else len(value)


def write_bytes(out: bytearray, value: Any) -> None:
    out += I32.pack(_nbytes(value))
    out += value


def write_nullable_bytes(out: bytearray, value: Any) -> None:
    if value is None:
        out += b"\xff\xff\xff\xff"
    else:
        write_bytes(out, value)


def write_compact_bytes(out: bytearray, value: Any) -> None:
    write_uvarint(out, _nbytes(value) + 1)
    out += value


def write_compact_nullable_bytes(out: bytearray, value: Any) -> None:
    if value is None:
        out.append(0)
    else:
        write_compact_bytes(out, value)


def _put_records(out: bytearray, value: Any, size: int) -> None:
    if size >= SPLICE_THRESHOLD and type(out) is ChunkedWriter:
        out.splice(value)
    else:
        out += value


def write_records(out: bytearray, value: Any) -> None:
    """Nullable record set; big sets are spliced by reference when ``out`` is a ChunkedWriter."""
    if value is None:
        out += b"\xff\xff\xff\xff"
        return
    size = _nbytes(value)
    out += I32.pack(size)
    _put_records(out, value, size)


def write_compact_records(out: bytearray, value: Any) -> None:
    if value is None:
        out.append(0)
        return
    size = _nbytes(value)
    write_uvarint(out, size + 1)
    _put_records(out, value, size)


# --- arrays, uuids -------------------------------------------------------------------------------------

def read_array_len(b: memoryview, p: int) -> tuple[int, int]:
    """Array element count, -1 for a null array."""
    (n,) = I32.unpack_from(b, p)
    return n, p + 4


def read_compact_array_len(b: memoryview, p: int) -> tuple[int, int]:
    n, p = read_uvarint(b, p)
    return n - 1, p


def write_array_len(out: bytearray, n: int) -> None:
    out += I32.pack(n)


def write_compact_array_len(out: bytearray, n: int) -> None:
    write_uvarint(out, n + 1)


def read_uuid(b: memoryview, p: int) -> tuple[bytes, int]:
    return bytes(_slice(b, p, 16)), p + 16


def write_uuid(out: bytearray, value: bytes) -> None:
    if len(value) != 16:
        raise ValueError(f"a uuid is 16 bytes, got {len(value)}")
    out += value


def read_prim_array(b: memoryview, p: int, n: int, type_name: str) -> tuple[list, int]:
    """Read ``n`` fixed-size primitives (or uuids / strings) in one go."""
    code = _PRIM_CODES.get(type_name)
    if code is not None:
        size = _PRIM_SIZES[code] * n
        if p + size > len(b):
            raise TruncatedError(f"array of {n} {type_name} runs past the end of the buffer")
        return list(struct.unpack_from(f">{n}{code}", b, p)), p + size
    if n > len(b) - p:
        raise TruncatedError(f"array of {n} {type_name} runs past the end of the buffer")
    reader = _ELEMENT_READERS[type_name]
    values = []
    append = values.append
    for _ in range(n):
        value, p = reader(b, p)
        append(value)
    return values, p


def write_prim_array(out: bytearray, values: list, type_name: str) -> None:
    code = _PRIM_CODES.get(type_name)
    if code is not None:
        out += struct.pack(f">{len(values)}{code}", *values)
        return
    writer = _ELEMENT_WRITERS[type_name]
    for value in values:
        writer(out, value)


_ELEMENT_READERS = {"string": read_string, "compact:string": read_compact_string, "uuid": read_uuid,
                    "compact:uuid": read_uuid}
_ELEMENT_WRITERS = {"string": write_string, "compact:string": write_compact_string, "uuid": write_uuid,
                    "compact:uuid": write_uuid}


# --- tagged fields -------------------------------------------------------------------------------------

def read_unknown_tags(b: memoryview, p: int) -> tuple[dict[int, bytes] | None, int]:
    """Read a tagged-field section none of whose tags we know; returns {tag: raw bytes} or None."""
    count, p = read_uvarint(b, p)
    if count == 0:
        return None, p
    tags: dict[int, bytes] = {}
    for _ in range(count):
        tag, p = read_uvarint(b, p)
        size, p = read_uvarint(b, p)
        tags[tag] = bytes(_slice(b, p, size))
        p += size
    return tags, p


def skip_tags(b: memoryview, p: int) -> int:
    count, p = read_uvarint(b, p)
    for _ in range(count):
        _, p = read_uvarint(b, p)
        size, p = read_uvarint(b, p)
        _slice(b, p, size)
        p += size
    return p


def write_tag(out: bytearray, tag: int, payload: bytes | bytearray) -> None:
    write_uvarint(out, tag)
    write_uvarint(out, len(payload))
    out += payload


def write_unknown_tags(out: bytearray, tags: dict[int, bytes]) -> None:
    for tag in sorted(tags):
        write_tag(out, tag, tags[tag])
