"""AsyncSerializingProducer and AsyncDeserializingConsumer: confluent_kafka.aio's serde-aware asyncio clients.

Runs in: the app process, on the event loop (like AIOProducer / AIOConsumer, which they extend). Construction is
awaited, as in confluent-kafka 2.16 (``producer = await AsyncSerializingProducer(conf)``). The serializers come
from ``key.serializer`` / ``value.serializer`` (``key.deserializer`` / ``value.deserializer``): callables
taking ``(obj, SerializationContext)``, plain or returning an awaitable; they run on the loop, so blocking ones
should be cheap. The ``.builder`` properties of confluent-kafka's Schema Registry serdes are not supported
(kqactors' configuration rejects them). Failures raise kqactors.error's Key/ValueSerializationError,
Key/ValueDeserializationError and ConsumeError, as confluent-kafka's do.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from kqactors.aio.consumer import AIOConsumer
from kqactors.aio.producer import AIOProducer
from kqactors.error import (
    ConsumeError,
    KeyDeserializationError,
    KeySerializationError,
    ValueDeserializationError,
    ValueSerializationError,
)
from kqactors.message import Message
from kqactors.serialization import MessageField, SerializationContext

__all__ = ["AsyncDeserializingConsumer", "AsyncSerializingProducer"]

C = TypeVar("C", bound=type)


def _awaited_construction(cls: C) -> C:
    """Make ``cls(...)`` return a coroutine that runs the class's ``async def __init__`` and yields the
    instance, so instances are made with ``await cls(...)``."""
    plain_new = cls.__new__

    async def initialise(obj: Any, *args: Any, **kwargs: Any) -> Any:
        await obj.__init__(*args, **kwargs)
        return obj

    def new(klass: type, *args: Any, **kwargs: Any) -> Any:
        return initialise(plain_new(klass), *args, **kwargs)

    cls.__new__ = new  # type: ignore[assignment]
    return cls


async def _maybe_await(result: Any) -> Any:
    if inspect.isawaitable(result):
        return await result
    return result


@_awaited_construction
class AsyncSerializingProducer(AIOProducer):
    """An AIOProducer whose produce() serializes the key and then the value first (note the argument order:
    key before value, as confluent-kafka's). ``conf`` is an AIOProducer configuration plus ``key.serializer``
    and ``value.serializer``; keyword arguments go to AIOProducer (executor, ...)::

        producer = await AsyncSerializingProducer({"bootstrap.servers": ..., "value.serializer": StringSerializer()})
    """

    async def _init(self, conf: Mapping[str, Any], **kwargs: Any) -> None:
        conf_copy = dict(conf)
        self._key_serializer: Callable[..., Any] | None = conf_copy.pop("key.serializer", None)
        self._value_serializer: Callable[..., Any] | None = conf_copy.pop("value.serializer", None)
        AIOProducer.__init__(self, conf_copy, **kwargs)

    __init__ = _init  # type: ignore[assignment]  # awaited by _awaited_construction

    async def produce(self, topic: str, key: Any = None, value: Any = None,  # type: ignore[override]
                      partition: int = -1, timestamp: int = 0, headers: Any = None) -> asyncio.Future[Message]:
        """Serialize ``key`` and ``value`` and produce them; returns the delivery future (see AIOProducer).

        Raises KeySerializationError / ValueSerializationError, RuntimeError when closed and TypeError for a
        topic that is not a str (both checked before a serializer runs)."""
        self._check_open()
        if not isinstance(topic, str):
            raise TypeError(f"topic must be a str, not {type(topic).__name__}")
        ctx = SerializationContext(topic, MessageField.KEY, headers)
        if self._key_serializer is not None:
            try:
                key = await _maybe_await(self._key_serializer(key, ctx))
            except Exception as exc:
                raise KeySerializationError(exc) from exc
        ctx.field = MessageField.VALUE
        if self._value_serializer is not None:
            try:
                value = await _maybe_await(self._value_serializer(value, ctx))
            except Exception as exc:
                raise ValueSerializationError(exc) from exc
        return await AIOProducer.produce(self, topic, value, key, partition=partition, timestamp=timestamp,
                                         headers=headers)


@_awaited_construction
class AsyncDeserializingConsumer(AIOConsumer):
    """An AIOConsumer whose poll() and consume() deserialize the key and then the value of each message.
    ``conf`` is an AIOConsumer configuration plus ``key.deserializer`` and ``value.deserializer``::

        consumer = await AsyncDeserializingConsumer({"bootstrap.servers": ..., "group.id": "g",
                                                     "value.deserializer": StringDeserializer()})
    """

    async def _init(self, conf: Mapping[str, Any], **kwargs: Any) -> None:
        conf_copy = dict(conf)
        self._key_deserializer: Callable[..., Any] | None = conf_copy.pop("key.deserializer", None)
        self._value_deserializer: Callable[..., Any] | None = conf_copy.pop("value.deserializer", None)
        AIOConsumer.__init__(self, conf_copy, **kwargs)

    __init__ = _init  # type: ignore[assignment]  # awaited by _awaited_construction

    async def poll(self, timeout: float | None = -1) -> Message | None:
        """The next message, deserialized, or None on timeout. Raises ConsumeError for an error event and
        Key/ValueDeserializationError when a deserializer fails."""
        msg = await AIOConsumer.poll(self, timeout)
        if msg is None:
            return None
        error = msg.error()
        if error is not None:
            raise ConsumeError(error, kafka_message=msg)
        return await self._deserialize(msg)

    async def consume(self, num_messages: int = 1, timeout: float | None = -1) -> list[Message]:
        """Up to ``num_messages`` messages, deserialized; error events are returned as they are (check
        ``msg.error()``), so the rest of the batch is not lost."""
        out = []
        for msg in await AIOConsumer.consume(self, num_messages, timeout):
            out.append(msg if msg.error() is not None else await self._deserialize(msg))
        return out

    async def _deserialize(self, msg: Message) -> Message:
        """Key first, then value (a key deserializer may leave state for the value's), in place."""
        ctx = SerializationContext(msg.topic(), MessageField.KEY, msg.headers())
        key = msg.key()
        if self._key_deserializer is not None:
            try:
                key = await _maybe_await(self._key_deserializer(key, ctx))
            except Exception as exc:
                raise KeyDeserializationError(exception=exc, kafka_message=msg) from exc
        value = msg.value()
        if self._value_deserializer is not None:
            ctx.field = MessageField.VALUE
            try:
                value = await _maybe_await(self._value_deserializer(value, ctx))
            except Exception as exc:
                raise ValueDeserializationError(exception=exc, kafka_message=msg) from exc
        msg.set_key(key)
        msg.set_value(value)
        return msg
