"""Benchmark runner: confluent_kafka.aio (AIOProducer / AIOConsumer, confluent-kafka 2.16). Runs in: a fresh
runner process per run (one event loop plus confluent's thread pools).

Config: the same as kqactors.aio's (acks=1, linger.ms=5 unless --linger-ms; consumer defaults, no commits); the AIOProducer at
its defaults (batch_size=1000, so each gathered batch of 1,000 is handed to librdkafka as it completes)."""

from __future__ import annotations

import asyncio
from typing import Any

from _aio_common import run
from confluent_kafka import OFFSET_BEGINNING, TopicPartition
from confluent_kafka.aio import AIOConsumer, AIOProducer


class Client:
    def __init__(self, args: Any, options: Any) -> None:
        self.args = args
        self.options = options
        self.mode = options.mode
        self.producer: AIOProducer | None = None
        self.consumer: AIOConsumer | None = None

    async def start(self) -> None:
        if self.mode == "produce":
            self.producer = AIOProducer({"bootstrap.servers": self.args.bootstrap, "acks": "1",
                                         "linger.ms": self.options.linger_ms,
                                         "compression.type": self.args.compression})
            self.send = self.producer.produce
        else:
            self.consumer = AIOConsumer({"bootstrap.servers": self.args.bootstrap, "group.id": "bench-aio",
                                         "enable.auto.commit": False})

    async def partitions(self, topic: str) -> list[int]:
        metadata = await self.consumer.list_topics(topic, timeout=30)
        return sorted(metadata.topics[topic].partitions)

    async def assign_from_beginning(self, topic: str, partitions: list[int]) -> None:
        await self.consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])

    async def take(self) -> int:
        return sum(1 for msg in await self.consumer.consume(1000, 1.0) if msg.error() is None)

    async def stop(self) -> None:
        for client in (self.producer, self.consumer):
            if client is not None:
                await client.close()


if __name__ == "__main__":
    asyncio.run(run("confluent-kafka-aio", Client))
