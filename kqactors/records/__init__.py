"""Runs in: toppar hosts and broker actors (imported wherever batches are built, scanned or decoded).

kqactors.records: the Kafka record formats. RecordBatch v2 build/decode/re-stamp, a cheap header scanner for
fetched record sets, legacy MessageSet v0/v1 decoding and the compression codecs. Pure Python, with optional
C twins of the two per-record hot loops (kqactors/native/_native_records.c, switched by kqactors/native/__init__.py).
"""

from .batch_v2 import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    CREATE_TIME,
    LOG_APPEND_TIME,
    RecordBatchBuilder,
    build_batch,
    build_control_batch,
    restamp,
)
from .compression import GZIP, LZ4, NONE, SNAPPY, ZSTD, codec_id, compress, decompress, effective_level
from .errors import ERR__BAD_COMPRESSION, ERR__BAD_MSG, CompressionError, CorruptRecordError
from .reader_v2 import HEADERS, KEY, OFFSET, TIMESTAMP, VALUE, BatchHeader, Record
from .record_set import (
    RecordSetScan,
    decode_batch,
    decode_record_set,
    iter_batch_headers,
    iter_records,
    scan_record_set,
)

__all__ = [
    "CONTROL_ABORT", "CONTROL_COMMIT", "CREATE_TIME", "LOG_APPEND_TIME",
    "NONE", "GZIP", "SNAPPY", "LZ4", "ZSTD",
    "OFFSET", "TIMESTAMP", "KEY", "VALUE", "HEADERS",
    "ERR__BAD_MSG", "ERR__BAD_COMPRESSION",
    "BatchHeader", "CompressionError", "CorruptRecordError", "Record", "RecordBatchBuilder", "RecordSetScan",
    "build_batch", "build_control_batch", "codec_id", "compress", "decode_batch", "decode_record_set",
    "decompress", "effective_level", "iter_batch_headers", "iter_records", "restamp", "scan_record_set",
]  # fmt: skip
