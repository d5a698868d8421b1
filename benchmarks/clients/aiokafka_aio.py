"""Benchmark runner: aiokafka (AIOKafkaProducer / AIOKafkaConsumer) in the awaited-batch loops of _aio_common.

Runs in: a fresh runner process per run (one event loop). Producer: acks=1, linger_ms=5 unless --linger-ms (the same wait as
the librdkafka-style clients), max_batch_size 16 KiB (its default, the fastest at 100 B on this harness: see
bench_produce.PEER_BATCH_BYTES) unless --batch-size; ``send()`` is awaited for its delivery future, as
AIOProducer.produce(). Consumer: no group, getmany(max_records=10000), as benchmarks/clients/aiokafka_consume.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

from _aio_common import run
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

BATCH_SIZE = 16 * 1024


class Client:
    def __init__(self, args: Any, options: Any) -> None:
        self.args = args
        self.options = options
        self.mode = options.mode
        self.producer: AIOKafkaProducer | None = None
        self.consumer: AIOKafkaConsumer | None = None

    async def start(self) -> None:
        args = self.args
        if self.mode == "produce":
            self.producer = AIOKafkaProducer(
                bootstrap_servers=args.bootstrap, acks=1, linger_ms=self.options.linger_ms,
                max_batch_size=args.batch_size or BATCH_SIZE,
                compression_type=None if args.compression == "none" else args.compression)
            await self.producer.start()
            self.send = self.producer.send
        else:
            self.consumer = AIOKafkaConsumer(bootstrap_servers=args.bootstrap, group_id=None,
                                             enable_auto_commit=False, auto_offset_reset="earliest")
            await self.consumer.start()

    async def partitions(self, topic: str) -> list[int]:
        found = self.consumer.partitions_for_topic(topic)
        if not found:
            await self.consumer._client.force_metadata_update()
            found = self.consumer.partitions_for_topic(topic)
        return sorted(found or ())

    async def assign_from_beginning(self, topic: str, partitions: list[int]) -> None:
        tps = [TopicPartition(topic, p) for p in partitions]
        self.consumer.assign(tps)
        await self.consumer.seek_to_beginning(*tps)

    async def take(self) -> int:
        batches = await self.consumer.getmany(timeout_ms=1000, max_records=10000)
        return sum(len(records) for records in batches.values())

    async def stop(self) -> None:
        if self.producer is not None:
            await self.producer.stop()
        if self.consumer is not None:
            await self.consumer.stop()


if __name__ == "__main__":
    asyncio.run(run("aiokafka-aio", Client))
