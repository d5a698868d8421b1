"""SerializingProducer and DeserializingConsumer, confluent-kafka's serde-aware clients, built on the
Producer and Consumer facades' public methods only.

Runs in: the app process. The serializers come from the configuration (``key.serializer``,
``value.serializer``, ``key.deserializer``, ``value.deserializer``) and are removed from it before the
facade sees it. Failures are raised as kqactors.error's Key/ValueSerializationError (produce) and
Key/ValueDeserializationError or ConsumeError (poll), as confluent-kafka does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kqactors.client.consumer.consumer import Consumer
from kqactors.client.producer.producer import Producer
from kqactors.error import (
    ConsumeError,
    KeyDeserializationError,
    KeySerializationError,
    ValueDeserializationError,
    ValueSerializationError,
)
from kqactors.message import Message
from kqactors.serialization import MessageField, SerializationContext

__all__ = ["DeserializingConsumer", "SerializingProducer"]


class SerializingProducer(Producer):
    """A Producer whose produce() runs ``key.serializer`` / ``value.serializer`` (callables taking
    ``(obj, SerializationContext)``) before queueing the message."""

    def __init__(self, conf: Mapping[str, Any]) -> None:
        conf_copy = dict(conf)
        self._key_serializer: Callable[..., Any] | None = conf_copy.pop("key.serializer", None)
        self._value_serializer: Callable[..., Any] | None = conf_copy.pop("value.serializer", None)
        super().__init__(conf_copy)

    def produce(self, topic: str, key: Any = None, value: Any = None, partition: int = -1,  # type: ignore[override]
                on_delivery: Callable[..., Any] | None = None, timestamp: int = 0, headers: Any = None) -> None:
        """Serialize ``key`` and ``value`` and produce them (note the order: key before value)."""
        ctx = SerializationContext(topic, MessageField.KEY, headers)
        if self._key_serializer is not None:
            try:
                key = self._key_serializer(key, ctx)
            except Exception as exc:
                raise KeySerializationError(exc) from exc
        ctx.field = MessageField.VALUE
        if self._value_serializer is not None:
            try:
                value = self._value_serializer(value, ctx)
            except Exception as exc:
                raise ValueSerializationError(exc) from exc
        super().produce(topic, value, key, headers=headers, partition=partition, timestamp=timestamp,
                        on_delivery=on_delivery)


class DeserializingConsumer(Consumer):
    """A Consumer whose poll() runs ``key.deserializer`` / ``value.deserializer`` and raises error events
    as ConsumeError instead of returning them."""

    def __init__(self, conf: Mapping[str, Any]) -> None:
        conf_copy = dict(conf)
        self._key_deserializer: Callable[..., Any] | None = conf_copy.pop("key.deserializer", None)
        self._value_deserializer: Callable[..., Any] | None = conf_copy.pop("value.deserializer", None)
        super().__init__(conf_copy)

    def poll(self, timeout: float | None = -1) -> Message | None:
        """The next message, deserialized; None on timeout. Raises ConsumeError for an error event."""
        msg = super().poll(timeout)
        if msg is None:
            return None
        if msg.error() is not None:
            raise ConsumeError(msg.error(), kafka_message=msg)
        ctx = SerializationContext(msg.topic(), MessageField.VALUE, msg.headers())
        value = msg.value()
        if self._value_deserializer is not None:
            try:
                value = self._value_deserializer(value, ctx)
            except Exception as exc:
                raise ValueDeserializationError(exception=exc, kafka_message=msg) from exc
        key = msg.key()
        ctx.field = MessageField.KEY
        if self._key_deserializer is not None:
            try:
                key = self._key_deserializer(key, ctx)
            except Exception as exc:
                raise KeyDeserializationError(exception=exc, kafka_message=msg) from exc
        msg.set_key(key)
        msg.set_value(value)
        return msg

    def consume(self, num_messages: int = 1, timeout: float | None = -1) -> list[Message]:
        """Not available on a DeserializingConsumer (as in confluent-kafka): use poll()."""
        raise NotImplementedError
