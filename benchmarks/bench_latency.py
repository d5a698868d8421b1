"""Runs in: a developer shell (the driver; each measured run is a fresh runner process).

End-to-end latency: kqactors against confluent-kafka in one run, alternating the clients, each run a fresh process
(benchmarks/clients/latency_runner.py): a producer (linger.ms=0) and a consumer (fetch.wait.max.ms=2) of the same
client in one process and one poll loop, 1,000 msg/s of 100 B over a 3-partition topic, latency = produce() call →
returned by consume(). 20,000 messages per run, so p99.9 rests on 20 samples. kqactors runs with its default
placement (adaptive: its toppars on the main host at this rate) unless ``--set`` says otherwise. Reports medians
over repeats of p50/p99/p99.9/max, the whole process tree's peak RSS and peak PSS (shared pages divided among the
processes: benchmarks/harness.py) and process count, and kqactors/peer ratios.

    python benchmarks/bench_latency.py                       # 3 repeats, the librdkafka mock cluster (~2.5 min)
    python benchmarks/bench_latency.py --repeats 5 --count 30000
    python benchmarks/bench_latency.py --set kqactors.hosts=2 --clients kqactors   # a fixed placement
    python benchmarks/bench_latency.py --tree before=/tmp/base   # + kqactors from another source tree, same run
    python benchmarks/bench_latency.py --worst   # + when each run's worst latencies came (periodic: a timer)

``--tree LABEL=PATH`` adds a client ``kqactors-LABEL``: kqactors imported from PATH (a checkout of other code, its
native extensions built), run alternately with the others, so a change is measured before/after under the same
load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import uuid

from harness import CLIENTS_DIR, TreeSampler, broker_for_run

FIELDS = ("p50_ms", "p99_ms", "p999_ms", "max_ms")


def run_once(client: str, bootstrap: str, topic: str, args: argparse.Namespace) -> dict:
    env = None
    tree = args.trees.get(client)
    if tree is not None:  # kqactors from another source tree
        env = dict(os.environ, PYTHONPATH=tree + os.pathsep + os.environ.get("PYTHONPATH", ""))
        client = "kqactors"
    command = [sys.executable, str(CLIENTS_DIR / "latency_runner.py"), "--client", client, "--bootstrap", bootstrap,
               "--topic", topic, "--count", str(args.count), "--rate", str(args.rate),
               "--fetch-wait-ms", str(args.fetch_wait_ms)]
    if client == "kqactors":
        for item in args.set:
            command += ["--set", item]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(CLIENTS_DIR),
                            env=env)
    sampler = TreeSampler(proc.pid).start()
    try:
        out, err = proc.communicate(timeout=args.count / args.rate + 120)
    finally:
        sampler.stop()
    if proc.returncode != 0 or not out.strip():
        raise RuntimeError(f"{client} latency run failed ({proc.returncode}): {err[-2000:]}")
    result = json.loads(out.strip().splitlines()[-1])
    result["peak_rss_mb"] = sampler.peak_rss / 2**20
    result["peak_pss_mb"] = sampler.peak_pss / 2**20
    result["processes"] = sampler.max_processes
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", help="bootstrap.servers (default: the librdkafka mock cluster, 1 broker)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--fetch-wait-ms", type=int, default=2)
    parser.add_argument("--clients", default="kqactors,confluent-kafka")
    parser.add_argument("--set", action="append", default=[], help="kqactors property name=value")
    parser.add_argument("--worst", action="store_true",
                        help="print each run's worst latencies with their send times (s into the run)")
    parser.add_argument("--tree", action="append", default=[], metavar="LABEL=PATH",
                        help="also run kqactors imported from PATH, as client kqactors-LABEL")
    args = parser.parse_args(argv)
    clients = args.clients.split(",")
    args.trees = {}
    for item in args.tree:
        label, sep, path = item.partition("=")
        if not sep or not label or not os.path.isdir(os.path.join(path, "kqactors")):
            parser.error(f"--tree wants LABEL=PATH with PATH/kqactors a directory: {item!r}")
        args.trees[f"kqactors-{label}"] = os.path.abspath(path)
        clients.insert(clients.index("kqactors") + 1 if "kqactors" in clients else 0, f"kqactors-{label}")
    runs: dict[str, list[dict]] = {client: [] for client in clients}
    with broker_for_run(args.bootstrap, "mock") as broker:
        for repeat in range(args.repeats):
            for client in clients:  # alternating, so drift in the machine's load hits both alike
                topic = f"latency-{client}-{uuid.uuid4().hex[:8]}"
                broker.create_topic(topic, 3)
                result = run_once(client, broker.bootstrap, topic, args)
                runs[client].append(result)
                print(f"[#{repeat + 1}] {client:16s} " + "  ".join(f"{f} {result[f]:7.2f}" for f in FIELDS) +
                      f"  received {result['received']}  rss {result['peak_rss_mb']:.0f} pss {result['peak_pss_mb']:.0f} MiB  "
                      f"processes {result['processes']}", file=sys.stderr, flush=True)
                if args.worst:
                    print("    worst [s, ms]: " + " ".join(f"{at:.2f}:{ms:.1f}" for at, ms in result["worst"]),
                          file=sys.stderr, flush=True)
    medians = {client: {f: statistics.median(r[f] for r in rows) for f in (*FIELDS, "peak_rss_mb", "peak_pss_mb", "processes")}
               for client, rows in runs.items()}
    print("| client | p50 ms | p99 ms | p99.9 ms | max ms | peak RSS MiB | peak PSS MiB | processes |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for client in clients:
        m = medians[client]
        print(f"| {client} | {m['p50_ms']:.2f} | {m['p99_ms']:.2f} | {m['p999_ms']:.2f} | {m['max_ms']:.1f} | "
              f"{m['peak_rss_mb']:.0f} | {m['peak_pss_mb']:.0f} | {m['processes']:.0f} |")
    if "kqactors" in medians and "confluent-kafka" in medians:
        ours, peer = medians["kqactors"], medians["confluent-kafka"]
        print("| kqactors/confluent-kafka | " + " | ".join(f"{ours[f] / max(peer[f], 1e-9):.2f}×"
                                                          for f in (*FIELDS, "peak_rss_mb", "peak_pss_mb", "processes"))
              + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
