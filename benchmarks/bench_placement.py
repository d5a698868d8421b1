"""Runs in: a developer shell (the driver and the measured producer share this process; its hosts are children).

Processes that follow the work: one kqactors Producer on a simulated many-core machine (KQACTORS_CPU_COUNT, default
64) whose rate climbs in steps (``--steps`` msg/s, each held ``--step-s`` seconds, 100 B messages, linger.ms=5,
over a 16-partition topic on the librdkafka mock cluster), then steps down to ``--down`` msg/s for ``--down-s``
seconds (a row every ``--step-s``): after ``--retire-ms`` (kqactors.placement.retire.ms) under the rate the hosts
retire one by one. Per step: the rate reached, the actor hosts running, the client's processes (app + hosts) and
their RSS, and produce() → delivery report p50/p99. Run it with the default adaptive placement and with a fixed
placement (``--hosts N``: N toppar hosts from the start, what the old default did with N cores).

``--consumer``: the same for a kqactors Consumer (assign()), whose consume() rate is held at each step (records/s,
0 = flat out; default steps 500,2000,10000,40000,100000) over a topic filled beforehand with confluent-kafka, with a
2 MiB prefetch queue (``--prefetch-kb``) so that fetching follows consume(); then the step down.

    python benchmarks/bench_placement.py                      # adaptive, simulated 64 cores
    python benchmarks/bench_placement.py --hosts 16           # fixed: 16 toppar hosts from the start
    python benchmarks/bench_placement.py --consumer           # a consumer's decode following its rate
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
    parser.add_argument("--retire-ms", type=int, default=3_000, help="kqactors.placement.retire.ms")
    parser.add_argument("--down", type=int, default=200, help="msg/s of the final step down")
    parser.add_argument("--down-s", type=float, default=30.0, help="how long the step down is held")
    parser.add_argument("--consumer", action="store_true", help="measure a consumer instead of a producer")
    parser.add_argument("--prefetch-kb", type=int, default=2_048, help="queued.max.messages.kbytes (--consumer)")
    args = parser.parse_args(argv)
    os.environ["KQACTORS_CPU_COUNT"] = str(args.cores)
    if args.consumer:
        if args.steps == parser.get_default("steps"):
            args.steps = "500,2000,10000,40000,100000"
        return consumer_run(args)
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
                             "kqactors.placement.scale.rate": args.scale_rate,
                             "kqactors.placement.retire.ms": args.retire_ms})
        print(f"Producer() {1e3 * (clock() - started):.1f} ms; kqactors.hosts {args.hosts}, simulated cores "
              f"{args.cores}", file=sys.stderr)
        value = b"x" * 100
        print("| step msg/s | reached msg/s | actor hosts | processes | tree RSS MiB | DR p50 ms | DR p99 ms |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        partition = 0
        for step, label in steps_with_down(args):
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
            hosts = len(producer._rt._plumbing.supervisor.host_keys)  # noqa: SLF001 - running ones, reported only
            print(f"| {label} | {sent / args.step_s:,.0f} | {hosts} | {processes} | {rss:.0f} | "
                  f"{statistics.median(ordered):.2f} | {ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]:.2f} |",
                  flush=True)
        producer.close()
    return 0


def steps_with_down(args: argparse.Namespace) -> list[tuple[int, str]]:
    """The rising steps, then the step down as one row per ``--step-s`` (hosts retire while it lasts)."""
    steps = [(int(s), s if int(s) else "flat out") for s in args.steps.split(",")]
    rows = max(1, round(args.down_s / args.step_s))
    return steps + [(args.down, f"{args.down} (down, {args.step_s * (i + 1):.0f} s)") for i in range(rows)]


def consumer_run(args: argparse.Namespace) -> int:
    """The consumer: consume() held at each step's rate, from a topic filled beforehand."""
    import confluent_kafka

    from kqactors import Consumer, TopicPartition
    from kqactors.message import OFFSET_BEGINNING
    from kqactors.testing.mock_cluster import MockCluster

    steps = steps_with_down(args)
    # The mock cluster keeps ~750k records of 100 B per 16 partitions (older segments go): flat out (~380k/s
    # here) would run dry, so the default steps stop at 100k/s.
    total = int(sum((step or 380_000) * args.step_s for step, _ in steps) * 1.1)
    with MockCluster(num_brokers=1) as cluster:
        cluster.create_topic("placement", partition_cnt=16)
        clock = time.perf_counter
        started = clock()
        filler = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 20,
                                           "queue.buffering.max.messages": 1_000_000})
        value = b"x" * 100
        for i in range(total):
            while True:
                try:
                    filler.produce("placement", value, partition=i % 16)
                    break
                except BufferError:
                    filler.poll(0.01)
        filler.flush(120)
        del filler  # its buffers are not the consumer's
        print(f"filled {total:,} records in {clock() - started:.1f} s", file=sys.stderr)
        # A small prefetch queue: fetching (and decoding, the work that moves) follows consume() instead of
        # reading the whole backlog at once.
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "bench-placement",
                             "queued.max.messages.kbytes": args.prefetch_kb,
                             "kqactors.hosts": args.hosts, "kqactors.placement.scale.rate": args.scale_rate,
                             "kqactors.placement.retire.ms": args.retire_ms})
        consumer.assign([TopicPartition("placement", p, OFFSET_BEGINNING) for p in range(16)])
        print(f"kqactors.hosts {args.hosts}, simulated cores {args.cores}", file=sys.stderr)
        print("| step records/s | reached records/s | actor hosts | processes | tree RSS MiB | ctoppar moves so far |")
        print("|---:|---:|---:|---:|---:|---:|")
        for step, label in steps:
            begin = clock()
            end = begin + args.step_s
            got = 0
            while (now := clock()) < end:
                if step and got >= (now - begin) * step:
                    time.sleep(min(0.001, end - now))  # the app busy elsewhere
                    continue
                want = 1_000 if not step else max(1, min(1_000, int((now - begin) * step) - got + 1))
                got += len(consumer.consume(want, min(0.05, end - now)))
            rss, processes = tree_rss_mb()
            hosts = len(consumer._rt._plumbing.supervisor.host_keys)  # noqa: SLF001 - running ones, reported only
            print(f"| {label} | {got / args.step_s:,.0f} | {hosts} | {processes} | {rss:.0f} | "
                  f"{consumer.moves_done} |", flush=True)
        consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
