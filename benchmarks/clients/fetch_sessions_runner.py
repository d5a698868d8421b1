"""Benchmark runner for bench_fetch_sessions.py: one consumer (kqactors or confluent-kafka) assigned every
partition of a topic at its end, consuming for a while. Runs in: a fresh process per run.

Protocol on stdin/stdout: prints READY once assigned and warmed up; on a GO line consumes for --seconds; then
prints one JSON line: messages received and the CPU seconds of each process of its tree (the app, and for
kqactors each host by its --key) over that window.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import psutil


def host_key(proc: psutil.Process, me: int) -> str:
    if proc.pid == me:
        return "app"
    args = proc.cmdline()
    return args[args.index("--key") + 1] if "--key" in args else str(proc.pid)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--client", choices=("kqactors", "confluent-kafka"), required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--fetch-wait-ms", type=int, default=100)
    args = parser.parse_args()
    if args.client == "kqactors":
        from kqactors import OFFSET_END, Consumer, TopicPartition
    else:
        from confluent_kafka import OFFSET_END, Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": "bench-fetch-sessions",
                         "enable.auto.commit": False, "fetch.wait.max.ms": args.fetch_wait_ms})
    consumer.assign([TopicPartition(args.topic, p, OFFSET_END) for p in range(args.partitions)])
    warm = time.monotonic() + 5.0
    while time.monotonic() < warm:  # every partition's end offset resolved, fetching settled
        consumer.consume(1000, 0.2)
    me = psutil.Process()
    print("READY", flush=True)
    sys.stdin.readline()
    procs = [me, *me.children(recursive=True)]
    before = {p.pid: sum(p.cpu_times()[:2]) for p in procs}
    received = 0
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        received += sum(1 for m in consumer.consume(1000, 0.1) if m.error() is None)
    cpu = {}
    for p in procs:
        try:
            cpu[host_key(p, me.pid)] = round(sum(p.cpu_times()[:2]) - before[p.pid], 3)
        except psutil.Error:
            pass
    print(json.dumps({"received": received, "cpu": cpu}), flush=True)
    consumer.close()


if __name__ == "__main__":
    main()
