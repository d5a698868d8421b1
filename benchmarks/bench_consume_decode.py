"""Runs in: a developer shell (one process, no broker). The consumer's host-side CPU per message, alone.

What a toppar host does with one partition's share of a Fetch answer, timed with the thread's CPU clock (so
other processes on a loaded machine barely move it): the broker actor's header scan (``scan_record_set``),
then the ctoppar's decode into app frames (``SliceDecoder.decode_chunks`` in 1 MiB steps, each frame built).
The slice is a view into a larger answer, as the broker actor hands it over. Batches are built as librdkafka
writes them: 1,000 records per batch, zstd frames without a content size. No ZeroMQ hand-off, no app side:
bench_consume.py measures the whole path against the peers; this isolates the part that decides 1 KiB zstd.

    python benchmarks/bench_consume_decode.py            # both cases, best of 7
    PYTHONPATH=/other/tree python benchmarks/bench_consume_decode.py   # the same on another tree (A/B)
"""

from __future__ import annotations

import argparse
import time

import zstandard

from kqactors.cli.perf_payload import make_payloads
from kqactors.core.consumer.decoder import FetchedSlice, SliceDecoder
from kqactors.core.consumer.settings import FetchSettings
from kqactors.records import ZSTD, build_batch, compression, scan_record_set

STEP_BYTES = 1 << 20  # ctoppar.DECODE_STEP_BYTES


def record_set(size: int, codec: int, messages: int, per_batch: int = 1000) -> bytes:
    """``messages`` values of ``size`` bytes in batches of ``per_batch``; zstd frames without content size."""
    level = compression.effective_level(codec) if codec else 0
    saved = dict(compression._zstd_compressors)
    if codec == ZSTD:  # librdkafka streams its zstd frames: no content size in the frame header
        compression._zstd_compressors[level] = zstandard.ZstdCompressor(level=level, write_content_size=False)
    try:
        payloads = make_payloads(size)
        parts = []
        for base in range(0, messages, per_batch):
            batch = [(1_700_000_000_000 + i, None, payloads[i % len(payloads)], None)
                     for i in range(base, min(messages, base + per_batch))]
            parts.append(bytes(build_batch(batch, base_offset=base, codec=codec)))
    finally:
        compression._zstd_compressors.clear()
        compression._zstd_compressors.update(saved)
    return b"".join(parts)


def one_pass(answer: bytes, start: int, end: int, decoder: SliceDecoder) -> int:
    records = memoryview(answer)[start:end]
    scan = scan_record_set(records)
    sl = FetchedSlice("t", 0, 1, 0, scan.batches[-1].next_offset, records[: scan.consumed])
    total = 0
    for decoded in decoder.decode_chunks(sl, STEP_BYTES):
        total += decoded.messages
        len(decoded.frame)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    decoder = SliceDecoder(FetchSettings())
    for name, size, codec, count in (("100B", 100, 0, 50_000), ("1KiB-zstd", 1024, ZSTD, 5_000)):
        records = record_set(size, codec, count)
        answer = b"\x00" * 100 + records + b"\x00" * 100  # the slice sits inside a Fetch answer
        best = float("inf")
        for _ in range(args.repeats):
            began = time.thread_time()
            got = one_pass(answer, 100, 100 + len(records), decoder)
            best = min(best, time.thread_time() - began)
            assert got == count, got
        print(f"{name:10s} {len(records) / 1e6:6.2f} MB slice  {best / count * 1e9:7.0f} ns CPU/msg (best of "
              f"{args.repeats})")


if __name__ == "__main__":
    main()
