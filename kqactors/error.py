"""confluent-kafka's ``error`` module: the exceptions SerializingProducer and DeserializingConsumer raise.

ConsumeError / ProduceError carry a KafkaError (``args[0]``, ``code``, ``name``), the original
``exception`` and, for consumers, the ``kafka_message``. The (De)SerializationError subclasses are also
SerializationErrors.
"""

from __future__ import annotations

from kqactors.errors import KafkaError, KafkaException
from kqactors.message import Message
from kqactors.serialization import SerializationError

__all__ = ["ConsumeError", "KafkaError", "KafkaException", "KeyDeserializationError", "KeySerializationError",
           "Message", "ProduceError", "SerializationError", "ValueDeserializationError", "ValueSerializationError"]


class _KafkaClientError(KafkaException):
    """A client error: ``args[0]`` the KafkaError, with the original ``exception`` and ``kafka_message``."""

    def __init__(self, kafka_error: KafkaError, exception: Exception | None = None,
                 kafka_message: Message | None = None) -> None:
        super().__init__(kafka_error)
        self.exception = exception
        self.kafka_message = kafka_message

    @property
    def code(self) -> int:
        return self.args[0].code()

    @property
    def name(self) -> str:
        return self.args[0].name()


class ConsumeError(_KafkaClientError):
    """Consuming failed; after a deserialization error ``kafka_message`` holds the raw message."""

    def __init__(self, kafka_error: KafkaError, exception: Exception | None = None,
                 kafka_message: Message | None = None) -> None:
        super().__init__(kafka_error, exception, kafka_message)


class KeyDeserializationError(ConsumeError, SerializationError):
    """The key deserializer raised ``exception`` for ``kafka_message``."""

    def __init__(self, exception: Exception | None = None, kafka_message: Message | None = None) -> None:
        super().__init__(KafkaError(KafkaError._KEY_DESERIALIZATION, str(exception)), exception=exception,
                         kafka_message=kafka_message)


class ValueDeserializationError(ConsumeError, SerializationError):
    """The value deserializer raised ``exception`` for ``kafka_message``."""

    def __init__(self, exception: Exception | None = None, kafka_message: Message | None = None) -> None:
        super().__init__(KafkaError(KafkaError._VALUE_DESERIALIZATION, str(exception)), exception=exception,
                         kafka_message=kafka_message)


class ProduceError(_KafkaClientError):
    """Producing failed."""

    def __init__(self, kafka_error: KafkaError, exception: Exception | None = None) -> None:
        super().__init__(kafka_error, exception, None)


class KeySerializationError(ProduceError, SerializationError):
    """The key serializer raised ``exception``."""

    def __init__(self, exception: Exception | None = None) -> None:
        super().__init__(KafkaError(KafkaError._KEY_SERIALIZATION, str(exception)), exception=exception)


class ValueSerializationError(ProduceError, SerializationError):
    """The value serializer raised ``exception``."""

    def __init__(self, exception: Exception | None = None) -> None:
        super().__init__(KafkaError(KafkaError._VALUE_SERIALIZATION, str(exception)), exception=exception)
