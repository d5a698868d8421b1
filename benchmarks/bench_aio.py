"""Runs in: a developer shell (the driver; each measured run is a fresh child process).

Asyncio benchmark: kqactors.aio against aiokafka (and confluent_kafka.aio), in one run, on one broker.

- ``produce``: 100,000 x 100 B, awaited batches: 1,000 produce() awaits gathered, then the next 1,000 (a fresh
  3-partition topic per run, no key). msgs/s = messages / (first produce() → last batch delivered).
- ``consume``: 100,000 x 100 B pre-filled (by confluent-kafka, round-robin over 3 partitions), read by assign
  from the beginning; msgs/s = messages / (assign → last message).

Each client runs in a fresh process (benchmarks/clients/{kqactors,aiokafka,confluent_kafka}_aio.py, loops in
clients/_aio_common.py); CPU and peak RSS cover the whole process tree (benchmarks/harness.py's rules).

    python benchmarks/bench_aio.py                      # both cases, 3 repeats, embedded Tansu
    python benchmarks/bench_aio.py --broker mock        # the librdkafka mock cluster instead
    python benchmarks/bench_aio.py --quick              # smoke run: 20,000 messages, 1 repeat
    python benchmarks/bench_aio.py --linger-ms 1 --clients kqactors-aio,kqactors-aio-hosts0,aiokafka-aio

Producers: acks=1 and linger.ms=5 (--linger-ms) for every client; ``kqactors-aio-hosts0`` is kqactors with
kqactors.hosts=0 (toppars on the main host: fewer process hops per awaited batch).

Prints a markdown table (last column: kqactors-aio's msgs/s over the client's) and writes
benchmarks/out/aio.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import platform
import sys
import time
import uuid
from pathlib import Path

import harness
import psutil
from bench_consume import fill_topic
from harness import (
    BENCH_DIR,
    RunFailed,
    RunResult,
    broker_for_run,
    markdown_table,
    run_client,
    summarise,
    write_json,
)

#: client name → runner script in benchmarks/clients/
AIO_RUNNERS = {
    "kqactors-aio": "kqactors_aio.py",
    "kqactors-aio-hosts0": "kqactors_aio.py",
    "aiokafka-aio": "aiokafka_aio.py",
    "confluent-kafka-aio": "confluent_kafka_aio.py",
}
CLIENT_MODULES = {"kqactors-aio": "kqactors.aio", "kqactors-aio-hosts0": "kqactors.aio", "aiokafka-aio": "aiokafka",
                  "confluent-kafka-aio": "confluent_kafka.aio"}
#: runner arguments of a client variant
CLIENT_ARGS = {"kqactors-aio-hosts0": ("--hosts", "0")}
DEFAULT_CLIENTS = ("kqactors-aio", "aiokafka-aio", "confluent-kafka-aio")
CASES = ("produce", "consume")
PARTITIONS = 3
SIZE = 100
COUNT = 100_000
QUICK_COUNT = 20_000
GATHER = 1000


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", help="bootstrap.servers (default: start an embedded broker, see --broker)")
    parser.add_argument("--broker", choices=harness.BROKER_KINDS, default="tansu")
    parser.add_argument("--clients", default=",".join(DEFAULT_CLIENTS),
                        help=f"any of {', '.join(AIO_RUNNERS)} (default: {', '.join(DEFAULT_CLIENTS)})")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--count", type=int, default=None, help=f"messages per run (default {COUNT:,})")
    parser.add_argument("--gather", type=int, default=GATHER, help=f"produce awaits per batch (default {GATHER})")
    parser.add_argument("--linger-ms", type=float, default=5.0, help="every producer's linger (default 5)")
    parser.add_argument("--repeats", type=int, default=None, help="runs per client and case (default 3; quick 1)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json-out", type=Path, default=BENCH_DIR / "out" / "aio.json")
    args = parser.parse_args(argv)
    args.clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    args.cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in args.clients if c not in AIO_RUNNERS] + [c for c in args.cases if c not in CASES]
    if unknown:
        parser.error(f"unknown client(s)/case(s): {unknown}")
    if args.count is None:
        args.count = QUICK_COUNT if args.quick else COUNT
    if args.repeats is None:
        args.repeats = 1 if args.quick else 3
    if args.count < 1 or args.repeats < 1 or args.gather < 1:
        parser.error("--count, --repeats and --gather must be >= 1")
    return args


def available(clients: list[str]) -> list[str]:
    usable = []
    for client in clients:
        try:
            found = importlib.util.find_spec(CLIENT_MODULES[client]) is not None
        except ImportError:
            found = False
        if found:
            usable.append(client)
        else:
            print(f"skipping {client}: {CLIENT_MODULES[client]} is not importable", file=sys.stderr)
    return usable


def run_all(args: argparse.Namespace, broker: harness.RunBroker, clients: list[str]) -> list[RunResult]:
    harness.RUNNERS.update(AIO_RUNNERS)
    results: list[RunResult] = []
    consume_topic = ""
    if "consume" in args.cases:
        consume_topic = f"bench-aio-consume-{uuid.uuid4().hex[:8]}"
        started = time.monotonic()
        fill_topic(broker, consume_topic, args.count, SIZE, "none")
        print(f"[consume] filled {consume_topic} with {args.count:,} messages in {time.monotonic() - started:.1f} s",
              file=sys.stderr, flush=True)
    for case in args.cases:
        for repeat in range(args.repeats):
            for client in clients:
                if case == "produce":
                    topic = f"bench-aio-produce-{uuid.uuid4().hex[:8]}"
                    broker.create_topic(topic, PARTITIONS)
                    extra: tuple[str, ...] = ("--mode", "produce", "--gather", str(args.gather),
                                              "--linger-ms", str(args.linger_ms))
                else:
                    topic, extra = consume_topic, ("--mode", "consume")
                extra += CLIENT_ARGS.get(client, ())
                try:
                    result = run_client(client, case, repeat, broker.bootstrap, topic, args.count, SIZE, "none",
                                        extra_args=extra)
                except RunFailed as exc:
                    print(f"[{case} #{repeat + 1}] {exc}", file=sys.stderr)
                    continue
                results.append(result)
                first = result.extra.get("first_message_s")
                note = f"  first message after {first:.2f} s" if first is not None else ""
                print(f"[{case} #{repeat + 1}] {client:20s} {result.msgs_per_s:>10,.0f} msgs/s  cpu {result.cpu_s:6.2f} s"
                      f"  rss {result.peak_rss_mb:5.0f} MiB  procs {result.processes}  done {result.delivered:,}"
                      f"  errors {sum(result.errors.values())}{note}", file=sys.stderr, flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    clients = available(args.clients)
    if not clients:
        print("no client available to benchmark", file=sys.stderr)
        return 1
    started = time.monotonic()
    with broker_for_run(args.bootstrap, args.broker) as broker:
        results = run_all(args, broker, clients)
        kind = broker.kind
    summaries = summarise(results)
    meta = {"python": platform.python_version(), "machine": platform.machine(), "cpus": psutil.cpu_count(),
            "load_avg": list(psutil.getloadavg()), "broker": args.bootstrap or kind, "partitions": PARTITIONS,
            "size": SIZE, "count": args.count, "gather": args.gather, "linger_ms": args.linger_ms,
            "repeats": args.repeats,
            "wall_s": round(time.monotonic() - started, 1), "clients": clients, "kind": "aio"}
    write_json(args.json_out, meta, results, summaries)
    if summaries:
        print(markdown_table(summaries, args.cases, clients, reference="kqactors-aio"))
    print(f"\n{len(results)} runs in {meta['wall_s']} s; JSON: {args.json_out}", file=sys.stderr)
    short = [r for r in results if r.delivered < r.count or r.errors]
    return 1 if short or len(results) < len(clients) * len(args.cases) * args.repeats else 0


if __name__ == "__main__":
    sys.exit(main())
