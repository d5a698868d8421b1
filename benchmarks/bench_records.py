"""Runs in: a developer shell or CI (one process). Micro-benchmark of the record-batch codec.

Measures encode and decode throughput (records/s) of kqactors.records for 100 B and 1 KiB values per
codec, next to aiokafka's record codec in the same run (its Cython extension, the default when built, and
its pure-Python fallback), plus cramjam vs python-snappy for raw snappy blocks. Prints markdown tables.

    /work/venv/bin/python benchmarks/bench_records.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import time
from collections.abc import Callable

import cramjam
import snappy
from aiokafka.record import default_records as aio

from kqactors.records import GZIP, LZ4, NONE, SNAPPY, ZSTD, build_batch, decode_record_set

CODECS = [("none", NONE), ("gzip", GZIP), ("snappy", SNAPPY), ("lz4", LZ4), ("zstd", ZSTD)]
RECORDS_PER_BATCH = 500
BASE_TS = 1_700_000_000_000


def make_messages(value_size: int, count: int = RECORDS_PER_BATCH) -> list[tuple]:
    """Semi-compressible values (repeated words with random digits) and 16-byte keys, no headers."""
    rng = random.Random(value_size)
    words = [b"order", b"customer", b"amount", b"status", b"shipped", b"pending", b"eur", b"usd"]
    messages = []
    for i in range(count):
        chunk = bytearray()
        while len(chunk) < value_size:
            chunk += rng.choice(words) + str(rng.randrange(100000)).encode() + b" "
        messages.append((BASE_TS + i // 10, b"key-%012d" % i, bytes(chunk[:value_size]), None))
    return messages


def rate(func: Callable[[], object], records: int, budget: float) -> float:
    """Records per second: best of repeated timed runs within ``budget`` seconds."""
    func()  # warm-up
    best = float("inf")
    deadline = time.perf_counter() + budget
    while True:
        start = time.perf_counter()
        func()
        best = min(best, time.perf_counter() - start)
        if time.perf_counter() > deadline:
            return records / best


def kq_encode(messages: list[tuple], codec: int) -> bytes:
    return bytes(build_batch(messages, codec=codec))


def kq_decode(batch: bytes) -> int:
    count = 0
    for decoded in decode_record_set(batch):
        for _offset, _ts, _key, _value, _headers in decoded.records:
            count += 1
    return count


def aio_encode(builder_cls: type, messages: list[tuple], codec: int) -> bytes:
    builder = builder_cls(2, codec, 0, -1, -1, -1, 1 << 30)
    for offset, (ts, key, value, _headers) in enumerate(messages):
        builder.append(offset, ts, key, value, [])
    return bytes(builder.build())


def aio_decode(batch_cls: type, batch: bytes) -> int:
    count = 0
    decoded = batch_cls(batch)
    if not decoded.validate_crc():
        raise RuntimeError("aiokafka reported a bad CRC")
    for record in decoded:
        record.offset, record.timestamp, record.key, record.value, record.headers  # noqa: B018
        count += 1
    return count


def codec_table(budget: float) -> list[str]:
    impls = [
        ("aiokafka C", aio.DefaultRecordBatchBuilder, aio.DefaultRecordBatch),
        ("aiokafka py", aio._DefaultRecordBatchBuilderPy, aio._DefaultRecordBatchPy),
    ]
    lines = [
        "| value | codec | op | kqactors rec/s | aiokafka C rec/s | aiokafka py rec/s | kq/aio-C | kq/aio-py |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for value_size in (100, 1024):
        messages = make_messages(value_size)
        for name, codec in CODECS:
            kq_batch = kq_encode(messages, codec)
            results = {"encode": [rate(lambda m=messages, c=codec: kq_encode(m, c), len(messages), budget)]}
            results["decode"] = [rate(lambda b=kq_batch: kq_decode(b), len(messages), budget)]
            for _label, builder_cls, batch_cls in impls:
                aio_batch = aio_encode(builder_cls, messages, codec)
                results["encode"].append(
                    rate(
                        lambda b=builder_cls, m=messages, c=codec: aio_encode(b, m, c), len(messages), budget
                    )
                )
                results["decode"].append(
                    rate(lambda c=batch_cls, a=aio_batch: aio_decode(c, a), len(messages), budget)
                )
            for op, (kq, aio_c, aio_py) in results.items():
                lines.append(
                    f"| {value_size} B | {name} | {op} | {kq:,.0f} | {aio_c:,.0f} | {aio_py:,.0f} "
                    f"| {kq / aio_c:.2f} | {kq / aio_py:.2f} |"
                )
            print(lines[-2], lines[-1], sep="\n", file=sys.stderr)
    return lines


def snappy_table(budget: float) -> list[str]:
    lines = [
        "| payload | op | cramjam MB/s | python-snappy MB/s | cramjam/python-snappy |",
        "|---|---|---:|---:|---:|",
    ]
    for value_size in (100, 1024):
        payload = b"".join(m[2] for m in make_messages(value_size, 1000))
        compressed = bytes(cramjam.snappy.compress_raw(payload))
        mb = len(payload) / 1e6
        pairs = {
            "compress": (
                lambda p=payload: bytes(cramjam.snappy.compress_raw(p)),
                lambda p=payload: snappy.compress(p),
            ),
            "decompress": (
                lambda c=compressed: bytes(cramjam.snappy.decompress_raw(c)),
                lambda c=compressed: snappy.uncompress(c),
            ),
        }
        for op, (cj, ps) in pairs.items():
            cj_rate = rate(cj, 1, budget) * mb
            ps_rate = rate(ps, 1, budget) * mb
            lines.append(
                f"| {len(payload) // 1024} KiB | {op} | {cj_rate:,.0f} | {ps_rate:,.0f} | {cj_rate / ps_rate:.2f} |"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter timing budget per cell (CI smoke run)")
    args = parser.parse_args()
    budget = 0.05 if args.quick else 0.4
    print(
        f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} cpus; "
        f"{RECORDS_PER_BATCH} records/batch, 16 B keys, no headers; best of repeated runs; "
        f"aiokafka default DefaultRecordBatchBuilder = {aio.DefaultRecordBatchBuilder.__module__}"
    )
    print()
    print("\n".join(codec_table(budget)))
    print()
    print("\n".join(snappy_table(budget)))


if __name__ == "__main__":
    main()
