"""Runs in: toppar hosts and broker actors (imported wherever batches are built, scanned or decoded).

kqactors.records: the Kafka record formats. RecordBatch v2 build/decode/re-stamp, a cheap header scanner for
fetched record sets, legacy MessageSet v0/v1 decoding and the compression codecs. Pure Python, with optional
C twins of the two per-record hot loops (kqactors/native/_native_records.c, switched by kqactors/native/__init__.py).

The names below are loaded from their submodule at first use (PEP 562), so importing one submodule (a
producer's toppar imports ``batch_v2``) does not load the decoders, and no codec library is imported until a
batch is compressed or decompressed with it (``compression.py``).
"""

from __future__ import annotations

from kqactors._lazy import lazy_exports

_EXPORTS: dict[str, tuple[str, ...]] = {
    "batch_v2": ("CONTROL_ABORT", "CONTROL_COMMIT", "CREATE_TIME", "LOG_APPEND_TIME", "RecordBatchBuilder",
                 "build_batch", "build_control_batch", "restamp"),
    "compression": ("NONE", "GZIP", "SNAPPY", "LZ4", "ZSTD", "codec_id", "compress", "decompress",
                    "effective_level"),
    "errors": ("ERR__BAD_MSG", "ERR__BAD_COMPRESSION", "CompressionError", "CorruptRecordError"),
    "reader_v2": ("OFFSET", "TIMESTAMP", "KEY", "VALUE", "HEADERS", "BatchHeader", "Record"),
    "record_set": ("RecordSetScan", "decode_batch", "decode_record_set", "iter_batch_headers", "iter_records",
                   "scan_record_set"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF)


__getattr__, __dir__ = lazy_exports(__name__, _MODULE_OF, globals())
