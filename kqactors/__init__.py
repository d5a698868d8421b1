"""kqactors: a Kafka client for Python with librdkafka's semantics, built as an actor system on processes.

The public names mirror confluent-kafka-python's so that ``from kqactors import Producer`` is a drop-in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kqactors.errors import KafkaError, KafkaException
from kqactors.message import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    OFFSET_STORED,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_NOT_AVAILABLE,
    Message,
    TopicPartition,
)

if TYPE_CHECKING:
    from kqactors.client.consumer.consumer import Consumer
    from kqactors.client.producer.producer import Producer

__version__ = "0.1.0"

__all__ = [
    "OFFSET_BEGINNING", "OFFSET_END", "OFFSET_INVALID", "OFFSET_STORED",
    "TIMESTAMP_CREATE_TIME", "TIMESTAMP_LOG_APPEND_TIME", "TIMESTAMP_NOT_AVAILABLE",
    "Consumer", "KafkaError", "KafkaException", "Message", "Producer", "TopicPartition", "__version__",
]


def __getattr__(name: str) -> Any:
    """Import the clients (and with them the runtime and pyzmq) only when first used."""
    if name == "Producer":
        from kqactors.client.producer.producer import Producer

        return Producer
    if name == "Consumer":
        from kqactors.client.consumer.consumer import Consumer

        return Consumer
    raise AttributeError(f"module 'kqactors' has no attribute {name!r}")
