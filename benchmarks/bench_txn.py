"""Runs in: a developer shell (the driver) and, with ``--runner``, each measured run's fresh child process.

Transactional produce benchmark: kqactors and confluent-kafka, in one run against the same broker. Each run
produces ``count`` messages of 100 B (uncompressed, no key) to a fresh 3-partition topic in transactions of
10,000 messages (begin_transaction, produce, commit_transaction, which flushes), with the same config
(transactional.id, linger.ms=5; acks=all and idempotence as transactions require). Measured as in
bench_produce.py, through benchmarks/harness.py (a fresh process per run, CPU and RSS of its whole process tree,
the READY/GO/RESULT handshake of benchmarks/clients/_common.py): msgs/s from the first produce() to the last
commit's return, and the median commit_transaction() time.

    /work/venv/bin/python benchmarks/bench_txn.py                     # 3 repeats x 200,000 messages
    /work/venv/bin/python benchmarks/bench_txn.py --quick             # smoke run
    /work/venv/bin/python benchmarks/bench_txn.py --broker mock       # the librdkafka mock cluster

Prints a markdown table (with kqactors/confluent-kafka ratios) and writes benchmarks/out/txn.json.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
CLIENTS = ("kqactors", "confluent-kafka")
SIZE = 100
PARTITIONS = 3
TXN_MESSAGES = 10_000
DEFAULT_COUNT, QUICK_COUNT = 200_000, 30_000


# ---- runner (one measured run, in its own process) ---------------------------------------------------------

def run(client: str, argv: list[str]) -> None:
    sys.path.insert(0, str(BENCH_DIR / "clients"))
    from _common import announce_ready_and_wait, error_name, parse_args, payloads_for, report_and_wait

    args = parse_args(argv)
    if client == "kqactors":
        from kqactors import Producer
    else:
        from confluent_kafka import Producer
    payloads = payloads_for(args)
    delivered = 0
    errors: Counter[str] = Counter()

    def on_delivery(err: Any, _msg: Any) -> None:
        nonlocal delivered
        if err is None:
            delivered += 1
        else:
            errors[error_name(err)] += 1

    producer = Producer({"bootstrap.servers": args.bootstrap, "linger.ms": 5, "compression.type": args.compression,
                         "transactional.id": f"bench-{client}-{uuid.uuid4().hex[:8]}", "on_delivery": on_delivery})
    producer.init_transactions(60)
    producer.begin_transaction()  # warm-up: a first transaction, outside the measurement
    for _ in range(10):
        producer.produce(args.topic, b"warm-up")
    producer.commit_transaction(60)
    delivered = 0
    announce_ready_and_wait()
    commits: list[float] = []
    produce = producer.produce
    poll = producer.poll
    n_payloads = len(payloads)
    started = time.perf_counter()
    sent = 0
    while sent < args.count:
        producer.begin_transaction()
        end = min(sent + TXN_MESSAGES, args.count)
        for i in range(sent, end):
            value = payloads[i % n_payloads]
            while True:
                try:
                    produce(args.topic, value)
                    break
                except BufferError:
                    poll(0.005)
            if i % 1000 == 0:
                poll(0)
        sent = end
        committing = time.perf_counter()
        producer.commit_transaction(120)
        commits.append(time.perf_counter() - committing)
    elapsed = time.perf_counter() - started
    report_and_wait(client, args, delivered, dict(errors), elapsed, transactions=len(commits),
                    commit_ms_median=round(statistics.median(commits) * 1000, 2),
                    commit_ms_max=round(max(commits) * 1000, 2))
    producer.close() if hasattr(producer, "close") else producer.flush(10)


# ---- driver ------------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(BENCH_DIR))
    import harness
    import psutil

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", help="bootstrap.servers (default: start an embedded broker, see --broker)")
    parser.add_argument("--broker", choices=harness.BROKER_KINDS, default="tansu")
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--count", type=int, default=None, help=f"messages per run (default {DEFAULT_COUNT:,})")
    parser.add_argument("--repeats", type=int, default=None, help="runs per client (default 3; quick 1)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json-out", type=Path, default=BENCH_DIR / "out" / "txn.json")
    args = parser.parse_args(argv)
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    if not clients or any(c not in CLIENTS for c in clients):
        parser.error(f"--clients: choose from {', '.join(CLIENTS)}")
    count = args.count or (QUICK_COUNT if args.quick else DEFAULT_COUNT)
    repeats = args.repeats or (1 if args.quick else 3)
    script = str(Path(__file__).resolve())
    for client in clients:  # the harness runs <script> --runner <client> ... in a fresh process
        harness.RUNNERS[f"txn-{client}"] = script
    case = "100B-txn10k"
    started = time.monotonic()
    results = []
    with harness.broker_for_run(args.bootstrap, args.broker) as broker:
        for repeat in range(repeats):
            for client in clients:
                topic = f"bench-txn-{client}-{uuid.uuid4().hex[:8]}"
                broker.create_topic(topic, PARTITIONS)
                try:
                    result = harness.run_client(f"txn-{client}", case, repeat, broker.bootstrap, topic, count, SIZE,
                                                "none", extra_args=("--runner", client))
                except harness.RunFailed as exc:
                    print(f"[{case} #{repeat + 1}] {exc}", file=sys.stderr)
                    continue
                result.client = client
                results.append(result)
                print(f"[{case} #{repeat + 1}] {client:16s} {result.msgs_per_s:>10,.0f} msgs/s "
                      f"{result.mb_per_s:7.1f} MB/s  commit median {result.extra['commit_ms_median']} ms  "
                      f"cpu {result.cpu_s:6.2f} s  rss {result.peak_rss_mb:6.0f} MiB  procs {result.processes}  "
                      f"errors {sum(result.errors.values())}", file=sys.stderr, flush=True)
        kind = broker.kind
    summaries = harness.summarise(results)
    meta = {"python": platform.python_version(), "machine": platform.machine(), "cpus": psutil.cpu_count(),
            "broker": args.bootstrap or kind, "partitions": PARTITIONS, "size": SIZE,
            "transaction_messages": TXN_MESSAGES, "count": count, "repeats": repeats,
            "wall_s": round(time.monotonic() - started, 1), "clients": clients}
    harness.write_json(args.json_out, meta, results, summaries)
    print(harness.markdown_table(summaries, [case], clients))
    for client in clients:
        commits = [r.extra["commit_ms_median"] for r in results if r.client == client]
        if commits:
            print(f"{client}: commit_transaction() median {statistics.median(commits)} ms "
                  f"(median over runs of each run's median)")
    print(f"\n{len(results)} runs in {meta['wall_s']} s; JSON: {args.json_out}", file=sys.stderr)
    failed = sum(1 for r in results if r.errors) + (repeats * len(clients) - len(results))
    return 1 if failed else 0


if __name__ == "__main__":
    if "--runner" in sys.argv:  # the harness's child: ... --runner <client> (after the runner arguments)
        at = sys.argv.index("--runner")
        sys.exit(run(sys.argv[at + 1], sys.argv[1:at] + sys.argv[at + 2:]))
    sys.exit(main())
