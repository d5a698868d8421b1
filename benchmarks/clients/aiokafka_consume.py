"""Benchmark runner: aiokafka AIOKafkaConsumer (assign + seek_to_beginning, getmany loop).

Runs in: a fresh runner process per run. Defaults except no group/auto-commit; elapsed is assign → last
message.
"""

from __future__ import annotations

import asyncio
import time

from _common import announce_ready_and_wait, parse_args, report_and_wait
from aiokafka import AIOKafkaConsumer, TopicPartition


async def consume(args) -> None:
    consumer = AIOKafkaConsumer(bootstrap_servers=args.bootstrap, group_id=None, enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = sorted(consumer.partitions_for_topic(args.topic) or ())
        if not partitions:
            await consumer._client.force_metadata_update()
            partitions = sorted(consumer.partitions_for_topic(args.topic) or ())
        await asyncio.get_running_loop().run_in_executor(None, announce_ready_and_wait)
        started = time.perf_counter()
        tps = [TopicPartition(args.topic, p) for p in partitions]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        received = 0
        deadline = time.monotonic() + 300
        while received < args.count and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=1000, max_records=10000)
            received += sum(len(records) for records in batches.values())
        elapsed = time.perf_counter() - started
        await asyncio.get_running_loop().run_in_executor(
            None, lambda: report_and_wait("aiokafka", args, received, {}, elapsed))
    finally:
        await consumer.stop()


if __name__ == "__main__":
    asyncio.run(consume(parse_args()))
