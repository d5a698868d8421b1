"""Runs in: a developer shell or CI (the driver; each measured run is a fresh child process).

Consumer benchmark: kqactors, confluent-kafka, kafka-python and aiokafka read the same pre-filled 3-partition
topic from the beginning by assign (no group), each in a fresh process; medians over repeats. Cases: 100 B
uncompressed and 1 KiB zstd by assign, the 100 B topic again by subscribe (fresh group, join included), and
``latency`` (kqactors and confluent-kafka: produce at 1,000 msg/s with linger.ms=0 → consume, p50/p99 of
produce() → consume() return, on an empty topic per run). The topic of a case is filled once (by
confluent-kafka, linger.ms=50) and read by every client. Measurement rules (CPU and RSS of the whole process tree, GO/RESULT handshake): see
benchmarks/harness.py; the consume runners are benchmarks/clients/*_consume.py.

    /work/venv/bin/python benchmarks/bench_consume.py               # full run: every case
    /work/venv/bin/python benchmarks/bench_consume.py --quick       # smoke run (< 1 min)

Prints a markdown table, writes benchmarks/out/consume.json and benchmarks/consume.png. Without --bootstrap
an in-memory Tansu broker is started for the run (``--broker mock``: the librdkafka mock cluster instead).

    python benchmarks/bench_consume.py --cases 1KiB-zstd,100B --clients kqactors,confluent-kafka \
        --tree before=/tmp/base --timeline

``--tree LABEL=PATH`` adds a client ``kqactors-LABEL``: the kqactors runner with kqactors imported from PATH (a
checkout of other code, its native extensions built), run alternately with the others, so a change is measured
before/after under the same load; ``--variant LABEL:KEY=VALUE,...`` adds one with those properties (settings A/B,
e.g. ``--variant hosts1:kqactors.hosts=1``). ``--timeline`` prints where each run's time went (messages per 50 ms, the
longest wait for a message, GC pauses, kqactors' placement moves).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import harness
import psutil
from bench_produce import CLIENT_MODULES
from harness import (
    BENCH_DIR,
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

from kqactors.cli.perf_payload import make_payloads

#: client name → consume runner script (benchmarks/clients/); run_client looks runners up in harness.RUNNERS.
CONSUME_RUNNERS = {
    "kqactors": "kqactors_consume.py",
    "kqactors-hosts0": "kqactors_hosts0_consume.py",
    "confluent-kafka": "confluent_kafka_consume.py",
    "confluent-kafka-tuned": "confluent_kafka_tuned_consume.py",
    "kafka-python": "kafka_python_consume.py",
    "aiokafka": "aiokafka_consume.py",
}
PARTITIONS = 3
#: the throughput cases compare the four clients at their defaults, and confluent-kafka tuned for throughput
#: (fetch.queue.backoff.ms=10, clients/confluent_kafka_tuned_consume.py)
STANDARD_CLIENTS = ("kqactors", "confluent-kafka", "confluent-kafka-tuned", "kafka-python", "aiokafka")


@dataclass(frozen=True)
class Case:
    name: str
    size: int
    compression: str
    default_count: int
    quick_count: int
    #: runner mode: assign (from the beginning), subscribe (fresh group, earliest) or latency
    mode: str = "assign"
    #: read the topic filled for this case instead of filling one (same messages, other mode)
    topic_of: str | None = None
    #: clients that run this case
    clients: tuple[str, ...] = STANDARD_CLIENTS
    runner_args: tuple[str, ...] = ()


#: Tansu holds an empty Fetch for the whole fetch.wait.max.ms even when data arrives meanwhile (a real Kafka
#: broker answers as soon as fetch.min.bytes is there), so on Tansu that wait, not the client, bounds the
#: end-to-end latency; the clients' default (500 ms) would measure Tansu's timer. Both clients get 10 ms: at
#: 1 ms the fetch polling (3 partitions, on 2 cores shared with the broker and the producer) stalled delivery
#: for seconds for both clients, at 10 ms neither stalls.
LATENCY_FETCH_WAIT_MS = 10
LATENCY_RATE = 1000

CASES = {
    "100B": Case("100B", 100, "none", 1_000_000, 50_000),
    "1KiB-zstd": Case("1KiB-zstd", 1024, "zstd", 200_000, 20_000),
    "100B-subscribe": Case("100B-subscribe", 100, "none", 1_000_000, 50_000, mode="subscribe", topic_of="100B"),
    "latency": Case("latency", 100, "none", 5_000, 2_000, mode="latency",
                    clients=("kqactors", "kqactors-hosts0", "confluent-kafka"),
                    runner_args=("--rate", str(LATENCY_RATE))),
}


def available_clients(clients: list[str]) -> list[str]:
    """The clients whose library is importable here (a skipped one is said on stderr)."""
    import importlib.util

    modules = {**CLIENT_MODULES, "confluent-kafka-tuned": CLIENT_MODULES["confluent-kafka"]}
    modules.update({client: CLIENT_MODULES["kqactors"] for client in clients if client.startswith("kqactors-")})
    usable = []
    for client in clients:
        try:
            found = importlib.util.find_spec(modules[client]) is not None
        except ImportError:
            found = False
        if found:
            usable.append(client)
        else:
            print(f"skipping {client}: {modules[client]} is not importable", file=sys.stderr)
    return usable


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", help="bootstrap.servers (default: start an embedded broker, see --broker)")
    parser.add_argument("--broker", choices=harness.BROKER_KINDS, default="tansu",
                        help="the embedded broker when no --bootstrap is given (default tansu)")
    parser.add_argument("--clients", default=",".join(CONSUME_RUNNERS))
    parser.add_argument("--fetch-wait-ms", type=int, default=LATENCY_FETCH_WAIT_MS,
                        help=f"fetch.wait.max.ms of the latency case (default {LATENCY_FETCH_WAIT_MS})")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--repeats", type=int, default=None, help="runs per client and case (default 3; quick 1)")
    parser.add_argument("--count-scale", type=float, default=1.0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json-out", type=Path, default=BENCH_DIR / "out" / "consume.json")
    parser.add_argument("--chart", type=Path, default=BENCH_DIR / "consume.png")
    parser.add_argument("--no-chart", action="store_true")
    parser.add_argument("--timeline", action="store_true",
                        help="each run also prints its messages per 50 ms (k), the longest wait for a message, "
                             "GC pauses and kqactors' placement moves (where a slow run lost its time)")
    parser.add_argument("--kq-config", action="append", default=[], metavar="KEY=VALUE",
                        help="one more property for the kqactors clients' consumers (repeatable; experiments)")
    parser.add_argument("--tree", action="append", default=[], metavar="LABEL=PATH",
                        help="also run kqactors imported from PATH, as client kqactors-LABEL (before/after)")
    parser.add_argument("--variant", action="append", default=[], metavar="LABEL:KEY=VALUE[,KEY=VALUE]",
                        help="also run kqactors with these properties, as client kqactors-LABEL (settings A/B)")
    args = parser.parse_args(argv)
    args.clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    args.trees = {}  # variant client → its kqactors source tree
    args.variants = {}  # variant client → its extra properties
    added = []
    for item in args.tree:
        label, sep, path = item.partition("=")
        if not sep or not label or not os.path.isdir(os.path.join(path, "kqactors")):
            parser.error(f"--tree wants LABEL=PATH with PATH/kqactors a directory: {item!r}")
        args.trees[f"kqactors-{label}"] = os.path.abspath(path)
        added.append(f"kqactors-{label}")
    for item in args.variant:
        label, sep, settings = item.partition(":")
        pairs = [pair.strip() for pair in settings.split(",") if pair.strip()]
        if not sep or not label or not pairs or not all("=" in pair for pair in pairs):
            parser.error(f"--variant wants LABEL:KEY=VALUE[,KEY=VALUE]: {item!r}")
        args.variants[f"kqactors-{label}"] = pairs
        added.append(f"kqactors-{label}")
    for client in added:
        if client in CONSUME_RUNNERS or added.count(client) > 1:
            parser.error(f"{client} names two clients")
    for client in reversed(added):
        CONSUME_RUNNERS[client] = CONSUME_RUNNERS["kqactors"]
        at = args.clients.index("kqactors") + 1 if "kqactors" in args.clients else 0
        args.clients.insert(at, client)
    args.kq_variants = set(added)
    args.cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in args.clients if c not in CONSUME_RUNNERS] + [c for c in args.cases if c not in CASES]
    if unknown:
        parser.error(f"unknown client(s)/case(s): {unknown}")
    if args.repeats is None:
        args.repeats = 1 if args.quick else 3
    if args.repeats < 1 or args.count_scale <= 0:
        parser.error("--repeats must be >= 1 and --count-scale > 0")
    return args


def fill_topic(broker: RunBroker, topic: str, count: int, size: int, compression: str) -> None:
    """Produce ``count`` messages round-robin over the partitions with confluent-kafka."""
    import confluent_kafka

    broker.create_topic(topic, PARTITIONS)
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50,
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


def run_all(args: argparse.Namespace, broker: RunBroker, clients: list[str]) -> list[RunResult]:
    harness.RUNNERS.update(CONSUME_RUNNERS)  # this driver's runs are consume runs
    results: list[RunResult] = []
    topics: dict[str, tuple[str, int]] = {}
    for case_name in args.cases:
        case = CASES[case_name]
        count = max(1, int((case.quick_count if args.quick else case.default_count) * args.count_scale))
        if case.topic_of in topics:
            topic, count = topics[case.topic_of]
        elif case.mode == "latency":
            topic = ""  # created per run below
        else:
            topic = f"bench-consume-{case.name.lower()}-{uuid.uuid4().hex[:8]}"
            started = time.monotonic()
            fill_topic(broker, topic, count, case.size, case.compression)
            print(f"[{case.name}] filled {topic} with {count:,} messages in {time.monotonic() - started:.1f} s",
                  file=sys.stderr, flush=True)
        topics[case.name] = (topic, count)
        case_extra = ("--mode", case.mode, *case.runner_args)
        if case.mode == "latency":
            case_extra += ("--fetch-wait-ms", str(args.fetch_wait_ms))
        elif args.timeline:
            case_extra += ("--timeline",)
        for repeat in range(args.repeats):
            for client in clients:
                if ("kqactors" if client in args.kq_variants else client) not in case.clients:
                    continue
                extra = case_extra
                if client.startswith("kqactors"):
                    extra += tuple(f"--config={item}" for item in args.kq_config + args.variants.get(client, []))
                if case.mode == "latency":  # an empty topic per run: no run reads another's traffic
                    topic = f"bench-latency-{uuid.uuid4().hex[:8]}"
                    broker.create_topic(topic, PARTITIONS)
                tree = args.trees.get(client)
                saved = os.environ.get("PYTHONPATH")
                if tree is not None:  # the runner process inherits it: kqactors from that tree
                    os.environ["PYTHONPATH"] = tree + (os.pathsep + saved if saved else "")
                try:
                    result = run_client(client, case.name, repeat, broker.bootstrap, topic, count, case.size,
                                        case.compression, extra_args=extra)
                except RunFailed as exc:
                    print(f"[{case.name} #{repeat + 1}] {exc}", file=sys.stderr)
                    continue
                finally:
                    if tree is not None:
                        if saved is None:
                            os.environ.pop("PYTHONPATH", None)
                        else:
                            os.environ["PYTHONPATH"] = saved
                results.append(result)
                first = (f"  first message after {result.extra['first_message_s']:.1f} s"
                         if "first_message_s" in result.extra else "")
                latency = first + (f"  p50 {result.extra['p50_ms']:.2f} ms p99 {result.extra['p99_ms']:.2f} ms"
                           if "p99_ms" in result.extra else "")
                print(f"[{case.name} #{repeat + 1}] {client:16s} {result.msgs_per_s:>10,.0f} msgs/s "
                      f"{result.mb_per_s:7.1f} MB/s  cpu {result.cpu_s:6.2f} s  "
                      f"rss {result.peak_rss_mb:6.0f} MiB  procs {result.processes}  "
                      f"received {result.delivered:,}{latency}", file=sys.stderr, flush=True)
                if "timeline" in result.extra:
                    x = result.extra
                    moves = (f"  placement moves {x['placement_moves']} (at ms {x['placement_moves_at_ms']})"
                             if "placement_moves" in x else "")
                    print(f"    longest wait {x['longest_gap_ms']:.0f} ms at {x['longest_gap_at_ms']:.0f} ms  "
                          f"gc {x['gc_ms']:.0f} ms (max {x['gc_max_ms']:.0f}){moves}\n"
                          f"    k msgs per {x['timeline_step_ms']:.0f} ms: "
                          + " ".join(str(round(n / 1000)) for n in x["timeline"]), file=sys.stderr, flush=True)
                    if x.get("placement_log"):
                        print("    placement: " + "; ".join(f"{ms} ms {what}" for ms, what in x["placement_log"]),
                              file=sys.stderr, flush=True)
    return results


def latency_table(results: list[RunResult], clients: list[str]) -> str:
    """End-to-end latency (produce() call → returned by consume()), medians over repeats of each percentile."""
    lines = ["| client | msgs | p50 ms | p99 ms | max ms | fetch.wait.max.ms | rate msg/s |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for client in clients:
        runs = [r for r in results if r.client == client and "p99_ms" in r.extra]
        if not runs:
            continue
        med = {k: statistics.median(r.extra[k] for r in runs) for k in ("p50_ms", "p99_ms", "max_ms")}
        lines.append(f"| {client} | {runs[0].delivered:,} | {med['p50_ms']:.2f} | {med['p99_ms']:.2f} | "
                     f"{med['max_ms']:.1f} | {runs[0].extra.get('fetch_wait_max_ms')} | {runs[0].extra.get('rate'):.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    clients = available_clients(args.clients)
    if not clients:
        print("no client available to benchmark", file=sys.stderr)
        return 1
    started = time.monotonic()
    with broker_for_run(args.bootstrap, args.broker) as broker:
        results = run_all(args, broker, clients)
    throughput = [r for r in results if CASES[r.case].mode != "latency"]
    summaries = summarise(throughput)
    meta = {
        "python": platform.python_version(), "machine": platform.machine(), "cpus": psutil.cpu_count(),
        "broker": args.bootstrap or broker.kind, "partitions": PARTITIONS,
        "repeats": args.repeats, "quick": args.quick, "wall_s": round(time.monotonic() - started, 1),
        "cases": {name: vars(CASES[name]) for name in args.cases}, "clients": clients, "kind": "consume",
        "latency_fetch_wait_max_ms": args.fetch_wait_ms, "latency_rate": LATENCY_RATE,
    }
    write_json(args.json_out, meta, results, summaries)
    throughput_cases = [c for c in args.cases if CASES[c].mode != "latency"]
    shown = [c for c in args.clients if c in STANDARD_CLIENTS or c in args.kq_variants]
    if not args.no_chart and summaries:
        write_chart(args.chart, summaries, throughput_cases, shown)
    if summaries:
        print(markdown_table(summaries, throughput_cases, shown))
    latency = [r for r in results if CASES[r.case].mode == "latency"]
    if latency:
        print("\n" + latency_table(latency, clients))
    print(f"\n{len(results)} runs in {meta['wall_s']} s; JSON: {args.json_out}", file=sys.stderr)
    short = [r for r in results if r.delivered < r.count or r.errors]
    expected = sum(len([c for c in clients if ("kqactors" if c in args.kq_variants else c) in CASES[name].clients])
                   for name in args.cases)
    missing = expected * args.repeats - len(results)
    return 1 if short or missing else 0


if __name__ == "__main__":
    sys.exit(main())
