"""Runs in: a benchmark process (plus the processes it starts). Measures the actor runtime between two
processes and prints a markdown table: batched 100 B message transfer (msgs/s) and op round-trip latency
(p50/p99), with raw pyzmq PUSH/PULL and multiprocessing.Queue measured in the same run as references. The
round trips are also measured interleaved (alternating blocks of the three paths), so load from other
processes hits them alike; the kqactors / raw pyzmq ratio of that measurement is the fair figure.

    /work/venv/bin/python benchmarks/bench_runtime.py            # ~60 s
    /work/venv/bin/python benchmarks/bench_runtime.py --quick    # smoke run
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import shutil
import struct
import sys
import tempfile
import time

import zmq

from kqactors.runtime import Op, Runtime

# The sample actors live with the tests (tests/support); hosts import them by dotted path too.
_TESTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests")
sys.path.insert(0, _TESTS_DIR)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_TESTS_DIR, os.environ.get("PYTHONPATH")) if p)

MSG_SIZE = 100
PER_BATCH = 1000
SINK = "support.sample_actors:SinkActor"
ECHO = "support.sample_actors:EchoActor"


def packed_batch(count: int = PER_BATCH, size: int = MSG_SIZE) -> bytes:
    """``count`` messages of ``size`` bytes, each behind a 4-byte length: what the Kafka layer hands over."""
    one = struct.pack(">I", size) + b"m" * size
    return one * count


def percentiles(samples: list[float]) -> tuple[float, float]:
    samples = sorted(samples)
    return samples[len(samples) // 2] * 1e6, samples[min(len(samples) - 1, int(len(samples) * 0.99))] * 1e6


# -- kqactors ------------------------------------------------------------------------------------------
def kq_throughput(rt: Runtime, batches: int, frames_per_op: bool) -> float:
    name = f"sink/{'frames' if frames_per_op else 'packed'}/{batches}"
    rt.spawn(name, SINK, host=0)
    if frames_per_op:
        one = b"m" * MSG_SIZE
        make = lambda: Op("DATA", PER_BATCH, [one] * PER_BATCH)  # noqa: E731
    else:
        buf = packed_batch()
        make = lambda: Op("DATA", PER_BATCH, [buf])  # noqa: E731
    rt.request(name, Op("COUNT"), 10)
    started = time.perf_counter()
    for _ in range(batches):
        rt.send(name, make())
    count = rt.request(name, Op("COUNT", priority=-1), 120).payload
    elapsed = time.perf_counter() - started
    assert count["messages"] == batches * PER_BATCH, count
    return batches * PER_BATCH / elapsed


def kq_unbatched(rt: Runtime, messages: int) -> float:
    name = f"sink/single/{messages}"
    rt.spawn(name, SINK, host=0)
    one = b"m" * MSG_SIZE
    rt.request(name, Op("COUNT"), 10)
    started = time.perf_counter()
    for _ in range(messages):
        rt.send(name, Op("DATA", 1, [one]))
    count = rt.request(name, Op("COUNT", priority=-1), 120).payload
    elapsed = time.perf_counter() - started
    assert count["messages"] == messages, count
    return messages / elapsed


def kq_round_trip(rt: Runtime, rounds: int) -> tuple[float, float]:
    rt.spawn("echo", ECHO, host=0)
    for i in range(200):
        rt.request("echo", Op("ECHO", i), 10)
    samples = []
    for i in range(rounds):
        started = time.perf_counter()
        rt.request("echo", Op("ECHO", i), 10)
        samples.append(time.perf_counter() - started)
    return percentiles(samples)


# -- raw pyzmq -----------------------------------------------------------------------------------------
def _zmq_sink(address: str, reply_address: str) -> None:
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.bind(address)
    push = ctx.socket(zmq.PUSH)
    push.connect(reply_address)
    while True:
        frames = pull.recv_multipart(copy=False)
        kind = frames[0].bytes
        if kind == b"echo":
            push.send_multipart([f.bytes for f in frames])
        elif kind == b"count":
            push.send(b"done")
        elif kind == b"stop":
            break
    ctx.destroy(linger=0)


def zmq_reference(batches: int, messages: int, rounds: int) -> dict[str, float]:
    run_dir = tempfile.mkdtemp(prefix="kqbench-")
    address, reply_address = f"ipc://{run_dir}/sink", f"ipc://{run_dir}/reply"
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.bind(reply_address)
    proc = mp.get_context("spawn").Process(target=_zmq_sink, args=(address, reply_address))
    proc.start()
    push = ctx.socket(zmq.PUSH)
    push.connect(address)
    push.send(b"count")
    pull.recv()
    result: dict[str, float] = {}
    buf = packed_batch()
    started = time.perf_counter()
    for _ in range(batches):
        push.send_multipart([b"data", buf], copy=False)
    push.send(b"count")
    pull.recv()
    result["packed"] = batches * PER_BATCH / (time.perf_counter() - started)
    one = b"m" * MSG_SIZE
    started = time.perf_counter()
    for _ in range(messages):
        push.send_multipart([b"data", one])
    push.send(b"count")
    pull.recv()
    result["single"] = messages / (time.perf_counter() - started)
    samples = []
    for i in range(rounds + 200):
        started = time.perf_counter()
        push.send_multipart([b"echo", b"%d" % i])
        pull.recv_multipart()
        if i >= 200:
            samples.append(time.perf_counter() - started)
    result["p50"], result["p99"] = percentiles(samples)
    push.send(b"stop")
    proc.join(10)
    ctx.destroy(linger=0)
    os.rmdir(run_dir) if not os.listdir(run_dir) else None
    return result


# -- multiprocessing.Queue -----------------------------------------------------------------------------
def _mpq_sink(inbox: mp.Queue, outbox: mp.Queue) -> None:
    while True:
        item = inbox.get()
        if item == "stop":
            break
        if item == "count":
            outbox.put("done")
        elif isinstance(item, tuple):
            outbox.put(item)


def mpq_reference(batches: int, messages: int, rounds: int) -> dict[str, float]:
    ctx = mp.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=_mpq_sink, args=(inbox, outbox))
    proc.start()
    inbox.put("count")
    outbox.get()
    result: dict[str, float] = {}
    buf = packed_batch()
    started = time.perf_counter()
    for _ in range(batches):
        inbox.put(buf)
    inbox.put("count")
    outbox.get()
    result["packed"] = batches * PER_BATCH / (time.perf_counter() - started)
    one = b"m" * MSG_SIZE
    started = time.perf_counter()
    for _ in range(messages):
        inbox.put(one)
    inbox.put("count")
    outbox.get()
    result["single"] = messages / (time.perf_counter() - started)
    samples = []
    for i in range(rounds + 200):
        started = time.perf_counter()
        inbox.put(("echo", i))
        outbox.get()
        if i >= 200:
            samples.append(time.perf_counter() - started)
    result["p50"], result["p99"] = percentiles(samples)
    inbox.put("stop")
    proc.join(10)
    return result


# -- interleaved round trips ---------------------------------------------------------------------------
def _mpq_echo(inbox: mp.Queue, outbox: mp.Queue) -> None:
    while (item := inbox.get()) != "stop":
        outbox.put(item)


def interleaved_round_trips(rt: Runtime, rounds: int, block: int = 250) -> dict[str, tuple[float, float]]:
    """Round trips of the three paths measured in alternating blocks of ``block`` within the same seconds,
    so load from other processes on the machine hits all three alike (the ratio is the fair figure)."""
    run_dir = tempfile.mkdtemp(prefix="kqbench-")
    address, reply_address = f"ipc://{run_dir}/sink", f"ipc://{run_dir}/reply"
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.bind(reply_address)
    spawn = mp.get_context("spawn")
    zproc = spawn.Process(target=_zmq_sink, args=(address, reply_address))
    zproc.start()
    push = ctx.socket(zmq.PUSH)
    push.connect(address)
    inbox, outbox = spawn.Queue(), spawn.Queue()
    qproc = spawn.Process(target=_mpq_echo, args=(inbox, outbox))
    qproc.start()
    rt.spawn("echo/interleaved", ECHO, host=0)

    def kq(i: int) -> None:
        rt.request("echo/interleaved", Op("ECHO", i), 10)

    def raw(i: int) -> None:
        push.send_multipart([b"echo", b"%d" % i])
        pull.recv_multipart()

    def mpq(i: int) -> None:
        inbox.put(("echo", i))
        outbox.get()

    paths = {"kq": kq, "raw": raw, "mpq": mpq}
    samples: dict[str, list[float]] = {name: [] for name in paths}
    clock = time.perf_counter
    try:
        for fn in paths.values():  # warm up (connections, imports, caches)
            for i in range(200):
                fn(i)
        for _ in range(max(1, rounds // block)):
            for name, fn in paths.items():
                out = samples[name]
                for i in range(block):
                    started = clock()
                    fn(i)
                    out.append(clock() - started)
    finally:
        push.send(b"stop")
        inbox.put("stop")
        zproc.join(10)
        qproc.join(10)
        ctx.destroy(linger=0)
        shutil.rmtree(run_dir, ignore_errors=True)
    return {name: percentiles(values) for name, values in samples.items()}


def best(runs: list[float], higher_is_better: bool = True) -> float:
    return max(runs) if higher_is_better else min(runs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts, one repetition")
    parser.add_argument("--repeat", type=int, default=3, help="repetitions; the best run is reported")
    args = parser.parse_args()
    batches, messages, rounds, repeat = (200, 5_000, 500, 1) if args.quick else (2_000, 50_000, 5_000, args.repeat)

    kq = {"packed": [], "frames": [], "single": [], "p50": [], "p99": []}
    with Runtime(hosts=1) as rt:
        for i in range(repeat):
            kq["packed"].append(kq_throughput(rt, batches + i, frames_per_op=False))
            kq["frames"].append(kq_throughput(rt, max(1, batches // 10) + i, frames_per_op=True))
            kq["single"].append(kq_unbatched(rt, messages + i))
        p50, p99 = kq_round_trip(rt, rounds * repeat)
        mixed = interleaved_round_trips(rt, rounds * repeat)
    raw = [zmq_reference(batches, messages, rounds) for _ in range(repeat)]
    mpq = [mpq_reference(batches, messages, rounds) for _ in range(repeat)]

    def col(results: list[dict[str, float]], key: str) -> float:
        return best([r[key] for r in results], key not in ("p50", "p99"))

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"Run: python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} cpus, load "
          f"{load:.1f}; pyzmq {zmq.__version__} / libzmq {zmq.zmq_version()}; best of {repeat}; "
          f"{MSG_SIZE} B messages, {PER_BATCH} per batch\n")
    print("| path | kqactors runtime | raw pyzmq PUSH/PULL | multiprocessing.Queue |")
    print("|---|---:|---:|---:|")
    print(f"| batched, packed buffer (1 frame of {PER_BATCH} msgs per op), msgs/s | {best(kq['packed']):,.0f} | "
          f"{col(raw, 'packed'):,.0f} | {col(mpq, 'packed'):,.0f} |")
    print(f"| batched, {PER_BATCH} frames per op, msgs/s | {best(kq['frames']):,.0f} | – | – |")
    print(f"| unbatched, one op (or message) per 100 B, msgs/s | {best(kq['single']):,.0f} | "
          f"{col(raw, 'single'):,.0f} | {col(mpq, 'single'):,.0f} |")
    print(f"| op round trip p50, µs | {p50:.0f} | {col(raw, 'p50'):.0f} | {col(mpq, 'p50'):.0f} |")
    print(f"| op round trip p99, µs | {p99:.0f} | {col(raw, 'p99'):.0f} | {col(mpq, 'p99'):.0f} |")
    k50, k99 = mixed["kq"]
    r50, r99 = mixed["raw"]
    q50, q99 = mixed["mpq"]
    print(f"| op round trip p50, µs, interleaved | {k50:.0f} | {r50:.0f} | {q50:.0f} |")
    print(f"| op round trip p99, µs, interleaved | {k99:.0f} | {r99:.0f} | {q99:.0f} |")
    print()
    print(f"Interleaved p50 ratio kqactors / raw pyzmq: {k50 / r50:.2f}")
    print(f"Targets: batched >= 2,000,000 msgs/s: {'met' if best(kq['packed']) >= 2e6 else 'NOT met'}; "
          f"round trip p50 <= 100 us: {'met' if p50 <= 100 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
