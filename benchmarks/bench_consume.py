"""Runs in: a developer shell or CI (the driver; each measured run is a fresh child process).

Consumer benchmark: kqactors, confluent-kafka, kafka-python and aiokafka read the same pre-filled 3-partition
topic from the beginning by assign (no group), each in a fresh process; medians over repeats. Cases: 100 B
uncompressed and 1 KiB zstd. The topic of a case is filled once (by confluent-kafka, linger.ms=50) and read by
every client. Measurement rules (CPU and RSS of the whole process tree, GO/RESULT handshake): see
benchmarks/harness.py; the consume runners are benchmarks/clients/*_consume.py.

    /work/venv/bin/python benchmarks/bench_consume.py               # full run: 1M x 100 B, 200k x 1 KiB zstd
    /work/venv/bin/python benchmarks/bench_consume.py --quick       # smoke run (< 1 min)

Prints a markdown table, writes benchmarks/out/consume.json and benchmarks/consume.png. Without --bootstrap
an in-memory Tansu broker is started for the run.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import harness
import psutil
from bench_produce import available_clients
from harness import (
    BENCH_DIR,
    RunFailed,
    RunResult,
    markdown_table,
    run_client,
    summarise,
    write_chart,
    write_json,
)

from kqactors.cli.perf_payload import create_topic, make_payloads

#: client name → consume runner script (benchmarks/clients/); run_client looks runners up in harness.RUNNERS.
CONSUME_RUNNERS = {
    "kqactors": "kqactors_consume.py",
    "confluent-kafka": "confluent_kafka_consume.py",
    "kafka-python": "kafka_python_consume.py",
    "aiokafka": "aiokafka_consume.py",
}
PARTITIONS = 3


@dataclass(frozen=True)
class Case:
    name: str
    size: int
    compression: str
    default_count: int
    quick_count: int


CASES = {
    "100B": Case("100B", 100, "none", 1_000_000, 50_000),
    "1KiB-zstd": Case("1KiB-zstd", 1024, "zstd", 200_000, 20_000),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", help="bootstrap.servers (default: start an embedded Tansu broker)")
    parser.add_argument("--clients", default=",".join(CONSUME_RUNNERS))
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--repeats", type=int, default=None, help="runs per client and case (default 3; quick 1)")
    parser.add_argument("--count-scale", type=float, default=1.0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json-out", type=Path, default=BENCH_DIR / "out" / "consume.json")
    parser.add_argument("--chart", type=Path, default=BENCH_DIR / "consume.png")
    parser.add_argument("--no-chart", action="store_true")
    args = parser.parse_args(argv)
    args.clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    args.cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in args.clients if c not in CONSUME_RUNNERS] + [c for c in args.cases if c not in CASES]
    if unknown:
        parser.error(f"unknown client(s)/case(s): {unknown}")
    if args.repeats is None:
        args.repeats = 1 if args.quick else 3
    if args.repeats < 1 or args.count_scale <= 0:
        parser.error("--repeats must be >= 1 and --count-scale > 0")
    return args


def fill_topic(bootstrap: str, topic: str, count: int, size: int, compression: str) -> None:
    """Produce ``count`` messages round-robin over the partitions with confluent-kafka."""
    import confluent_kafka

    create_topic(bootstrap, topic, PARTITIONS)
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 50,
                                         "compression.type": compression, "acks": "1"})
    payloads = make_payloads(size)
    for index in range(count):
        while True:
            try:
                producer.produce(topic, payloads[index % len(payloads)], partition=index % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(300):
        raise SystemExit(f"could not fill {topic}")


def run_all(args: argparse.Namespace, bootstrap: str, clients: list[str]) -> list[RunResult]:
    harness.RUNNERS.update(CONSUME_RUNNERS)  # this driver's runs are consume runs
    results: list[RunResult] = []
    for case_name in args.cases:
        case = CASES[case_name]
        count = max(1, int((case.quick_count if args.quick else case.default_count) * args.count_scale))
        topic = f"bench-consume-{case.name.lower()}-{uuid.uuid4().hex[:8]}"
        started = time.monotonic()
        fill_topic(bootstrap, topic, count, case.size, case.compression)
        print(f"[{case.name}] filled {topic} with {count:,} messages in {time.monotonic() - started:.1f} s",
              file=sys.stderr, flush=True)
        for repeat in range(args.repeats):
            for client in clients:
                try:
                    result = run_client(client, case.name, repeat, bootstrap, topic, count, case.size,
                                        case.compression)
                except RunFailed as exc:
                    print(f"[{case.name} #{repeat + 1}] {exc}", file=sys.stderr)
                    continue
                results.append(result)
                print(f"[{case.name} #{repeat + 1}] {client:16s} {result.msgs_per_s:>10,.0f} msgs/s "
                      f"{result.mb_per_s:7.1f} MB/s  cpu {result.cpu_s:6.2f} s  "
                      f"rss {result.peak_rss_mb:6.0f} MiB  procs {result.processes}  "
                      f"received {result.delivered:,}", file=sys.stderr, flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    clients = available_clients(args.clients)
    if not clients:
        print("no client available to benchmark", file=sys.stderr)
        return 1
    broker = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        from kqactors.testing.tansu import TansuBroker

        broker = TansuBroker().start()
        bootstrap = broker.bootstrap
        print(f"embedded Tansu broker at {bootstrap}", file=sys.stderr)
    started = time.monotonic()
    try:
        results = run_all(args, bootstrap, clients)
    finally:
        if broker is not None:
            broker.stop()
    summaries = summarise(results)
    meta = {
        "python": platform.python_version(), "machine": platform.machine(), "cpus": psutil.cpu_count(),
        "broker": "embedded Tansu" if broker is not None else bootstrap, "partitions": PARTITIONS,
        "repeats": args.repeats, "quick": args.quick, "wall_s": round(time.monotonic() - started, 1),
        "cases": {name: vars(CASES[name]) for name in args.cases}, "clients": clients, "kind": "consume",
    }
    write_json(args.json_out, meta, results, summaries)
    if not args.no_chart and summaries:
        write_chart(args.chart, summaries, args.cases, args.clients)
    print(markdown_table(summaries, args.cases, args.clients))
    print(f"\n{len(results)} runs in {meta['wall_s']} s; JSON: {args.json_out}", file=sys.stderr)
    short = [r for r in results if r.delivered < r.count or r.errors]
    missing = len(args.cases) * args.repeats * len(clients) - len(results)
    return 1 if short or missing else 0


if __name__ == "__main__":
    sys.exit(main())
