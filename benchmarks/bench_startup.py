"""Runs in: a developer shell (the driver; each measured run is a fresh runner process).

Start-up benchmark: kqactors against confluent-kafka, in one run, alternating the clients. Per run
(benchmarks/clients/startup_runner.py, a fresh process, client module imported before the clock starts): the
Producer constructor, its first delivery report (linger.ms=0, one message to a 1-partition topic that exists,
from the constructor's start), the Consumer constructor (with group.id) and its first message after assign()
(from the constructor's start). Medians over repeats; peak RSS of the whole process tree, and the CPU time of
the whole run (user + sys of the runner and the hosts it reaped: interpreters, imports, both clients' work and
close), which a loaded machine disturbs less than the wall-clock columns.

    /work/venv/bin/python benchmarks/bench_startup.py                   # 5 repeats, the librdkafka mock cluster
    /work/venv/bin/python benchmarks/bench_startup.py --repeats 3 --bootstrap host:9092
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import uuid

from harness import CLIENTS_DIR, TreeSampler, broker_for_run

CLIENTS = ("kqactors", "confluent-kafka")
FIELDS = ("producer_ctor_ms", "first_dr_ms", "consumer_ctor_ms", "first_message_ms")


def run_once(client: str, bootstrap: str, topic: str) -> dict:
    command = [sys.executable, str(CLIENTS_DIR / "startup_runner.py"), "--client", client, "--bootstrap", bootstrap,
               "--topic", topic]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(CLIENTS_DIR))
    sampler = TreeSampler(proc.pid).start()
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        sampler.stop()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0 or not out.strip():
        raise RuntimeError(f"{client} start-up run failed ({proc.returncode}): {err[-2000:]}")
    result = json.loads(out.strip().splitlines()[-1])
    result["peak_rss_mb"] = sampler.peak_rss / 2**20
    result["cpu_ms"] = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1e3
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", help="bootstrap.servers (default: the librdkafka mock cluster)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    runs: dict[str, list[dict]] = {client: [] for client in CLIENTS}
    with broker_for_run(args.bootstrap, "mock") as broker:
        for repeat in range(args.repeats):
            for client in CLIENTS:  # alternating, so drift in the machine's load hits both alike
                topic = f"startup-{client}-{uuid.uuid4().hex[:8]}"
                broker.create_topic(topic, 1)
                result = run_once(client, broker.bootstrap, topic)
                runs[client].append(result)
                print(f"[#{repeat + 1}] {client:16s} " + "  ".join(f"{f} {result[f]:7.1f}" for f in FIELDS) +
                      f"  rss {result['peak_rss_mb']:.0f} MiB  cpu {result['cpu_ms']:.0f} ms", file=sys.stderr,
                      flush=True)
    medians = {client: {f: statistics.median(r[f] for r in rows) for f in (*FIELDS, "peak_rss_mb", "cpu_ms")}
               for client, rows in runs.items()}
    print("| client | Producer() ms | first DR ms | Consumer() ms | first message ms | peak RSS MiB | CPU ms |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for client in CLIENTS:
        m = medians[client]
        print(f"| {client} | {m['producer_ctor_ms']:.1f} | {m['first_dr_ms']:.1f} | {m['consumer_ctor_ms']:.1f} | "
              f"{m['first_message_ms']:.1f} | {m['peak_rss_mb']:.0f} | {m['cpu_ms']:.0f} |")
    ours, peer = medians["kqactors"], medians["confluent-kafka"]
    print("| kqactors/confluent-kafka | " + " | ".join(f"{ours[f] / max(peer[f], 1e-9):.1f}×"
                                                      for f in (*FIELDS, "peak_rss_mb", "cpu_ms")) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
