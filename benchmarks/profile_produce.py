"""Runs in: a developer shell. Profiles kqactors' app process while it produces (cProfile around the
produce loop and the final flush) and reports every process's CPU seconds for the measured phase.

    /work/venv/bin/python benchmarks/profile_produce.py --size 100 --compression none --count 200000

With ``--profile-hosts DIR`` every kqactors host process is profiled too (see host_profile/).
Prints the top functions by own time (app process) and the per-process CPU split (app vs host processes),
which is how benchmarks/RESULTS.md's "where the time goes" was measured.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
import uuid
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).parent / "clients"))
from _common import make_payloads  # noqa: E402

from kqactors import Producer  # noqa: E402
from kqactors.cli.perf_payload import create_topic  # noqa: E402


def _label(child: psutil.Process) -> str:
    """A child's name in the split: a kqactors host's key (main, h1, ...), else its program, with its pid."""
    try:
        argv = child.cmdline()
    except psutil.Error:
        argv = []
    if "--key" in argv[:-1]:
        return f"{argv[argv.index('--key') + 1]} {child.pid}"
    name = Path(argv[0]).name if argv else "?"
    return f"{name} {child.pid}"


def cpu_by_process() -> dict[str, float]:
    """user+system CPU seconds of this process (``app``) and each child (host key or program, and pid)."""
    me = psutil.Process()
    out = {"app": sum(me.cpu_times()[:2])}
    for child in me.children(recursive=True):
        try:
            out[_label(child)] = sum(child.cpu_times()[:2])
        except psutil.Error:
            continue
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", help="default: start an embedded Tansu broker")
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--compression", default="none")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="an extra producer property (e.g. kqactors.hosts=0)")
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--no-profile", action="store_true", help="only the CPU split, no cProfile overhead")
    parser.add_argument("--profile-hosts", type=Path, metavar="DIR",
                        help="also cProfile every host process; stats land in DIR/<host>-<pid>.pstats")
    args = parser.parse_args()
    if args.profile_hosts:
        # Host processes inherit the environment: the sitecustomize in host_profile/ starts their profiler.
        args.profile_hosts.mkdir(parents=True, exist_ok=True)
        os.environ["KQACTORS_PROFILE_DIR"] = str(args.profile_hosts.resolve())
        os.environ["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(Path(__file__).parent / "host_profile"), os.environ.get("PYTHONPATH")]))
    broker = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        from kqactors.testing.tansu import TansuBroker

        broker = TansuBroker().start()
        bootstrap = broker.bootstrap
    try:
        topic = f"profile-{uuid.uuid4().hex[:8]}"
        create_topic(bootstrap, topic, 3)
        config = {"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5, "compression.type": args.compression}
        config.update(item.split("=", 1) for item in args.set)
        producer = Producer(config)
        for _ in range(10):
            producer.produce(topic, b"warm-up")
        producer.flush(30)
        payloads = make_payloads(args.size)
        delivered = [0]

        def on_delivery(error: object, message: object) -> None:
            delivered[0] += error is None

        full = {"times": 0, "waited": 0.0, "flush": 0.0}

        def loop() -> None:
            produce, poll, distinct = producer.produce, producer.poll, len(payloads)
            clock = time.perf_counter
            for index in range(args.count):
                while True:
                    try:
                        produce(topic, payloads[index % distinct], on_delivery=on_delivery)
                        break
                    except BufferError:  # the queue is full: the pipeline, not this thread, sets the pace
                        full["times"] += 1
                        began = clock()
                        poll(0.05)
                        full["waited"] += clock() - began
                if index % 1000 == 999:
                    poll(0)
            began = clock()
            producer.flush(120)
            full["flush"] = clock() - began

        before = cpu_by_process()
        started = time.perf_counter()
        profiler = None if args.no_profile else cProfile.Profile()
        if profiler:
            profiler.enable()
        loop()
        if profiler:
            profiler.disable()
        elapsed = time.perf_counter() - started
        after = cpu_by_process()
        print(f"{delivered[0]} delivered in {elapsed:.2f} s = {delivered[0] / elapsed:,.0f} msgs/s "
              f"(profiling {'off' if args.no_profile else 'on'})")
        print(f"  queue full {full['times']} times, {full['waited']:.2f} s waiting in poll(); final flush "
              f"{full['flush']:.2f} s")
        for name, cpu in after.items():
            used = cpu - before.get(name, 0.0)
            print(f"  cpu {name:16s} {used:6.2f} s  {used / args.count * 1e6:6.1f} µs/msg")
        if profiler:
            pstats.Stats(profiler).sort_stats("tottime").print_stats(args.top)
        producer.close()
        if args.profile_hosts:
            time.sleep(1.0)  # hosts dump their stats as they exit
            for path in sorted(args.profile_hosts.glob("*.pstats")):
                print(f"==== host profile {path.name}")
                pstats.Stats(str(path)).sort_stats("tottime").print_stats(args.top)
    finally:
        if broker is not None:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
