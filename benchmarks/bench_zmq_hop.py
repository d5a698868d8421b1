"""One-way latency of a bare pyzmq PUSH → PULL hop between two processes at a modest rate: the floor under
kqactors' own process hops (see RESULTS.md, "Consumer", session 8). Not kqactors code: a reference point.

    python benchmarks/bench_zmq_hop.py [--count 3000] [--rate 1000] plain timeo multi

Modes: ``plain`` a blocking recv of one frame; ``timeo`` the same with RCVTIMEO set (as kqactors' inbox
waits); ``multi`` three frames per message (a header, a 300 B blob and 2 KB of data, like a small op batch).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import tempfile
import time

import zmq


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def _receive(address: str, mode: str, count: int, results: mp.Queue) -> None:
    context = zmq.Context()
    sock = context.socket(zmq.PULL)
    sock.bind(address)
    if mode != "plain":
        sock.setsockopt(zmq.RCVTIMEO, 100)
    latencies: list[int] = []
    while len(latencies) < count:
        try:
            stamp = sock.recv()
        except zmq.Again:
            continue
        arrived = time.perf_counter_ns()
        while sock.getsockopt(zmq.RCVMORE):
            sock.recv(copy=False)
        latencies.append(arrived - int(stamp))
    results.put(latencies)
    sock.close(0)
    context.term()


def _send(address: str, mode: str, count: int, rate: float) -> None:
    context = zmq.Context()
    sock = context.socket(zmq.PUSH)
    sock.connect(address)
    time.sleep(0.3)  # let the connection come up before the clock matters
    blob, data = b"b" * 300, b"d" * 2000
    for _ in range(count):
        stamp = str(time.perf_counter_ns()).encode()
        if mode == "multi":
            sock.send(stamp, zmq.SNDMORE)
            sock.send(blob, zmq.SNDMORE)
            sock.send(data)
        else:
            sock.send(stamp)
        time.sleep(1.0 / rate)
    sock.close(linger=1000)
    context.term()


def run(mode: str, count: int, rate: float) -> str:
    with tempfile.TemporaryDirectory(prefix="kq-hop-") as tmp:
        address = f"ipc://{os.path.join(tmp, 'hop')}"
        results: mp.Queue = mp.Queue()
        receiver = mp.Process(target=_receive, args=(address, mode, count, results))
        sender = mp.Process(target=_send, args=(address, mode, count, rate))
        receiver.start()
        sender.start()
        latencies = [ns / 1000 for ns in results.get()[count // 30:]]  # the first ones warm up
        receiver.join()
        sender.join()
    return (f"{mode:6s} p50 {_percentile(latencies, 0.5):6.0f} µs  p90 {_percentile(latencies, 0.9):6.0f} µs  "
            f"p99 {_percentile(latencies, 0.99):6.0f} µs")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modes", nargs="*", default=["plain", "timeo", "multi"],
                        choices=["plain", "timeo", "multi"])
    parser.add_argument("--count", type=int, default=3000)
    parser.add_argument("--rate", type=float, default=1000.0, help="messages per second")
    args = parser.parse_args()
    for mode in args.modes:
        print(run(mode, args.count, args.rate), flush=True)


if __name__ == "__main__":
    main()
