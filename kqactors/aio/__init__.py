"""kqactors.aio: asyncio clients shaped like confluent-kafka's ``confluent_kafka.aio`` (AIOProducer, AIOConsumer,
AsyncSerializingProducer, AsyncDeserializingConsumer).

Runs in: the app process, on an asyncio event loop. The clients wrap the sync Producer and Consumer and are
driven by the loop itself: the loop watches the app's inbox (a ZeroMQ socket's file descriptor) and serves
delivery reports and fetched messages as they arrive, so no thread waits per call. See
kqactors/aio/_loop.py for how, producer.py and consumer.py for where they differ from confluent-kafka's.
"""

from __future__ import annotations

from kqactors.aio.consumer import AIOConsumer
from kqactors.aio.producer import AIOProducer
from kqactors.aio.serializing import AsyncDeserializingConsumer, AsyncSerializingProducer

__all__ = ["AIOConsumer", "AIOProducer", "AsyncDeserializingConsumer", "AsyncSerializingProducer"]
