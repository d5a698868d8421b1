"""confluent-kafka's serialization API: Serializer/Deserializer bases, the String, Integer and Double
serdes, SerializationContext, MessageField and SerializationError.

Runs in: the app process (SerializingProducer / DeserializingConsumer call them per message). Bytes are
the same as confluent-kafka's: big-endian int32 and IEEE double, strings in the given codec.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from enum import Enum
from typing import Any

from kqactors.errors import KafkaException

__all__ = ["Deserializer", "DoubleDeserializer", "DoubleSerializer", "IntegerDeserializer", "IntegerSerializer",
           "MessageField", "SerializationContext", "SerializationError", "Serializer", "StringDeserializer",
           "StringSerializer"]

HeadersType = list[tuple[str, bytes | None]] | dict[str, bytes | None]


class MessageField(str, Enum):
    """Which part of a message a serializer works on."""

    NONE = "none"
    KEY = "key"
    VALUE = "value"

    def __str__(self) -> str:
        return str(self.value)


class SerializationContext:
    """What a serializer is told about the message: ``topic``, ``field`` and ``headers``."""

    def __init__(self, topic: str, field: MessageField, headers: HeadersType | None = None) -> None:
        self.topic = topic
        self.field = field
        self.headers = headers


class SerializationError(KafkaException):
    """A serializer or deserializer failed."""


class Serializer:
    """Base class: ``serializer(obj, ctx)`` returns bytes or None."""

    __slots__: list[str] = []

    def __call__(self, obj: Any, ctx: SerializationContext | None = None) -> bytes | None:
        raise NotImplementedError

    def set_cluster_id_resolver(self, resolver: Callable[[], Any]) -> None:
        """Hook for serializers that need the cluster id; the built-in ones do not."""

    def close(self) -> None:
        """Release resources; nothing for the built-in ones."""


class Deserializer:
    """Base class: ``deserializer(value, ctx)`` returns a Python object."""

    __slots__: list[str] = []

    def __call__(self, value: bytes | None, ctx: SerializationContext | None = None) -> Any:
        raise NotImplementedError

    def set_cluster_id_resolver(self, resolver: Callable[[], Any]) -> None:
        """Hook for deserializers that need the cluster id; the built-in ones do not."""

    def close(self) -> None:
        """Release resources; nothing for the built-in ones."""


def _pack(fmt: str, obj: Any) -> bytes | None:
    if obj is None:
        return None
    try:
        return struct.pack(fmt, obj)
    except struct.error as exc:
        raise SerializationError(str(exc)) from None


def _unpack(fmt: str, value: bytes | None) -> Any:
    if value is None:
        return None
    try:
        return struct.unpack(fmt, value)[0]
    except struct.error as exc:
        raise SerializationError(str(exc)) from None


class DoubleSerializer(Serializer):
    """float -> 8 bytes, IEEE 754 big-endian (Kafka's DoubleSerializer)."""

    def __call__(self, obj: float | None, ctx: SerializationContext | None = None) -> bytes | None:
        return _pack(">d", obj)


class DoubleDeserializer(Deserializer):
    """8 bytes, IEEE 754 big-endian -> float."""

    def __call__(self, value: bytes | None, ctx: SerializationContext | None = None) -> float | None:
        return _unpack(">d", value)


class IntegerSerializer(Serializer):
    """int -> 4 bytes, signed big-endian (Kafka's IntegerSerializer)."""

    def __call__(self, obj: int | None, ctx: SerializationContext | None = None) -> bytes | None:
        return _pack(">i", obj)


class IntegerDeserializer(Deserializer):
    """4 bytes, signed big-endian -> int."""

    def __call__(self, value: bytes | None, ctx: SerializationContext | None = None) -> int | None:
        return _unpack(">i", value)


class StringSerializer(Serializer):
    """str -> bytes in ``codec`` (default utf_8)."""

    def __init__(self, codec: str = "utf_8") -> None:
        self.codec = codec

    def __call__(self, obj: str | None, ctx: SerializationContext | None = None) -> bytes | None:
        if obj is None:
            return None
        try:
            return obj.encode(self.codec)
        except UnicodeError as exc:
            raise SerializationError(str(exc)) from None


class StringDeserializer(Deserializer):
    """bytes in ``codec`` (default utf_8) -> str."""

    def __init__(self, codec: str = "utf_8") -> None:
        self.codec = codec

    def __call__(self, value: bytes | None, ctx: SerializationContext | None = None) -> str | None:
        if value is None:
            return None
        try:
            return value.decode(self.codec)
        except UnicodeError as exc:
            raise SerializationError(str(exc)) from None
