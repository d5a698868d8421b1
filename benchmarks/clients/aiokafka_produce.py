"""Benchmark runner: aiokafka AIOKafkaProducer. Runs in: a fresh runner process per run (one event loop).

Config: acks=1, linger_ms=args.linger_ms, max_batch_size=BATCH_SIZE unless --batch-size
(the harness passes its per-case choice), compression as asked;
everything else default. Each ``await send()`` returns a delivery future; a done-callback counts it.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

from _common import (
    WARMUP_MESSAGES,
    announce_ready_and_wait,
    error_name,
    parse_args,
    payloads_for,
    report_and_wait,
)
from aiokafka import AIOKafkaProducer

BATCH_SIZE = 16 * 1024


async def run() -> None:
    args = parse_args()
    payloads = payloads_for(args)
    producer = AIOKafkaProducer(
        bootstrap_servers=args.bootstrap, acks=1, linger_ms=5,
        max_batch_size=args.batch_size or BATCH_SIZE,
        compression_type=None if args.compression == "none" else args.compression,
    )
    await producer.start()
    try:
        for _ in range(WARMUP_MESSAGES):
            await producer.send_and_wait(args.topic, b"warm-up")
        errors: Counter = Counter()
        state = {"delivered": 0, "last": 0.0}

        def on_done(future: asyncio.Future) -> None:
            state["last"] = time.perf_counter()
            error = future.exception()
            if error is None:
                state["delivered"] += 1
            else:
                errors[error_name(error)] += 1

        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, announce_ready_and_wait)
        send, topic, distinct = producer.send, args.topic, len(payloads)
        started = time.perf_counter()
        for index in range(args.count):
            future = await send(topic, payloads[index % distinct])
            future.add_done_callback(on_done)
        await producer.flush()
        deadline = time.monotonic() + 120
        while state["delivered"] + sum(errors.values()) < args.count and time.monotonic() < deadline:
            await asyncio.sleep(0.001)
        missing = args.count - state["delivered"] - sum(errors.values())
        if missing:
            errors["NO_DELIVERY_REPORT"] += missing
        await loop.run_in_executor(
            None, lambda: report_and_wait("aiokafka", args, state["delivered"], dict(errors),
                                          state["last"] - started))
    finally:
        await producer.stop()


if __name__ == "__main__":
    asyncio.run(run())
