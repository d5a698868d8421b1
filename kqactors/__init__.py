"""kqactors: a Kafka client for Python with librdkafka's semantics, built as an actor system on processes.

The public names mirror confluent-kafka-python's so that ``from kqactors import Producer`` is a drop-in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kqactors._lazy import lazy_exports

if TYPE_CHECKING:
    from kqactors import error, serialization
    from kqactors._model import (
        ConsumerGroupState,
        ConsumerGroupTopicPartitions,
        ConsumerGroupType,
        ElectionType,
        IsolationLevel,
        Node,
        ThrottleEvent,
        TopicCollection,
        TopicPartitionInfo,
        Uuid,
    )
    from kqactors.client.consumer.consumer import Consumer
    from kqactors.client.producer.producer import Producer
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
    from kqactors.partitioner import consistent_partition as consistent
    from kqactors.partitioner import fnv1a_partition as fnv1a
    from kqactors.partitioner import murmur2_partition as murmur2
    from kqactors.serializing import DeserializingConsumer, SerializingProducer

__version__ = "0.1.0"


def _version_int(text: str) -> int:
    """librdkafka's packed form of a version, 0xMMmmrrpp (pp = 0xff for a release)."""
    major, minor, revision = (int(part) for part in (text.split(".") + ["0", "0"])[:3])
    return (major << 24) | (minor << 16) | (revision << 8) | 0xFF


def version() -> tuple[str, int]:
    """kqactors' version as (string, int), shaped like confluent_kafka.version()."""
    return (__version__, _version_int(__version__))


def libversion() -> tuple[str, int]:
    """The version of the Kafka client underneath, as (string, int) like confluent_kafka.libversion(): for
    kqactors, whose engine is itself, that is kqactors' own version."""
    return (__version__, _version_int(__version__))

__all__ = [
    "OFFSET_BEGINNING", "OFFSET_END", "OFFSET_INVALID", "OFFSET_STORED",
    "TIMESTAMP_CREATE_TIME", "TIMESTAMP_LOG_APPEND_TIME", "TIMESTAMP_NOT_AVAILABLE",
    "Consumer", "KafkaError", "KafkaException", "Message", "Producer", "TopicPartition", "__version__",
    "ConsumerGroupState", "ConsumerGroupTopicPartitions", "ConsumerGroupType", "DeserializingConsumer",
    "ElectionType", "IsolationLevel", "Node", "SerializingProducer", "ThrottleEvent", "TopicCollection",
    "TopicPartitionInfo", "Uuid", "consistent", "error", "fnv1a", "libversion", "murmur2", "serialization",
    "version",
]


# Every public name loads at its first use (kqactors/_lazy.py): an actor host imports this package with its
# submodules and uses none of the app's names it does not need (the partitioners, the admin model, the
# serializers; with the clients, the runtime and pyzmq).
_MODULE_OF = {
    **dict.fromkeys(["OFFSET_BEGINNING", "OFFSET_END", "OFFSET_INVALID", "OFFSET_STORED", "TIMESTAMP_CREATE_TIME",
                     "TIMESTAMP_LOG_APPEND_TIME", "TIMESTAMP_NOT_AVAILABLE", "Message", "TopicPartition"], "message"),
    **dict.fromkeys(["KafkaError", "KafkaException"], "errors"),
    **dict.fromkeys(["ConsumerGroupState", "ConsumerGroupTopicPartitions", "ConsumerGroupType", "ElectionType",
                     "IsolationLevel", "Node", "ThrottleEvent", "TopicCollection", "TopicPartitionInfo", "Uuid"],
                    "_model"),
    "consistent": "partitioner:consistent_partition", "fnv1a": "partitioner:fnv1a_partition",
    "murmur2": "partitioner:murmur2_partition",
    "error": "error:", "serialization": "serialization:",
    "Producer": "client.producer.producer", "Consumer": "client.consumer.consumer",
    "SerializingProducer": "serializing", "DeserializingConsumer": "serializing",
}
__getattr__, __dir__ = lazy_exports(__name__, _MODULE_OF, globals())
