"""Runs in: toppar hosts (compress on produce, decompress on fetch) and anything else decoding batches.

Owns the codec table of the Kafka record formats: ids (attributes bits 0-2), librdkafka's
``compression.level`` translation, and compress/decompress for gzip, snappy (raw blocks on write, raw or
xerial-framed on read), lz4 (frame format; the broken header checksum of magic-0 messages is repaired) and
zstd. Every codec failure surfaces as CompressionError carrying librdkafka's ``_BAD_COMPRESSION`` code.

Decompression is bounded: a payload may not decompress to more than ``MAX_DECOMPRESSED_BYTES`` (librdkafka
bounds it by receive.message.max.bytes, whose default this is), and a size a payload declares (snappy's
preamble, an lz4 or zstd frame's content size) is believed only up to that bound and, for snappy, up to what
its compressed bytes can expand to; so a few bytes claiming 2 GiB are a CompressionError, not a 2 GiB
allocation.

The codec libraries (cramjam, lz4, zstandard) are imported at a codec's first use (``_lib``): a client that
never compresses or decompresses with one does not load it at start-up.
"""

from __future__ import annotations

import importlib
import struct
import zlib
from collections.abc import Callable
from typing import Any

from .errors import CompressionError

Buffer = bytes | bytearray | memoryview

_LIBS: dict[str, Any] = {}


def _lib(name: str) -> Any:
    """A codec's library (``cramjam``, ``lz4.frame``, ``zstandard``), imported at its first use."""
    lib = _LIBS.get(name)
    if lib is None:
        lib = _LIBS[name] = importlib.import_module(name)
    return lib


NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4

CODEC_NAMES: dict[int, str] = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
CODEC_IDS: dict[str, int] = {name: codec for codec, name in CODEC_NAMES.items()}

# librdkafka's per-codec handling of compression.level: (level used for -1, highest accepted level).
_LEVEL_RULES: dict[int, tuple[int, int]] = {
    GZIP: (6, 9),  # zlib's Z_DEFAULT_COMPRESSION is level 6
    SNAPPY: (0, 0),
    LZ4: (0, 12),
    ZSTD: (3, 22),
}

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")
_XERIAL_BLOCK_SIZE = 32 * 1024
_INT32 = struct.Struct(">i")

#: The most a payload may decompress to (librdkafka's receive.message.max.bytes default).
MAX_DECOMPRESSED_BYTES = 100_000_000
_CHUNK = 1 << 20
#: snappy's densest element, a 3-byte copy, writes 64 bytes: no block expands more than ~21.3 times
_SNAPPY_MAX_RATIO = 22
#: deflate's and lz4's densest encodings expand ~1032 and ~255 times
_GZIP_MAX_RATIO = 1032
_LZ4_MAX_RATIO = 256


def codec_id(name: str) -> int:
    """Codec id for a ``compression.codec`` value (none, gzip, snappy, lz4, zstd)."""
    try:
        return CODEC_IDS[name.lower()]
    except (KeyError, AttributeError):
        raise ValueError(f"unknown compression codec {name!r}; expected one of {sorted(CODEC_IDS)}") from None


def effective_level(codec: int, level: int = -1) -> int:
    """Translate librdkafka's ``compression.level`` (-1 = codec default) to the codec's own level."""
    if codec == NONE:
        return 0
    try:
        default, highest = _LEVEL_RULES[codec]
    except KeyError:
        raise CompressionError(f"unknown compression codec id {codec}") from None
    if not isinstance(level, int) or level < -1:
        raise ValueError(f"compression.level must be an int >= -1, got {level!r}")
    if level == -1:
        return default
    return min(level, highest)


# ---------------------------------------------------------------------------------------------- compress


def _gzip_compress(data: Buffer, level: int) -> bytes:
    compressor = zlib.compressobj(level, zlib.DEFLATED, 31)  # wbits 16+15: gzip container, as Kafka expects
    return compressor.compress(data) + compressor.flush()


def _snappy_compress(data: Buffer, level: int) -> bytes:
    # librdkafka writes one raw snappy block (no xerial framing); Java brokers and clients accept it.
    return bytes(_lib("cramjam").snappy.compress_raw(data))


def _lz4_compress(data: Buffer, level: int) -> bytes:
    # Independent 64 KiB blocks, no content size: the subset every Kafka implementation reads.
    return _lib("lz4.frame").compress(
        data,
        compression_level=level,
        block_size=_lib("lz4.frame").BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        store_size=False,
    )


_zstd_compressors: dict[int, Any] = {}  # level → zstandard.ZstdCompressor


def _zstd_compress(data: Buffer, level: int) -> bytes:
    compressor = _zstd_compressors.get(level)
    if compressor is None:
        compressor = _zstd_compressors[level] = _lib("zstandard").ZstdCompressor(level=level)
    return compressor.compress(data)


_COMPRESSORS: dict[int, Callable[[Buffer, int], bytes]] = {
    GZIP: _gzip_compress,
    SNAPPY: _snappy_compress,
    LZ4: _lz4_compress,
    ZSTD: _zstd_compress,
}


def compress(codec: int, data: Buffer, level: int = -1) -> bytes:
    """Compress ``data`` with ``codec`` at librdkafka ``compression.level`` ``level``."""
    if codec == NONE:
        return bytes(data)
    compressor = _COMPRESSORS.get(codec)
    if compressor is None:
        raise CompressionError(f"unknown compression codec id {codec}")
    return compressor(data, effective_level(codec, level))


def snappy_xerial_compress(data: Buffer, block_size: int = _XERIAL_BLOCK_SIZE) -> bytes:
    """Snappy in the xerial framing Java clients write (for interop tests and legacy message sets)."""
    view = memoryview(data)
    out = bytearray(_XERIAL_HEADER.pack(XERIAL_MAGIC, 1, 1))
    for start in range(0, len(view), block_size):
        block = bytes(_lib("cramjam").snappy.compress_raw(view[start : start + block_size]))
        out += _INT32.pack(len(block))
        out += block
    return bytes(out)


# -------------------------------------------------------------------------------------------- decompress


def _too_big(codec: str, size: int) -> CompressionError:
    return CompressionError(f"{codec} payload would decompress to {size} bytes, more than the "
                            f"{MAX_DECOMPRESSED_BYTES} allowed")


def _gzip_decompress(data: Buffer) -> bytes:
    parts = []
    total = 0
    remaining = bytes(data)
    bounded = len(remaining) * _GZIP_MAX_RATIO > MAX_DECOMPRESSED_BYTES  # else no output can be too big
    while remaining:
        decompressor = zlib.decompressobj(47)  # 32+15: accept gzip or zlib headers
        if not bounded:
            parts.append(decompressor.decompress(remaining))
        else:
            chunk = decompressor.decompress(remaining, _CHUNK)
            while True:
                total += len(chunk)
                if total > MAX_DECOMPRESSED_BYTES:
                    raise _too_big("gzip", total)
                parts.append(chunk)
                if not decompressor.unconsumed_tail:
                    break
                chunk = decompressor.decompress(decompressor.unconsumed_tail, _CHUNK)
        if not decompressor.eof:
            raise CompressionError("truncated gzip stream")
        remaining = decompressor.unused_data  # concatenated gzip members
    return b"".join(parts)


def _snappy_raw(block: Buffer) -> bytes:
    """One raw snappy block, its declared length checked first (the codec allocates it before reading on)."""
    view = memoryview(block)
    declared = shift = pos = 0
    while True:
        if pos >= len(view) or pos > 4:
            raise CompressionError("snappy block has no valid length preamble")
        byte = view[pos]
        declared |= (byte & 0x7F) << shift
        pos += 1
        if byte < 0x80:
            break
        shift += 7
    if declared > min(MAX_DECOMPRESSED_BYTES, len(view) * _SNAPPY_MAX_RATIO + 64):
        raise CompressionError(f"snappy block of {len(view)} bytes declares {declared} bytes uncompressed")
    return bytes(_lib("cramjam").snappy.decompress_raw(block))


def _snappy_decompress(data: Buffer) -> bytes:
    if bytes(data[:8]) == XERIAL_MAGIC:
        return _snappy_xerial_decompress(memoryview(data))
    return _snappy_raw(data)


def _snappy_xerial_decompress(view: memoryview) -> bytes:
    if len(view) < _XERIAL_HEADER.size:
        raise CompressionError("truncated xerial snappy header")
    parts = []
    total = 0
    pos = _XERIAL_HEADER.size
    end = len(view)
    while pos < end:
        if pos + 4 > end:
            raise CompressionError("truncated xerial snappy block length")
        (block_len,) = _INT32.unpack_from(view, pos)
        pos += 4
        if block_len < 0 or pos + block_len > end:
            raise CompressionError(f"xerial snappy block of {block_len} bytes overruns the payload")
        parts.append(_snappy_raw(view[pos : pos + block_len]))
        total += len(parts[-1])
        if total > MAX_DECOMPRESSED_BYTES:
            raise _too_big("snappy", total)
        pos += block_len
    return b"".join(parts)


def _lz4_decompress(data: Buffer) -> bytes:
    declared = _lib("lz4.frame").get_frame_info(data)["content_size"]  # 0: not declared
    if declared > MAX_DECOMPRESSED_BYTES:
        raise _too_big("lz4", declared)
    if declared or len(data) * _LZ4_MAX_RATIO <= MAX_DECOMPRESSED_BYTES:
        return _lib("lz4.frame").decompress(data)
    decompressor = _lib("lz4.frame").LZ4FrameDecompressor()
    parts = [decompressor.decompress(data, max_length=_CHUNK)]
    total = len(parts[0])
    while not decompressor.eof and decompressor.needs_input is False:
        parts.append(decompressor.decompress(b"", max_length=_CHUNK))
        total += len(parts[-1])
        if total > MAX_DECOMPRESSED_BYTES:
            raise _too_big("lz4", total)
    if not decompressor.eof:
        raise CompressionError("truncated lz4 frame")
    return b"".join(parts)


_zstd_decompressors: list[Any] = []  # the one zstandard.ZstdDecompressor, made at the first zstd batch
#: first output size tried for a zstd frame that does not declare its content size (see _zstd_decompress)
_ZSTD_GUESS_BYTES = 2 << 20


def _zstd_decompress(data: Buffer) -> bytes:
    zstandard = _lib("zstandard")
    if not _zstd_decompressors:
        _zstd_decompressors.append(zstandard.ZstdDecompressor())
    declared = zstandard.frame_content_size(data)  # -1: not declared
    if declared > MAX_DECOMPRESSED_BYTES:
        raise _too_big("zstd", declared)
    if declared >= 0:
        return _zstd_decompressors[0].decompress(data)
    # Streaming writers (zstd-jni, librdkafka) omit the content size. First one call into an output of a
    # guessed size (bounded, so no bomb can make it allocate more): a guess of up to ~2 MiB is one malloc
    # off the heap, and one call costs ~25% less CPU than the bounded stream below (1 MiB batches of
    # librdkafka). Output beyond the guess (or a damaged frame) fails that call; then the stream decides.
    try:
        return _zstd_decompressors[0].decompress(data, max_output_size=min(MAX_DECOMPRESSED_BYTES,
                                                                            max(_ZSTD_GUESS_BYTES, 4 * len(data))))
    except zstandard.ZstdError:
        pass
    # Decode incrementally, bounded: an input slice of 1 KiB writes at most ~32 MiB (a 4-byte RLE block
    # writes 128 KiB)
    decompressor = _zstd_decompressors[0].decompressobj()
    parts = []
    total = 0
    view = memoryview(data)
    for start in range(0, len(view), 1024):
        parts.append(decompressor.decompress(view[start : start + 1024]))
        total += len(parts[-1])
        if total > MAX_DECOMPRESSED_BYTES:
            raise _too_big("zstd", total)
        if decompressor.eof:
            break
    if not decompressor.eof:
        raise CompressionError("truncated zstd frame")
    return b"".join(parts)


_DECOMPRESSORS: dict[int, Callable[[Buffer], bytes]] = {
    GZIP: _gzip_decompress,
    SNAPPY: _snappy_decompress,
    LZ4: _lz4_decompress,
    ZSTD: _zstd_decompress,
}


def decompress(codec: int, data: Buffer) -> bytes:
    """Decompress a record payload; any codec failure raises CompressionError naming the codec."""
    if codec == NONE:
        return bytes(data)
    decompressor = _DECOMPRESSORS.get(codec)
    if decompressor is None:
        raise CompressionError(f"unknown compression codec id {codec}")
    try:
        return decompressor(data)
    except CompressionError:
        raise
    except Exception as exc:  # codec libraries raise assorted types (zlib.error, RuntimeError, ...)
        raise CompressionError(f"{CODEC_NAMES[codec]} decompression failed: {exc}") from exc


# ------------------------------------------------------------------- lz4 of magic-0 messages (KAFKA-3160)

_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_MASK32 = 0xFFFFFFFF


def _rotl32(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _MASK32


def _xxh32_short(data: bytes, seed: int = 0) -> int:
    """xxHash32 for inputs shorter than 16 bytes (all an lz4 frame descriptor can be)."""
    if len(data) >= 16:
        raise ValueError("_xxh32_short handles inputs under 16 bytes only")
    acc = (seed + _P5 + len(data)) & _MASK32
    pos = 0
    while pos + 4 <= len(data):
        word = int.from_bytes(data[pos : pos + 4], "little")
        acc = (_rotl32((acc + word * _P3) & _MASK32, 17) * _P4) & _MASK32
        pos += 4
    for byte in data[pos:]:
        acc = (_rotl32((acc + byte * _P5) & _MASK32, 11) * _P1) & _MASK32
    acc ^= acc >> 15
    acc = (acc * _P2) & _MASK32
    acc ^= acc >> 13
    acc = (acc * _P3) & _MASK32
    acc ^= acc >> 16
    return acc


def lz4_frame_descriptor_end(frame: bytes) -> int:
    """Index of the header-checksum byte of an lz4 frame (after magic, FLG, BD and optional fields)."""
    if len(frame) < 7:
        raise CompressionError("truncated lz4 frame header")
    flags = frame[4]
    end = 6
    if flags & 0x08:  # content size present
        end += 8
    if flags & 0x01:  # dictionary id present
        end += 4
    if end >= len(frame):
        raise CompressionError("truncated lz4 frame header")
    return end


def lz4_header_checksum(frame: bytes, *, kafka_legacy_bug: bool = False) -> int:
    """Header checksum byte: correct (over the descriptor) or as magic-0 Kafka wrote it (over magic too)."""
    end = lz4_frame_descriptor_end(frame)
    covered = frame[0:end] if kafka_legacy_bug else frame[4:end]
    return (_xxh32_short(bytes(covered)) >> 8) & 0xFF


def lz4_decompress_legacy(data: Buffer) -> bytes:
    """Decompress lz4 from a magic-0 message, whose writers hashed the frame magic into the header checksum."""
    frame = bytearray(data)
    checksum_at = lz4_frame_descriptor_end(bytes(frame))
    # Kafka's magic-0 writer sets neither the content-size nor the dictionary flag (a 6-byte descriptor); a
    # descriptor of 16 bytes or more is not that bug's, and its checksum is left for the codec to judge
    if checksum_at < 16 and frame[checksum_at] == lz4_header_checksum(bytes(frame), kafka_legacy_bug=True):
        frame[checksum_at] = lz4_header_checksum(bytes(frame))
    return decompress(LZ4, frame)
