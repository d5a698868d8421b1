"""Soak: produce and consume at half the producer's maximum rate for N minutes, sampling every process's RSS and
open file descriptors, and report their growth.

Runs in: this process (a kqactors Producer and Consumer, each with its hosts as child processes); the broker is
an embedded Tansu (child process) unless ``--bootstrap`` names one. The maximum rate is measured first (10 s flat
out); the run then paces the producer at half of it with a consumer reading the same topic. Every ``--every``
seconds each client process (this one and its children, the broker excluded) is sampled, with the backlog at
that moment (messages produced but not yet acked, acked but not yet consumed): memory that follows the backlog
is data in flight, not a leak. At the end the producer is flushed, the consumer catches up, and after the
hosts' allocator trim interval with nothing to do, a last sample is taken ("drained"). Growth is that sample
minus the first one after the warm-up (a tenth of the run, at least 30 s): what a leak would leave behind, with
the load's high-water marks given back. The embedded Tansu keeps every
message in memory (no retention), so the rate is capped by ``--rate-cap`` (10,000 msg/s: 30 minutes are 18M
messages, ~3 GB in Tansu); ``--rate-cap 0`` soaks at the full half of the maximum (for a real broker).

    python benchmarks/bench_soak.py --minutes 30            # the issue's run
    python benchmarks/bench_soak.py --minutes 5 --every 10  # a shortened one
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import cpu_seconds  # noqa: E402

from kqactors import Consumer, Producer, TopicPartition  # noqa: E402
from kqactors.runtime.host_process import TRIM_INTERVAL_S  # noqa: E402

VALUE = b"x" * 100
PARTITIONS = 3


def max_rate(bootstrap: str, topic: str, seconds: float = 10.0) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    sent = 0
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        try:
            producer.produce(topic, VALUE, partition=sent % PARTITIONS)
            sent += 1
        except BufferError:
            producer.poll(0.01)
        if sent % 1000 == 0:
            producer.poll(0)
    producer.flush(60)
    rate = sent / (time.monotonic() - started)
    producer.close()
    return rate


def backlog(stats: dict[str, int]) -> tuple[int, int]:
    """(produced but not yet acked, acked but not yet consumed): the data the clients hold at this moment."""
    return (stats["produced"] - stats["acked"] - stats["failed"], max(0, stats["acked"] - stats["consumed"]))


def request_reports(hosts: dict[int, str]) -> None:
    """SIGUSR2 to every host: each writes its next allocator report (host_process.py)."""
    for pid in hosts:
        try:
            os.kill(pid, signal.SIGUSR2)
        except ProcessLookupError:
            pass


_REPORT_FIELDS = {  # figure: (how its line starts, the unit it is divided by); the last such line counts, which for
    # glibc's two is the total over every arena and mmap
    "pymalloc arenas": ("# arenas allocated current", 1),
    "pymalloc blocks MB": ("# bytes in allocated blocks", 1e6),
    "glibc in use MB": ("in use bytes", 1e6),
    "glibc held MB": ("system bytes", 1e6),
    "RSS after trim MB": ("rss_kib before malloc_trim", 1024),
}


def _report_figures(path: str) -> dict[str, float]:
    figures: dict[str, float] = {}
    with open(path, errors="replace") as report:
        for line in report:
            for name, (start, unit) in _REPORT_FIELDS.items():
                if line.startswith(start):
                    figures[name] = float(line.split()[-1].replace(",", "")) / unit
    return figures


def compare_reports(directory: str, hosts: dict[int, str]) -> None:
    """Each host's first report (after the warm-up) against its last (drained): live memory that stayed (in use)
    is a leak; memory the allocators hold beyond it is their high-water mark."""
    print("\n| host | " + " | ".join(f"{name} warm-up → drained" for name in _REPORT_FIELDS) + " |")
    print("|---|" + "---|" * len(_REPORT_FIELDS))
    for pid, label in sorted(hosts.items(), key=lambda item: item[1]):
        paths = sorted(Path(directory).glob(f"*-{pid}-*.malloc"), key=lambda p: int(p.stem.rsplit("-", 1)[1]))
        if len(paths) < 2:
            continue
        first, last = _report_figures(str(paths[0])), _report_figures(str(paths[-1]))
        print(f"| {label} ({pid}) | " + " | ".join(
            f"{first.get(name, 0):.{digits}f} → {last.get(name, 0):.{digits}f}"
            for name, digits in zip(_REPORT_FIELDS, (0, 1, 1, 1, 1), strict=True)) + " |")


def client_hosts(clients: dict[str, object]) -> dict[int, str]:
    """{pid: "producer h0"} for every host process of the named clients (their runtimes' host keys)."""
    out = {}
    for label, client in clients.items():
        rt = client._rt  # noqa: SLF001 - a benchmark may look inside to name the processes it samples
        for key in getattr(rt, "host_keys", ()):
            pid = rt.host_pid(key)
            if pid is not None:
                out[pid] = f"{label} {key}"
    return out


def sample(exclude: set[int], labels: dict[int, str] | None = None) -> dict[int, tuple[str, int, int]]:
    """{pid: (name, rss bytes, open fds)} of this process and its children, ``exclude`` left out."""
    me = psutil.Process()
    out = {}
    labels = labels or {}
    for proc in [me, *me.children(recursive=True)]:
        if proc.pid in exclude:
            continue
        try:
            cmdline = proc.cmdline()
            name = "app" if proc.pid == me.pid else labels.get(proc.pid) or (
                f"host {cmdline[cmdline.index('--key') + 1]}" if "--key" in cmdline else " ".join(cmdline[-2:])[-40:])
            out[proc.pid] = (name, proc.memory_info().rss, proc.num_fds())
        except psutil.Error:
            pass
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--every", type=float, default=30.0, help="seconds between samples")
    parser.add_argument("--bootstrap", default=None)
    parser.add_argument("--rate-cap", type=float, default=10_000.0, help="msg/s at most (0: no cap)")
    parser.add_argument("--producer", action="append", default=[], metavar="KEY=VALUE",
                        help="a property of the soaking producer (repeatable), e.g. kqactors.hosts=0")
    parser.add_argument("--consumer", action="append", default=[], metavar="KEY=VALUE",
                        help="a property of the soaking consumer (repeatable)")
    parser.add_argument("--malloc-report", metavar="DIR", default=None,
                        help="have every host write its allocator report (KQACTORS_MALLOC_REPORT, docs/runtime.md) "
                             "into DIR after the warm-up and when drained, and compare them")
    args = parser.parse_args()
    if args.malloc_report:
        os.makedirs(args.malloc_report, exist_ok=True)
        os.environ["KQACTORS_MALLOC_REPORT"] = os.path.abspath(args.malloc_report)  # the hosts inherit it
    extra_producer = dict(item.split("=", 1) for item in args.producer)
    extra_consumer = dict(item.split("=", 1) for item in args.consumer)
    broker = None
    exclude: set[int] = set()
    if args.bootstrap is None:
        from kqactors.testing.tansu import TansuBroker

        broker = TansuBroker().start()
        exclude.add(broker.pid)
        bootstrap = broker.bootstrap
    else:
        bootstrap = args.bootstrap
    topic = f"soak-{os.getpid()}"
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept referenced until the futures are done
    for future in admin.create_topics([NewTopic(topic, PARTITIONS, 1),
                                       NewTopic(topic + "-max", PARTITIONS, 1)]).values():
        future.result(15)
    try:
        peak = max_rate(bootstrap, topic + "-max")
        target = peak / 2 if args.rate_cap <= 0 else min(peak / 2, args.rate_cap)
        print(f"maximum produce rate {peak:,.0f} msg/s; soaking at {target:,.0f} msg/s for {args.minutes} min")
        stats = {"produced": 0, "acked": 0, "failed": 0, "consumed": 0}

        def on_delivery(err, _msg):
            stats["acked" if err is None else "failed"] += 1

        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "on_delivery": on_delivery,
                             **extra_producer})
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic, "enable.auto.commit": False,
                             **extra_consumer})
        consumer.assign([TopicPartition(topic, p, -2) for p in range(PARTITIONS)])
        stop = threading.Event()

        def consume():
            while not stop.is_set():
                stats["consumed"] += sum(1 for m in consumer.consume(1000, 0.2) if m.error() is None)

        reader = threading.Thread(target=consume, daemon=True)
        reader.start()
        started = time.monotonic()
        end = started + args.minutes * 60
        warmup = started + max(30.0, args.minutes * 6)
        next_sample = started
        samples: list[tuple[float, dict]] = []
        backlogs: list[tuple[int, int]] = []
        reported = False  # the hosts' first allocator reports (--malloc-report) were asked for
        cpu_before: dict[str, float] = {}
        last_sample_at = started
        while time.monotonic() < end:
            now = time.monotonic()
            if now >= next_sample:
                hosts = client_hosts({"producer": producer, "consumer": consumer})
                samples.append((now - started, sample(exclude, hosts)))
                snap = samples[-1][1]
                backlogs.append(backlog(stats))
                if args.malloc_report and not reported and now >= warmup:
                    request_reports(hosts)
                    reported = True
                print(f"t={now - started:6.0f}s produced={stats['produced']} consumed={stats['consumed']} "
                      f"unacked={backlogs[-1][0]} unconsumed={backlogs[-1][1]} "
                      f"rss={sum(v[1] for v in snap.values()) / 1e6:.1f}MB fds={sum(v[2] for v in snap.values())}",
                      flush=True)
                # Who was busy since the last sample (the broker too): a lag that comes with time shows here.
                names = {name: pid for pid, (name, _rss, _fds) in snap.items()}
                if broker is not None:
                    names["broker"] = broker.pid
                cpu_now = cpu_seconds(names)
                span = max(now - last_sample_at, 1e-6)
                if cpu_before:
                    print("    cpu%: " + ", ".join(f"{name} {100 * (cpu_now[name] - cpu_before[name]) / span:.0f}"
                                                   for name in sorted(cpu_now) if name in cpu_before), flush=True)
                cpu_before, last_sample_at = cpu_now, now
                next_sample += args.every
            due = int((now - started) * target)
            while stats["produced"] < due:
                try:
                    producer.produce(topic, VALUE, partition=stats["produced"] % PARTITIONS)
                    stats["produced"] += 1
                except BufferError:
                    break
            producer.poll(0.005)
        producer.flush(60)
        deadline = time.monotonic() + 60
        while stats["consumed"] < stats["acked"] and time.monotonic() < deadline:
            time.sleep(0.2)
        hosts = client_hosts({"producer": producer, "consumer": consumer})
        samples.append((time.monotonic() - started, sample(exclude, hosts)))
        backlogs.append(backlog(stats))
        time.sleep(TRIM_INTERVAL_S + 5)  # every host idle long enough to hand its free pages back
        drained = sample(exclude, hosts)
        if args.malloc_report:
            request_reports(hosts)
            time.sleep(2)
        stop.set()
        reader.join(5)
        first = next((i for i, (t, _snap) in enumerate(samples) if t >= warmup - started), 0)
        print(f"\nproduced {stats['produced']}, acked {stats['acked']}, failed {stats['failed']}, "
              f"consumed {stats['consumed']}")
        # A leak grows from quarter to quarter; a high-water mark (prefetch filled while the consumer lagged,
        # allocator arenas kept) is reached once and stays.
        span = len(samples) - first  # the samples after the warm-up; the quarters are among them, then the end
        marks = [first + min(span - 1, span * q // 4) for q in (1, 2, 3)] + [len(samples) - 1]
        print("| process | RSS after warm-up MB | at 1/4 | at 1/2 | at 3/4 | at end | drained | growth MB "
              "| fds after warm-up | fds drained |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for pid, (name, rss, fds) in sorted(drained.items(), key=lambda item: item[1][0]):
            # a host that joined after the warm-up (adaptive placement) is measured from its first sample
            joined = next((i for i in range(first, len(samples)) if pid in samples[i][1]), None)
            if joined is None:
                continue
            _, rss0, fds0 = samples[joined][1][pid]
            since = "" if joined == first else f", from t={samples[joined][0]:.0f}s"
            row = " | ".join(f"{samples[i][1][pid][1] / 1e6:.1f}" if pid in samples[i][1] else "-" for i in marks)
            print(f"| {name} ({pid}{since}) | {rss0 / 1e6:.1f} | {row} | {rss / 1e6:.1f} | {(rss - rss0) / 1e6:+.1f} "
                  f"| {fds0} | {fds} |")
        gone = {pid: name for _t, snap in samples[first:] for pid, (name, _rss, _fds) in snap.items()
                if pid not in drained}
        if gone:  # adaptive placement retires a host once its rate is gone: it gives back all it held
            print("| retired before the drained sample: " + ", ".join(
                f"{name} ({pid})" for pid, name in sorted(gone.items(), key=lambda item: item[1])) + " |||||||||")
        print("| backlog: unacked / unconsumed msgs | " + " | ".join(
            f"{backlogs[i][0]:,} / {backlogs[i][1]:,}" for i in [first, *marks]) + " | 0 / 0 | | | |")
        if args.malloc_report:
            compare_reports(args.malloc_report, hosts)
        producer.close()
        consumer.close()
    finally:
        if broker is not None:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
