"""Runs in: a developer shell (one process). Micro-benchmark of the record codec's C twins against their
pure-Python references: ``pack_v2_records`` (indexing a fetched batch for the consumer) and
``RecordBatchBuilder.append_packed`` (encoding a packed PRODUCE frame). Prints µs per record, best of
repeated runs, for 100 B and 1 KiB values with 16-byte keys, without and with two headers per record.

    PYTHONPATH=. /work/venv/bin/python benchmarks/bench_native_records.py [--quick]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from kqactors.core.consumer.packing import _ENTRY
from kqactors.core.producer.packing import pack_messages
from kqactors.native import records_module
from kqactors.records import RecordBatchBuilder, build_batch
from kqactors.records.batch_v2 import BATCH_HEADER_SIZE
from kqactors.records.reader_v2 import pack_v2_records

RECORDS = 500
BASE_TS = 1_700_000_000_000


def best_us_per_record(func: Callable[[], object], budget: float) -> float:
    func()  # warm-up
    best = float("inf")
    deadline = time.perf_counter() + budget
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        func()
        best = min(best, time.perf_counter() - start)
    return best / RECORDS * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter timing budget per cell")
    args = parser.parse_args()
    budget = 0.1 if args.quick else 1.0
    native = records_module()
    if native is None:
        raise SystemExit("kqactors.native._native_records is not built (python setup.py build_ext --inplace)")
    print("| value | headers | function | Python µs/rec | C µs/rec | speed-up |")
    print("|---|---|---|---:|---:|---:|")
    for value_size in (100, 1024):
        for with_headers in (False, True):
            headers = [("trace-id", b"0123456789abcdef"), ("source", b"bench")] if with_headers else None
            messages = [(BASE_TS + i // 10, b"key-%012d" % i, bytes([97 + i % 26]) * value_size, headers)
                        for i in range(RECORDS)]
            batch = bytes(build_batch(messages, base_offset=1000))
            section = batch[BATCH_HEADER_SIZE:]
            pack_args = (section, 0, len(section), RECORDS, 0, 1000, BASE_TS, -1, 1, 0, 0)
            frame, _count, _headers = pack_messages(messages)
            cells = {
                "pack_v2_records": (
                    lambda a=pack_args: pack_v2_records(bytearray(), _ENTRY.pack, *a),
                    lambda a=pack_args: native.pack_v2_records(bytearray(), *a),
                ),
                "append_packed": (
                    lambda f=frame: RecordBatchBuilder().append_packed_py(f, 0, len(f)),
                    lambda f=frame: native.append_packed(bytearray(), f, 0, len(f), 0, None, -1),
                ),
            }
            for name, (python, c) in cells.items():
                py_us = best_us_per_record(python, budget)
                c_us = best_us_per_record(c, budget)
                label = "2" if with_headers else "0"
                print(f"| {value_size} B | {label} | {name} | {py_us:.3f} | {c_us:.3f} | {py_us / c_us:.1f}x |")


if __name__ == "__main__":
    main()
