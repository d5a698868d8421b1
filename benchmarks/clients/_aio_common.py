"""The asyncio benchmark loops shared by the kqactors.aio, confluent_kafka.aio and aiokafka runners.

Runs in: a benchmark runner process (one event loop), started by benchmarks/bench_aio.py through
benchmarks/harness.py (READY / GO / RESULT / EXIT handshake in clients/_common.py). Owns the two measured
loops, ``--mode``:

- ``produce``: ``count`` messages of ``size`` bytes (no key, default partitioner) in awaited batches: the
  runner issues ``--gather`` produce() calls, then awaits all their deliveries (asyncio.gather) before the next
  batch. Elapsed: first produce() → the last batch's deliveries.
- ``consume``: the topic is pre-filled; assign every partition from the beginning and consume until ``count``
  messages arrived. Elapsed: assign → last message (the first message's time is reported too).

``--linger-ms`` (default 5, every producer) and ``--hosts`` (kqactors.hosts, kqactors only) shape the clients.
A client adapter, made by ``make_client(args, options)``, gives: ``start()``, ``send(topic, value)`` (an awaitable of an awaitable delivery, as
confluent_kafka.aio's produce()), ``assign_from_beginning(topic, partitions)``, ``take()`` (the next batch
of messages), ``partitions(topic)`` and ``stop()``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import Counter
from typing import Any

from _common import announce_ready_and_wait, error_name, parse_args, payloads_for, report_and_wait

WARMUP_MESSAGES = 10


def split_args(argv: list[str]) -> tuple[argparse.Namespace, argparse.Namespace]:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--mode", choices=("produce", "consume"), default="produce")
    parser.add_argument("--gather", type=int, default=1000, help="produce(): awaits gathered per batch")
    parser.add_argument("--linger-ms", type=float, default=5.0, help="the producers' linger (default 5)")
    parser.add_argument("--hosts", type=int, default=None, help="kqactors.hosts (kqactors only; default: its own)")
    mode, rest = parser.parse_known_args(argv)
    return mode, parse_args(rest)


async def _handshake(fn: Any) -> None:
    await asyncio.get_running_loop().run_in_executor(None, fn)


async def measure_produce(name: str, client: Any, args: argparse.Namespace, gather: int) -> None:
    payloads = payloads_for(args)
    distinct = len(payloads)
    for _ in range(WARMUP_MESSAGES):
        await (await client.send(args.topic, b"warm-up"))
    await _handshake(announce_ready_and_wait)
    errors: Counter = Counter()
    delivered = 0
    send, topic, count = client.send, args.topic, args.count
    started = time.perf_counter()
    for first in range(0, count, gather):
        futures = [await send(topic, payloads[index % distinct]) for index in range(first, min(first + gather, count))]
        for outcome in await asyncio.gather(*futures, return_exceptions=True):
            if isinstance(outcome, BaseException):
                errors[error_name(outcome.args[0] if outcome.args else outcome)] += 1
            else:
                delivered += 1
    elapsed = time.perf_counter() - started
    await _handshake(lambda: report_and_wait(name, args, delivered, dict(errors), elapsed, gather=gather))


async def measure_consume(name: str, client: Any, args: argparse.Namespace) -> None:
    partitions = await client.partitions(args.topic)
    await _handshake(announce_ready_and_wait)
    started = time.perf_counter()
    await client.assign_from_beginning(args.topic, partitions)
    received = 0
    first_message_s = None
    deadline = time.monotonic() + 300
    while received < args.count and time.monotonic() < deadline:
        received += await client.take()
        if first_message_s is None and received:
            first_message_s = time.perf_counter() - started
    elapsed = time.perf_counter() - started
    await _handshake(lambda: report_and_wait(name, args, received, {}, elapsed, first_message_s=first_message_s))


async def run(name: str, make_client: Any) -> None:
    mode, args = split_args(sys.argv[1:])
    client = make_client(args, mode)
    await client.start()
    try:
        if mode.mode == "produce":
            await measure_produce(name, client, args, mode.gather)
        else:
            await measure_consume(name, client, args)
    finally:
        await client.stop()
