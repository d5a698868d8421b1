"""Runs in: a developer shell (the driver and the measured producer share this process; its hosts are children).

Processes that follow the work: one kqactors Producer on a simulated many-core machine (KQACTORS_CPU_COUNT, default
64) whose rate climbs in steps (``--steps`` msg/s, each held ``--step-s`` seconds, 100 B messages, linger.ms=5,
over a 16-partition topic on the librdkafka mock cluster). Per step: the rate reached, the actor hosts running,
the client's processes (app + hosts) and their RSS, and produce() → delivery report p50/p99. Run it with the default adaptive placement and
with a fixed placement (``--hosts N``: N toppar hosts from the start, what the old default did with N cores).

    python benchmarks/bench_placement.py                      # adaptive, simulated 64 cores
    python benchmarks/bench_placement.py --hosts 16           # fixed: 16 toppar hosts from the start
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import psutil


def tree_rss_mb() -> tuple[float, int]:
    """RSS and count of this process and its kqactors hosts (the mock cluster, also a child, is left out)."""
    me = psutil.Process()
    procs = [me]
    for child in me.children(recursive=True):
        try:
            if "kqactors.runtime.host_process" in " ".join(child.cmdline()):
                procs.append(child)
        except psutil.Error:
            pass
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            pass
    return total / 2**20, len(procs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cores", type=int, default=64, help="simulated core count (KQACTORS_CPU_COUNT)")
    parser.add_argument("--hosts", type=int, default=-1, help="kqactors.hosts (-1: adaptive, the default)")
    parser.add_argument("--steps", default="500,2000,10000,40000,0", help="msg/s per step; 0 = flat out")
    parser.add_argument("--step-s", type=float, default=3.0)
    parser.add_argument("--scale-rate", type=int, default=5_000, help="kqactors.placement.scale.rate")
    args = parser.parse_args(argv)
    os.environ["KQACTORS_CPU_COUNT"] = str(args.cores)
    from kqactors import Producer
    from kqactors.testing.mock_cluster import MockCluster

    with MockCluster(num_brokers=1) as cluster:
        cluster.create_topic("placement", partition_cnt=16)
        latencies: list[float] = []
        clock = time.perf_counter

        def report(err, msg, sent_at: float) -> None:
            if err is None:
                latencies.append((clock() - sent_at) * 1e3)

        started = clock()
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5, "kqactors.hosts": args.hosts,
                             "kqactors.placement.scale.rate": args.scale_rate})
        print(f"Producer() {1e3 * (clock() - started):.1f} ms; kqactors.hosts {args.hosts}, simulated cores "
              f"{args.cores}", file=sys.stderr)
        value = b"x" * 100
        print("| step msg/s | reached msg/s | actor hosts | processes | tree RSS MiB | DR p50 ms | DR p99 ms |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        partition = 0
        for step in (int(s) for s in args.steps.split(",")):
            latencies.clear()
            begin = clock()
            end = begin + args.step_s
            sent = 0
            while (now := clock()) < end:
                if step and sent >= (now - begin) * step:
                    producer.poll(min(0.001, end - now))
                    continue
                sent_at = now
                try:
                    producer.produce("placement", value, partition=partition,
                                     on_delivery=lambda err, msg, t=sent_at: report(err, msg, t))
                except BufferError:
                    producer.poll(0.01)
                    continue
                partition = (partition + 1) % 16
                sent += 1
                if sent % 256 == 0:
                    producer.poll(0)
            producer.flush(60)
            rss, processes = tree_rss_mb()
            ordered = sorted(latencies) or [float("nan")]
            hosts = len(producer._rt.host_keys)  # noqa: SLF001 - reported only
            print(f"| {step or 'flat out'} | {sent / args.step_s:,.0f} | {hosts} | {processes} | {rss:.0f} | "
                  f"{statistics.median(ordered):.2f} | {ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]:.2f} |",
                  flush=True)
        producer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
