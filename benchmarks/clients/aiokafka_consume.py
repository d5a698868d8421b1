"""Benchmark runner: aiokafka AIOKafkaConsumer (assign + seek_to_beginning, getmany loop).

Runs in: a fresh runner process per run. Defaults except no group/auto-commit; elapsed is assign → last
message. ``--mode subscribe``: subscribe with a fresh group (auto_offset_reset earliest) instead; elapsed is
subscribe → last message.
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid

from _common import announce_ready_and_wait, parse_args, report_and_wait
from _rdkafka_consume import split_mode_args
from aiokafka import AIOKafkaConsumer, TopicPartition


async def consume(args, subscribe: bool) -> None:
    group = f"bench-subscribe-{uuid.uuid4().hex[:8]}" if subscribe else None
    consumer = AIOKafkaConsumer(bootstrap_servers=args.bootstrap, group_id=group, enable_auto_commit=False,
                                auto_offset_reset="earliest")
    await consumer.start()
    try:
        partitions = sorted(consumer.partitions_for_topic(args.topic) or ())
        if not partitions:
            await consumer._client.force_metadata_update()
            partitions = sorted(consumer.partitions_for_topic(args.topic) or ())
        await asyncio.get_running_loop().run_in_executor(None, announce_ready_and_wait)
        started = time.perf_counter()
        if subscribe:
            consumer.subscribe([args.topic])
        else:
            tps = [TopicPartition(args.topic, p) for p in partitions]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
        received = 0
        first_message_s = None
        deadline = time.monotonic() + 300
        while received < args.count and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=1000, max_records=10000)
            received += sum(len(records) for records in batches.values())
            if first_message_s is None and received:
                first_message_s = time.perf_counter() - started
        elapsed = time.perf_counter() - started
        await asyncio.get_running_loop().run_in_executor(
            None, lambda: report_and_wait("aiokafka", args, received, {}, elapsed,
                                         first_message_s=first_message_s))
    finally:
        await consumer.stop()


if __name__ == "__main__":
    mode, rest = split_mode_args(sys.argv[1:])
    asyncio.run(consume(parse_args(rest), mode.mode == "subscribe"))
