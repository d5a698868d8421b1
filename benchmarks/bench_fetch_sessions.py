"""Runs in: a developer shell (the driver; each measured run is a fresh runner process).

Many partitions on one broker: what a Fetch costs kqactors with fetch sessions (KIP-227) and confluent-kafka
(librdkafka keeps none: every request lists every partition). Tansu keeps no sessions either, so the broker
side of sessions is tests/support/fetch_session_proxy.py in front of an embedded Tansu; confluent-kafka's
sessionless requests pass it unchanged. A topic of --partitions partitions is assigned at its end; while a
producer trickles --rate messages/s round-robin over the partitions, each client consumes for --seconds.
kqactors runs twice: with sessions, and while the proxy grants none (as Tansu: every request full). Per client
(medians over --repeats): Fetch requests/s, request bytes per Fetch and partitions listed per
Fetch (counted by the proxy), CPU per Fetch of the process that builds them (kqactors: the main host h0, where
the broker actors run; confluent-kafka: its one process, which also decodes and hands over the messages),
and of the whole tree.

    python benchmarks/bench_fetch_sessions.py --partitions 1000 --seconds 10 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent / "tests"))

from support.fetch_session_proxy import FetchSessionProxy  # noqa: E402

from kqactors.cli.perf_payload import create_topic  # noqa: E402
from kqactors.testing.tansu import TansuBroker  # noqa: E402

#: kqactors-nosession: kqactors while the proxy grants no sessions (answers session id 0, as Tansu does)
CLIENTS = ("kqactors", "kqactors-nosession", "confluent-kafka")


def trickle(bootstrap: str, topic: str, partitions: int, rate: float, stop: threading.Event) -> None:
    import confluent_kafka

    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    interval, sent, started = 1.0 / rate, 0, time.monotonic()
    while not stop.is_set():
        producer.produce(topic, b"x" * 100, partition=sent % partitions)
        sent += 1
        producer.poll(0)
        delay = started + sent * interval - time.monotonic()
        if delay > 0:
            stop.wait(delay)
    producer.flush(10)


def run_once(client: str, proxy: FetchSessionProxy, topic: str, args: argparse.Namespace) -> dict:
    proxy.grant_sessions = client != "kqactors-nosession"
    command = [sys.executable, str(BENCH_DIR / "clients" / "fetch_sessions_runner.py"),
               "--client", client.removesuffix("-nosession"),
               "--bootstrap", proxy.bootstrap, "--topic", topic, "--partitions", str(args.partitions),
               "--seconds", str(args.seconds), "--fetch-wait-ms", str(args.fetch_wait_ms)]
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        if proc.stdout.readline().strip() != "READY":
            raise SystemExit(f"{client}: runner did not get ready")
        counters = ("full_requests", "incremental_requests", "listed_partitions", "request_bytes")
        before = {name: getattr(proxy, name) for name in counters}
        proc.stdin.write("GO\n")
        proc.stdin.flush()
        result = json.loads(proc.stdout.readline())
        delta = {name: getattr(proxy, name) - before[name] for name in counters}
    finally:
        proc.wait(60)
    fetches = delta["full_requests"] + delta["incremental_requests"]
    busy = result["cpu"]["app"] if client == "confluent-kafka" else result["cpu"].get("h0", result["cpu"]["app"])
    return {
        "client": client, "fetches": fetches, "fetches_per_s": fetches / args.seconds,
        "incremental": delta["incremental_requests"], "received": result["received"],
        "bytes_per_fetch": delta["request_bytes"] / max(1, fetches),
        "partitions_per_fetch": delta["listed_partitions"] / max(1, fetches),
        "fetch_cpu_us": busy / max(1, fetches) * 1e6, "tree_cpu_s": sum(result["cpu"].values()),
        "cpu": result["cpu"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rate", type=float, default=500.0, help="messages/s trickled over the partitions")
    parser.add_argument("--fetch-wait-ms", type=int, default=100)
    args = parser.parse_args()
    results: list[dict] = []
    with TansuBroker() as broker:
        topic = f"bench-sessions-{uuid.uuid4().hex[:8]}"
        create_topic(broker.bootstrap, topic, args.partitions)
        stop = threading.Event()
        producer = threading.Thread(target=trickle, args=(broker.bootstrap, topic, args.partitions, args.rate, stop),
                                    daemon=True)
        producer.start()
        with FetchSessionProxy(broker.bootstrap) as proxy:
            for repeat in range(args.repeats):
                for client in CLIENTS:
                    r = run_once(client, proxy, topic, args)
                    results.append(r)
                    print(f"[#{repeat + 1}] {client:16s} {r['fetches_per_s']:6.1f} Fetch/s "
                          f"{r['bytes_per_fetch']:8.0f} B/Fetch {r['partitions_per_fetch']:7.1f} partitions/Fetch "
                          f"{r['fetch_cpu_us']:7.0f} µs CPU/Fetch  tree CPU {r['tree_cpu_s']:.2f} s  "
                          f"received {r['received']}  {r['cpu']}", file=sys.stderr, flush=True)
        stop.set()
        producer.join(15)
    print(f"\n{args.partitions} partitions, {args.rate:.0f} msg/s trickled, fetch.wait.max.ms={args.fetch_wait_ms}, "
          f"{args.seconds:.0f} s per run, medians of {args.repeats}\n")
    print("| client | Fetch/s | request bytes/Fetch | partitions listed/Fetch | CPU µs/Fetch (fetching process) "
          "| tree CPU s | msgs |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for client in CLIENTS:
        runs = [r for r in results if r["client"] == client]
        med = {k: statistics.median(r[k] for r in runs) for k in ("fetches_per_s", "bytes_per_fetch",
               "partitions_per_fetch", "fetch_cpu_us", "tree_cpu_s", "received")}
        print(f"| {client} | {med['fetches_per_s']:.1f} | {med['bytes_per_fetch']:,.0f} | "
              f"{med['partitions_per_fetch']:.1f} | {med['fetch_cpu_us']:,.0f} | {med['tree_cpu_s']:.2f} | "
              f"{med['received']:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
