"""Runs in: a developer shell (one process, no broker). The consumer's host-side CPU per message, alone.

What a toppar host does with one partition's share of a Fetch answer, timed with the thread's CPU clock (so
other processes on a loaded machine barely move it): the broker actor's header scan (``scan_record_set``),
then the ctoppar's decode into app frames (``SliceDecoder.decode_chunks`` in 1 MiB steps, each frame built).
The slice is a view into a larger answer, as the broker actor hands it over. Batches are built as librdkafka
writes them: 1,000 records per batch, zstd frames without a content size. Two more columns: ``receive``, the
broker connection reading that answer from 256 KiB socket reads (``core/connection.py``; the socket's own copy
is stood in for by one memcpy per read), and ``app take``, the app's consume(1000) work per message on the
decoded frames (``MessageBatch.take``). No ZeroMQ hand-off: bench_consume.py measures the whole path against
the peers; this isolates the parts.

    python benchmarks/bench_consume_decode.py            # both cases, best of 7
    PYTHONPATH=/other/tree python benchmarks/bench_consume_decode.py   # the same on another tree (A/B)
"""

from __future__ import annotations

import argparse
import struct
import time

import zstandard

from kqactors.cli.perf_payload import make_payloads
from kqactors.core.consumer.decoder import FetchedSlice, SliceDecoder
from kqactors.core.consumer.packing import MessageBatch
from kqactors.core.consumer.settings import FetchSettings
from kqactors.records import ZSTD, build_batch, compression, scan_record_set

STEP_BYTES = 1 << 20  # ctoppar.DECODE_STEP_BYTES
READ_BYTES = 256 * 1024  # the broker actor's socket reads


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


def decoded_frames(answer: bytes, start: int, end: int, decoder: SliceDecoder) -> list[bytes]:
    records = memoryview(answer)[start:end]
    scan = scan_record_set(records)
    sl = FetchedSlice("t", 0, 1, 0, scan.batches[-1].next_offset, records[: scan.consumed])
    return [bytes(decoded.frame) for decoded in decoder.decode_chunks(sl, STEP_BYTES)]


def one_pass(answer: bytes, start: int, end: int, decoder: SliceDecoder) -> int:
    records = memoryview(answer)[start:end]
    scan = scan_record_set(records)
    sl = FetchedSlice("t", 0, 1, 0, scan.batches[-1].next_offset, records[: scan.consumed])
    total = 0
    for decoded in decoder.decode_chunks(sl, STEP_BYTES):
        total += decoded.messages
        len(decoded.frame)
    return total


def receive_pass(answer: bytes) -> float:
    """CPU of reading ``answer`` as one Fetch response through a broker connection, in 256 KiB reads."""
    from kqactors.core.connection import Connection, ConnState, Request

    conn = Connection()
    conn.state = ConnState.UP  # skip the handshake: only the receive side is timed
    conn.enqueue(Request(1, 11, [b"x"]), 0.0)
    corr = next(iter(conn.in_flight))
    stream = memoryview(struct.pack(">ii", len(answer) + 4, corr) + answer)
    socket_buffer = memoryview(bytearray(READ_BYTES))
    direct = hasattr(conn, "receive_buffer")  # older trees: feed() of what the actor read
    began = time.thread_time()
    pos, done = 0, []
    while pos < len(stream):
        if direct:
            buf = conn.receive_buffer()
            count = min(len(buf), READ_BYTES, len(stream) - pos)
            buf[:count] = stream[pos:pos + count]  # the kernel's copy into recv_into's buffer
            done += conn.received(count, 0.0)
        else:
            count = min(READ_BYTES, len(stream) - pos)
            socket_buffer[:count] = stream[pos:pos + count]
            done += conn.feed(socket_buffer[:count], 0.0)
        pos += count
    spent = time.thread_time() - began
    assert len(done) == 1 and len(done[0].response) == len(answer)
    return spent


def take_pass(frames: list[bytes]) -> tuple[float, int]:
    """CPU of the app taking every message of ``frames`` 1,000 at a time (consume(1000)'s per-batch work)."""
    began = time.thread_time()
    taken = 0
    for frame in frames:
        batch = MessageBatch("t", 0, frame, 1)
        while len(batch):
            taken += len(batch.take(1000)[0])
    return time.thread_time() - began, taken


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
        receive = min(receive_pass(answer) for _ in range(args.repeats))
        frames = decoded_frames(answer, 100, 100 + len(records), decoder)
        take = float("inf")
        for _ in range(args.repeats):
            spent, taken = take_pass(frames)
            take = min(take, spent)
            assert taken == count, taken
        print(f"{name:10s} {len(records) / 1e6:6.2f} MB slice  receive {receive / count * 1e9:5.0f}  "
              f"scan+decode {best / count * 1e9:5.0f}  app take {take / count * 1e9:5.0f} ns CPU/msg "
              f"(best of {args.repeats})")


if __name__ == "__main__":
    main()
