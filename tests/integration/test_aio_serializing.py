"""AsyncSerializingProducer / AsyncDeserializingConsumer on the mock cluster: awaited construction, a round trip
with plain and coroutine serdes, serde errors raised as confluent-kafka raises them."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kqactors.aio import AsyncDeserializingConsumer, AsyncSerializingProducer
from kqactors.error import (
    ConsumeError,
    KeySerializationError,
    ValueDeserializationError,
    ValueSerializationError,
)
from kqactors.serialization import (
    IntegerDeserializer,
    IntegerSerializer,
    MessageField,
    StringDeserializer,
    StringSerializer,
)


def test_round_trip_and_errors(mock_cluster, unique_topic):
    mock_cluster.create_topic(unique_topic, 1)
    calls: list[Any] = []

    async def upper_value(value: Any, ctx: Any) -> bytes:
        calls.append((ctx.topic, ctx.field))
        await asyncio.sleep(0)
        return StringSerializer()(value.upper(), ctx)

    async def main() -> None:
        producer = await AsyncSerializingProducer({"bootstrap.servers": mock_cluster.bootstrap, "kqactors.hosts": 0,
                                                   "key.serializer": IntegerSerializer(),
                                                   "value.serializer": upper_value})
        try:
            delivered = await (await producer.produce(unique_topic, key=7, value="héllo", headers={"h": b"1"}))
            assert (delivered.key(), delivered.value(), delivered.offset()) == (b"\x00\x00\x00\x07", "HÉLLO".encode(), 0)
            with pytest.raises(KeySerializationError):
                await producer.produce(unique_topic, key="not an int", value="x")
            with pytest.raises(ValueSerializationError):
                await producer.produce(unique_topic, key=1, value=5)
            with pytest.raises(TypeError):
                await producer.produce(123, key=1, value="x")
            await (await producer.produce(unique_topic, key=2, value="ok"))
        finally:
            await producer.close()
        with pytest.raises(RuntimeError):
            await producer.produce(unique_topic, key=1, value="x")
        consumer = await AsyncDeserializingConsumer({"bootstrap.servers": mock_cluster.bootstrap, "kqactors.hosts": 0,
                                                     "group.id": f"g-{unique_topic}", "auto.offset.reset": "earliest",
                                                     "key.deserializer": IntegerDeserializer(),
                                                     "value.deserializer": StringDeserializer()})
        try:
            await consumer.subscribe([unique_topic])
            msg = await consumer.poll(30)
            assert msg is not None and (msg.key(), msg.value(), msg.headers()) == (7, "HÉLLO", [("h", b"1")])
            rest = await consumer.consume(10, 10)
            assert [(m.key(), m.value()) for m in rest] == [(2, "OK")]
        finally:
            await consumer.close()
        assert calls and all(call == (unique_topic, MessageField.VALUE) for call in calls)

    asyncio.run(asyncio.wait_for(main(), 90))


def test_deserialization_errors(mock_cluster, unique_topic):
    mock_cluster.create_topic(unique_topic, 1)

    async def main() -> None:
        producer = await AsyncSerializingProducer({"bootstrap.servers": mock_cluster.bootstrap, "kqactors.hosts": 0})
        try:
            await (await producer.produce(unique_topic, key=b"k", value=b"\xff\xfe"))
        finally:
            await producer.close()
        consumer = await AsyncDeserializingConsumer({"bootstrap.servers": mock_cluster.bootstrap, "kqactors.hosts": 0,
                                                     "group.id": f"g-{unique_topic}", "auto.offset.reset": "earliest",
                                                     "enable.partition.eof": True,
                                                     "value.deserializer": StringDeserializer("utf_8")})
        try:
            await consumer.subscribe([unique_topic])
            with pytest.raises(ValueDeserializationError) as info:
                while True:
                    await consumer.poll(30)
            assert info.value.kafka_message.value() == b"\xff\xfe"
            with pytest.raises(ConsumeError):  # the partition EOF event that follows
                await consumer.poll(30)
        finally:
            await consumer.close()

    asyncio.run(asyncio.wait_for(main(), 90))
