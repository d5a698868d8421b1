"""Runs in: a developer shell or CI (the driver; each measured run is a fresh child process).

Producer benchmark: kqactors, confluent-kafka, kafka-python and aiokafka against the same broker, in one
run. Cases: 100 B uncompressed, 1 KiB lz4, 1 KiB zstd; acks=1; a fresh 3-partition topic per run; each
client in a fresh process; medians over repeats. Measurement and fairness rules: see benchmarks/harness.py.

    /work/venv/bin/python benchmarks/bench_produce.py                 # full run (< 10 min on 2 cores)
    /work/venv/bin/python benchmarks/bench_produce.py --quick         # smoke run (< 1 min)
    /work/venv/bin/python benchmarks/bench_produce.py --clients confluent-kafka,aiokafka --cases 100B
    /work/venv/bin/python benchmarks/bench_produce.py --clients kqactors,confluent-kafka --tree before=/tmp/base

``--tree LABEL=PATH`` adds a client ``kqactors-LABEL``: kqactors imported from PATH (another source tree, its
native parts built), run in the same rounds as the others, for a same-run before/after.

Prints a markdown table (with kqactors/peer ratios), writes benchmarks/out/produce.json and a chart at
benchmarks/produce.png. Without --bootstrap an in-memory Tansu broker is started for the run (``--broker mock``:
the librdkafka mock cluster instead).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import platform
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import harness
import psutil
from harness import (
    BENCH_DIR,
    RUNNERS,
    RunBroker,
    RunFailed,
    RunResult,
    broker_for_run,
    markdown_table,
    run_client,
    summarise,
    write_chart,
    write_json,
)


@dataclass(frozen=True)
class Case:
    name: str
    size: int
    compression: str
    default_count: int
    quick_count: int
    linger_ms: int = 5


CASES = {
    "100B": Case("100B", 100, "none", 200_000, 20_000),
    "1KiB-lz4": Case("1KiB-lz4", 1024, "lz4", 100_000, 10_000),
    "1KiB-zstd": Case("1KiB-zstd", 1024, "zstd", 100_000, 10_000),
    # linger.ms=0, the low-latency setting: throughput must still come from batching what accumulates
    "100B-linger0": Case("100B-linger0", 100, "none", 200_000, 20_000, linger_ms=0),
}
PARTITIONS = 3
#: Batch size (bytes) given to the peers without librdkafka's 1 MB batches, per case ("*" = any other case).
#: Each is the client's fastest in a 16 KiB / 256 KiB / 1 MiB sweep on this harness (benchmarks/RESULTS.md):
#: kafka-python 1 MiB (librdkafka's batch.size) everywhere; aiokafka 256 KiB for 1 KiB zstd and its 16 KiB
#: default otherwise (its lz4 compresses at a high level, which gets slower with bigger batches).
PEER_BATCH_BYTES = {
    "kafka-python": {"*": 1024 * 1024},
    "aiokafka": {"1KiB-zstd": 256 * 1024, "*": 16 * 1024},
}
#: The module each client's runner needs; a client whose module is missing is skipped with a notice.
CLIENT_MODULES = {"kqactors": "kqactors.client.producer.producer", "kqactors-hosts0": "kqactors.client.producer.producer",
                  "confluent-kafka": "confluent_kafka",
                  "kafka-python": "kafka", "aiokafka": "aiokafka"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", help="bootstrap.servers (default: start an embedded broker, see --broker)")
    parser.add_argument("--broker", choices=harness.BROKER_KINDS, default="tansu",
                        help="the embedded broker when no --bootstrap is given (default tansu)")
    parser.add_argument("--clients", default=",".join(RUNNERS),
                        help=f"comma-separated subset of {','.join(RUNNERS)}")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated subset of {','.join(CASES)}")
    parser.add_argument("--repeats", type=int, default=None, help="runs per client and case (default 3; quick 1)")
    parser.add_argument("--count-scale", type=float, default=1.0,
                        help="multiply every case's message count (e.g. 0.5 for a shorter run)")
    parser.add_argument("--quick", action="store_true", help="smoke run: small counts, one repeat")
    parser.add_argument("--json-out", type=Path, default=BENCH_DIR / "out" / "produce.json")
    parser.add_argument("--chart", type=Path, default=BENCH_DIR / "produce.png")
    parser.add_argument("--no-chart", action="store_true")
    parser.add_argument("--tree", action="append", default=[], metavar="LABEL=PATH",
                        help="also run kqactors imported from PATH, as client kqactors-LABEL")
    args = parser.parse_args(argv)
    args.clients = _select(args.clients, RUNNERS, parser, "client")
    args.trees = {}
    for item in args.tree:
        label, sep, path = item.partition("=")
        if not sep or not label or not os.path.isdir(os.path.join(path, "kqactors")):
            parser.error(f"--tree wants LABEL=PATH with PATH/kqactors a directory: {item!r}")
        name = f"kqactors-{label}"
        args.trees[name] = os.path.abspath(path)
        at = args.clients.index("kqactors") + 1 if "kqactors" in args.clients else 0
        args.clients.insert(at, name)
    args.cases = _select(args.cases, CASES, parser, "case")
    if args.repeats is None:
        args.repeats = 1 if args.quick else 3
    if args.repeats < 1 or args.count_scale <= 0:
        parser.error("--repeats must be >= 1 and --count-scale > 0")
    return args


def _select(text: str, known: dict, parser: argparse.ArgumentParser, what: str) -> list[str]:
    chosen = [item.strip() for item in text.split(",") if item.strip()]
    unknown = [item for item in chosen if item not in known]
    if unknown or not chosen:
        parser.error(f"unknown {what}(s) {unknown}; choose from {', '.join(known)}")
    return chosen


def available_clients(clients: list[str], trees: dict[str, str]) -> list[str]:
    usable = []
    for client in clients:
        if client in trees:
            usable.append(client)
            continue
        try:
            found = importlib.util.find_spec(CLIENT_MODULES[client]) is not None
        except ImportError:
            found = False
        if found:
            usable.append(client)
        else:
            print(f"skipping {client}: {CLIENT_MODULES[client]} is not importable", file=sys.stderr)
    return usable


def runner_args(client: str, case: str) -> tuple[str, ...]:
    """Extra runner arguments for ``client`` in ``case`` (the case's linger, the peers' batch size)."""
    linger = ("--linger-ms", str(CASES[case].linger_ms)) if case in CASES else ()
    sizes = PEER_BATCH_BYTES.get(client)
    if not sizes:
        return linger
    return (*linger, "--batch-size", str(sizes.get(case, sizes["*"])))


def run_tree_client(label: str, tree: str, *args: object, **kwargs: object) -> RunResult:
    """One kqactors run imported from another source tree: the runner inherits PYTHONPATH with ``tree`` first."""
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [tree, old]))
    try:
        result = run_client("kqactors", *args, **kwargs)
    finally:
        if old is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = old
    return dataclasses.replace(result, client=label)


def run_all(args: argparse.Namespace, broker: RunBroker, clients: list[str]) -> list[RunResult]:
    """Every case × repeat × client; clients interleave within a repeat so drift hits them alike."""
    results: list[RunResult] = []
    for case_name in args.cases:
        case = CASES[case_name]
        count = max(1, int((case.quick_count if args.quick else case.default_count) * args.count_scale))
        for repeat in range(args.repeats):
            for client in clients:
                topic = f"bench-{case.name.lower()}-{client}-{uuid.uuid4().hex[:8]}"
                broker.create_topic(topic, PARTITIONS)
                run_args = (case.name, repeat, broker.bootstrap, topic, count, case.size, case.compression)
                try:
                    if client in args.trees:
                        result = run_tree_client(client, args.trees[client], *run_args,
                                                 extra_args=runner_args("kqactors", case.name))
                    else:
                        result = run_client(client, *run_args, extra_args=runner_args(client, case.name))
                except RunFailed as exc:
                    print(f"[{case.name} #{repeat + 1}] {exc}", file=sys.stderr)
                    continue
                results.append(result)
                print(f"[{case.name} #{repeat + 1}] {client:16s} {result.msgs_per_s:>10,.0f} msgs/s "
                      f"{result.mb_per_s:7.1f} MB/s  cpu {result.cpu_s:6.2f} s  "
                      f"rss {result.peak_rss_mb:6.0f} MiB  procs {result.processes}  "
                      f"errors {sum(result.errors.values())}  load {os.getloadavg()[0]:.1f}",
                      file=sys.stderr, flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    clients = available_clients(args.clients, args.trees)
    if not clients:
        print("no client available to benchmark", file=sys.stderr)
        return 1
    started = time.monotonic()
    with broker_for_run(args.bootstrap, args.broker) as broker:
        results = run_all(args, broker, clients)
    summaries = summarise(results)
    meta = {
        "python": platform.python_version(), "machine": platform.machine(), "cpus": psutil.cpu_count(),
        "broker": args.bootstrap or broker.kind, "partitions": PARTITIONS,
        "acks": 1, "repeats": args.repeats, "quick": args.quick, "wall_s": round(time.monotonic() - started, 1),
        "cases": {name: vars(CASES[name]) for name in args.cases}, "clients": clients, "trees": args.trees,
    }
    write_json(args.json_out, meta, results, summaries)
    if not args.no_chart and summaries:
        write_chart(args.chart, summaries, args.cases, args.clients)
    print(markdown_table(summaries, args.cases, args.clients))
    print(f"\n{len(results)} runs in {meta['wall_s']} s; JSON: {args.json_out}", file=sys.stderr)
    failed = sum(1 for r in results if r.errors) + (len(args.cases) * args.repeats * len(clients) - len(results))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
