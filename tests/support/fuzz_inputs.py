"""Valid inputs for every decoder a broker's bytes reach, their mutations, and the one call that decodes each.

Runs in: the fuzz tests (tests/fuzz/) and benchmarks/fuzz_decoders.py. A target is a name, a valid input and a
``decode(data)`` that raises only the typed decode error when the input is bad: ``ProtocolError`` (a
KafkaException with ``_BAD_MSG``) for protocol responses, ``CorruptRecordError`` (``_BAD_MSG``) or its
``CompressionError`` (``_BAD_COMPRESSION``) for record sets. Targets: every request kind of
kqactors/protocol/requests.py at every version it speaks (the raw group kinds also through their generated
response class, which the group actor reads them with), and record sets: RecordBatch v2 with each codec (none,
gzip, snappy, lz4, zstd), a control batch, legacy v0/v1 messages plain and compressed; the records of a v2 batch
also through ``MessageBatchWriter.add_v2_records`` on the Python and on the C path.
"""

from __future__ import annotations

import importlib
import random
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from crc32c import crc32c

from kqactors.protocol.base import in_range
from kqactors.protocol.errors import ProtocolError
from kqactors.protocol.generated import API_TABLE
from kqactors.protocol.requests import REQUEST_KINDS
from kqactors.records import (
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    CorruptRecordError,
    build_batch,
    build_control_batch,
)
from kqactors.records import compression as comp

PROTOCOL_ERRORS: tuple[type[BaseException], ...] = (ProtocolError,)
RECORD_ERRORS: tuple[type[BaseException], ...] = (CorruptRecordError,)
CODECS = {"none": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}


@dataclass
class Target:
    name: str
    valid: bytes
    decode: Callable[[bytes], Any]
    errors: tuple[type[BaseException], ...]
    #: offsets a mutation of the valid input should not touch (a v2 batch's CRC is re-computed instead)
    fix: Callable[[bytearray], bytearray] | None = None


# ---- protocol responses ------------------------------------------------------------------------------------

def _sample(cls: Any, version: int, depth: int = 0) -> Any:
    """An instance of generated class ``cls`` with every field present at ``version`` filled (arrays of 2)."""
    fields: dict[str, Any] = {}
    for field in cls._SCHEMA:
        if not in_range(version, field.versions):
            continue
        kind = field.type
        if field.struct is not None:
            if depth >= 3:
                continue
            value = _sample(field.struct, version, depth + 1)
            fields[field.name] = [value, _sample(field.struct, version, depth + 1)] if kind.startswith("[]") \
                else value
        elif kind in ("int8", "int16", "int32", "int64"):
            fields[field.name] = 1
        elif kind == "bool":
            fields[field.name] = True
        elif kind == "string":
            fields[field.name] = "topic"
        elif kind == "bytes":
            fields[field.name] = b"payload"
        elif kind == "uuid":
            fields[field.name] = bytes(range(16))
        elif kind == "records":
            fields[field.name] = bytes(build_batch([(1, b"k", b"v", [])]))
        elif kind in ("[]int32", "[]int64"):
            fields[field.name] = [1, 2]
        elif kind == "[]string":
            fields[field.name] = ["a", "b"]
    return cls(**fields)


def _response_class(api_key: int) -> Any:
    _, module, _, response, _, _ = API_TABLE[api_key]
    return getattr(importlib.import_module(f"kqactors.protocol.generated.{module}"), response)


def protocol_targets() -> list[Target]:
    """Every request kind at every version, with a valid response body; raw kinds twice (kind, class)."""
    targets = []
    for kind in REQUEST_KINDS.values():
        cls = _response_class(kind.api_key)
        for version in range(kind.min_version, kind.max_version + 1):
            if version not in cls._READERS:
                continue
            valid = _sample(cls, version).encode(version)
            targets.append(Target(f"{kind.name} v{version}", valid,
                                  lambda data, kind=kind, version=version: kind.decode(version, data),
                                  PROTOCOL_ERRORS))
            if kind.decode.__name__ == "_decode_raw":
                targets.append(Target(f"{cls.__name__} v{version}", valid,
                                      lambda data, cls=cls, version=version: cls.decode(data, version),
                                      PROTOCOL_ERRORS))
    return targets


# ---- record sets -------------------------------------------------------------------------------------------

def fix_v2_crc(batch: bytearray) -> bytearray:
    """Re-compute the CRC-32C of the first v2 batch in ``batch`` (over attributes..end), if it is one."""
    if len(batch) >= 61 and batch[16] == 2:
        (length,) = struct.unpack_from(">i", batch, 8)
        end = min(len(batch), 12 + max(length, 0))
        struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:end])))
    return batch


def _legacy(offset: int, magic: int, key: bytes | None, value: bytes | None, attributes: int = 0) -> bytes:
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", 1_700_000_000_000)
    for part in (key, value):
        body += struct.pack(">i", -1) if part is None else struct.pack(">i", len(part)) + part
    import zlib

    return struct.pack(">qiI", offset, len(body) + 4, zlib.crc32(body)) + body


def _messages() -> list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]]:
    return [(1_700_000_000_000 + i, b"key%d" % i if i % 3 else None, b"value-%d" % i * (i + 1),
             [("h", b"x"), ("n", None)] if i % 2 else []) for i in range(6)]


def _decode_set(verify: bool) -> Callable[[bytes], Any]:
    from kqactors.records import decode_record_set, scan_record_set

    def decode(data: bytes) -> Any:
        scan_record_set(data)
        return decode_record_set(data, verify_crc=verify)

    return decode


def _pack_v2(native: Any) -> Callable[[bytes], Any]:
    """The consumer's path for a v2 batch: verify/decompress, then ``MessageBatchWriter.add_v2_records`` with
    the C twin (``native``, the extension module) or the Python one (None) indexing the records."""
    from kqactors.core.consumer import packing
    from kqactors.records import iter_batch_headers
    from kqactors.records.reader_v2 import v2_records_section

    def decode(data: bytes) -> Any:
        added = 0
        saved = packing._native_records
        packing._native_records = native
        try:
            for header in iter_batch_headers(data):
                if header.magic != 2 or header.is_control:
                    continue
                section, start, end = v2_records_section(data, header, verify_crc=True)
                fixed = header.max_timestamp if header.timestamp_type == 1 else -1
                added += packing.MessageBatchWriter().add_v2_records(
                    section, start, end, header.record_count, header.base_offset, header.base_timestamp, fixed,
                    header.timestamp_type + 1, header.partition_leader_epoch, 0)
        finally:
            packing._native_records = saved
        return added

    return decode


def record_targets(native_records: Any = None) -> list[Target]:
    """v2 batches per codec (+ a control batch), legacy v0/v1 plain and compressed, each through the
    record-set decoder (CRC checked and not) and v2 through the consumer's packing (Python, and C when
    ``native_records`` is the extension module)."""
    samples: dict[str, tuple[bytes, bool]] = {}
    for name, codec in CODECS.items():
        samples[f"v2 {name}"] = (bytes(build_batch(_messages(), codec=codec, base_offset=100)), True)
    samples["v2 control"] = (bytes(build_control_batch(True, producer_id=5, producer_epoch=1, base_offset=7)), True)
    for magic in (0, 1):
        plain = b"".join(_legacy(i, magic, b"k", b"v%d" % i) for i in range(3))
        samples[f"legacy v{magic}"] = (plain, False)
        for name, codec in (("gzip", GZIP), ("snappy", SNAPPY), ("lz4", LZ4)):
            inner = b"".join(_legacy(i, magic, None, b"inner%d" % i) for i in range(3))
            samples[f"legacy v{magic} {name}"] = (_legacy(2, magic, None, comp.compress(codec, inner), codec),
                                                  False)
    targets = []
    for name, (valid, is_v2) in samples.items():
        fix = fix_v2_crc if is_v2 else None
        targets.append(Target(f"record set {name} (crc checked)", valid, _decode_set(True), RECORD_ERRORS, fix))
        targets.append(Target(f"record set {name} (crc off)", valid, _decode_set(False), RECORD_ERRORS))
        if is_v2:
            targets.append(Target(f"pack {name} (python)", valid, _pack_v2(None), RECORD_ERRORS, fix))
            if native_records is not None:
                targets.append(Target(f"pack {name} (C)", valid, _pack_v2(native_records), RECORD_ERRORS, fix))
    return targets


def codec_targets() -> list[Target]:
    """Each codec's decompress on its own valid payload."""
    payload = b"".join(b"value-%d " % i for i in range(500))
    return [Target(f"decompress {name}", comp.compress(codec, payload),
                   lambda data, codec=codec: comp.decompress(codec, data), RECORD_ERRORS)
            for name, codec in CODECS.items() if codec != NONE]


# ---- mutations -------------------------------------------------------------------------------------------

HUGE_INT32 = (0x7FFFFFFF, 0x7FFFFFF0, -1, -0x80000000, 0x40000000)
HUGE_VARINTS = (b"\xff\xff\xff\xff\x07", b"\xff\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01")


def sweep(valid: bytes) -> Iterator[bytes]:
    """Deterministic mutations: every truncation, and at every offset each huge int32 length, a huge int16,
    each huge varint written over the bytes there."""
    for cut in range(len(valid)):
        yield valid[:cut]
    for pos in range(len(valid)):
        for value in HUGE_INT32:
            yield valid[:pos] + struct.pack(">i", value) + valid[pos + 4:]
        yield valid[:pos] + b"\x7f\xff" + valid[pos + 2:]
        for varint in HUGE_VARINTS:
            yield valid[:pos] + varint + valid[pos + len(varint):]


def mutate(valid: bytes, rng: random.Random) -> bytes:
    """One random mutation: flipped bytes, a huge length, a cut, a duplicated or deleted span."""
    data = bytearray(valid)
    for _ in range(rng.randint(1, 4)):
        choice = rng.randrange(6)
        pos = rng.randrange(len(data) + 1) if data else 0
        if choice == 0 and data:
            data[min(pos, len(data) - 1)] ^= 1 << rng.randrange(8)
        elif choice == 1:
            data[pos:pos + 4] = struct.pack(">i", rng.choice(HUGE_INT32))
        elif choice == 2:
            del data[rng.randrange(len(data) + 1):]
        elif choice == 3:
            end = min(len(data), pos + rng.randrange(1, 16))
            data[pos:pos] = data[pos:end]
        elif choice == 4:
            del data[pos:pos + rng.randrange(1, 16)]
        else:
            data[pos:pos + 1] = rng.choice(HUGE_VARINTS)
    return bytes(data)


def check(target: Target, data: bytes) -> BaseException | None:
    """Decode ``data``; returns an exception that is NOT the target's typed error (a finding), else None."""
    try:
        target.decode(data)
    except target.errors:
        return None
    except Exception as exc:  # noqa: BLE001 - any other type is what the fuzzing looks for
        return exc
    return None
