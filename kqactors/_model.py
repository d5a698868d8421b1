"""Plain value types of confluent-kafka's public API (its ``_model`` module and ``Uuid``/``ThrottleEvent``):
Node, TopicCollection, TopicPartitionInfo, ConsumerGroupTopicPartitions, the IsolationLevel,
ConsumerGroupState, ConsumerGroupType and ElectionType enums, Uuid and ThrottleEvent.

Runs in: the app process. Same constructors, attributes and str() as confluent-kafka's; like theirs, Node,
Uuid and the rest compare and hash by identity.
"""

from __future__ import annotations

import base64
from enum import Enum

from kqactors.message import TopicPartition

__all__ = ["ConsumerGroupState", "ConsumerGroupTopicPartitions", "ConsumerGroupType", "ElectionType",
           "IsolationLevel", "Node", "ThrottleEvent", "TopicCollection", "TopicPartitionInfo", "Uuid"]


class Node:
    """A broker: ``id`` (and ``id_string``), ``host``, ``port`` and ``rack``."""

    def __init__(self, id: int, host: str, port: int, rack: str | None = None) -> None:  # noqa: A002
        self.id = id
        self.id_string = str(id)
        self.host = host
        self.port = port
        self.rack = rack

    def __str__(self) -> str:
        rack = f"(Rack - {self.rack})" if self.rack else ""
        return f"({self.id}) {self.host}:{self.port} {rack}"


class ConsumerGroupTopicPartitions:
    """A consumer group id with a list of TopicPartitions (for offset listing and altering)."""

    def __init__(self, group_id: str, topic_partitions: list[TopicPartition] | None = None) -> None:
        self.group_id = group_id
        self.topic_partitions = topic_partitions


class TopicCollection:
    """A collection of topics named by ``topic_names``."""

    def __init__(self, topic_names: list[str]) -> None:
        self.topic_names = topic_names


class TopicPartitionInfo:
    """One partition of a topic description: ``id``, ``leader`` and the ``replicas`` and ``isr`` Nodes."""

    def __init__(self, id: int, leader: Node, replicas: list[Node], isr: list[Node]) -> None:  # noqa: A002
        self.id = id
        self.leader = leader
        self.replicas = replicas
        self.isr = isr


class _OrderedEnum(Enum):
    def __lt__(self, other: object) -> bool:
        if not isinstance(other, type(self)):
            return NotImplemented
        return self.value < other.value


class IsolationLevel(_OrderedEnum):
    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1


class ConsumerGroupState(_OrderedEnum):
    UNKNOWN = 0
    UNKOWN = 0  # confluent-kafka's deprecated spelling, an alias of UNKNOWN
    PREPARING_REBALANCING = 1
    COMPLETING_REBALANCING = 2
    STABLE = 3
    DEAD = 4
    EMPTY = 5


class ConsumerGroupType(_OrderedEnum):
    UNKNOWN = 0
    CONSUMER = 1
    CLASSIC = 2


class ElectionType(_OrderedEnum):
    PREFERRED = 0
    UNCLEAN = 1


def _int64(value: object) -> int:
    import operator

    number = operator.index(value)  # type: ignore[arg-type]
    if not -(2**63) <= number < 2**63:
        raise OverflowError("Python int too large to convert to C long")
    return number


class Uuid:
    """A 128-bit id (topic ids) from its most and least significant 64 bits; str() is the 16 bytes in
    base64 without padding, as confluent-kafka prints it."""

    __slots__ = ("_msb", "_lsb")

    def __init__(self, most_significant_bits: int, least_significant_bits: int) -> None:
        self._msb = _int64(most_significant_bits)
        self._lsb = _int64(least_significant_bits)

    def get_most_significant_bits(self) -> int:
        return self._msb

    def get_least_significant_bits(self) -> int:
        return self._lsb

    def __str__(self) -> str:
        raw = (self._msb & (2**64 - 1)).to_bytes(8, "big") + (self._lsb & (2**64 - 1)).to_bytes(8, "big")
        return base64.b64encode(raw).decode().rstrip("=")

    __repr__ = __str__


class ThrottleEvent:
    """A broker throttled this client: ``broker_name``, ``broker_id`` and ``throttle_time`` in seconds."""

    def __init__(self, broker_name: str, broker_id: int, throttle_time: float) -> None:
        self.broker_name = broker_name
        self.broker_id = broker_id
        self.throttle_time = throttle_time

    def __str__(self) -> str:
        return f"{self.broker_name}/{self.broker_id} throttled for {int(self.throttle_time * 1000)} ms"
