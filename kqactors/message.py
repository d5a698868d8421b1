"""Message and TopicPartition value types, plus offset and timestamp-type constants.

Runs in: the app process (built in bulk by poll()/consume() and delivery reports) and any actor that
needs to describe a partition.  Owns the public shapes confluent-kafka users expect: ``Message`` with
accessor methods and ``TopicPartition`` with attributes, both on ``__slots__`` so that building
thousands per poll stays cheap.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from kqactors.errors import KafkaError

__all__ = [
    "Message",
    "TopicPartition",
    "TIMESTAMP_NOT_AVAILABLE",
    "TIMESTAMP_CREATE_TIME",
    "TIMESTAMP_LOG_APPEND_TIME",
    "OFFSET_BEGINNING",
    "OFFSET_END",
    "OFFSET_STORED",
    "OFFSET_INVALID",
]

TIMESTAMP_NOT_AVAILABLE = 0
TIMESTAMP_CREATE_TIME = 1
TIMESTAMP_LOG_APPEND_TIME = 2

OFFSET_BEGINNING = -2
OFFSET_END = -1
OFFSET_STORED = -1000
OFFSET_INVALID = -1001

_NO_TIMESTAMP = (TIMESTAMP_NOT_AVAILABLE, 0)

Headers = list[tuple[str, bytes | None]]


def _already_tracked(message: object) -> None:
    """Messages built in Python are always under the cycle collector: nothing to do."""


# kqactors.native installs the C extension's track() here. The extension builds delivery-report and
# consumed Messages untracked by the cycle collector (they hold only atoms and a header list); a setter
# that stores an arbitrary object tracks the message again first, so a cycle through it stays collectable.
_track: Callable[[object], None] = _already_tracked


def use_tracker(track: Callable[[object], None]) -> None:
    """Called by kqactors.native: how to put an untracked Message back under the cycle collector."""
    global _track
    _track = track


def _opt_int(name: str, value: Any) -> int | None:
    if value is None:
        return None
    return operator.index(value)  # TypeError "'str' object cannot be interpreted as an integer", as confluent's


class Message:
    """A consumed or produced message, or an event when ``error()`` is not None.

    Mirrors confluent-kafka's Message.  All constructor arguments are optional; the positional order is
    confluent-kafka's: topic, partition, offset, key, value, headers, error, timestamp, latency,
    leader_epoch, delivery_count.  Like confluent-kafka's, a negative partition, offset, latency or leader
    epoch (and a delivery count below 1) reads back as None; equality compares every field but latency,
    messages are not hashable, and they pickle.  One leniency: None is accepted for the numeric arguments
    (meaning not set), where confluent-kafka raises TypeError.  ``headers`` is stored as given.
    """

    __slots__ = ("_topic", "_partition", "_offset", "_key", "_value", "_headers", "_error",
                 "_timestamp", "_latency", "_leader_epoch", "_delivery_count")

    def __init__(
        self,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
        key: Any = None,
        value: Any = None,
        headers: Any = None,
        error: KafkaError | None = None,
        timestamp: tuple[int, int] | None = _NO_TIMESTAMP,
        latency: float | None = None,
        leader_epoch: int | None = None,
        delivery_count: int | None = None,
    ) -> None:
        if timestamp is None:
            timestamp = _NO_TIMESTAMP
        elif timestamp is not _NO_TIMESTAMP and not (
                type(timestamp) is tuple and len(timestamp) == 2
                and isinstance(timestamp[0], int) and isinstance(timestamp[1], int)):
            raise TypeError("timestamp must be a tuple of (int, int)")
        if latency is not None and not isinstance(latency, float):
            if not isinstance(latency, int):
                raise TypeError(f"must be real number, not {type(latency).__name__}")
            latency = float(latency)
        self._topic = topic
        self._partition = _opt_int("partition", partition)
        self._offset = _opt_int("offset", offset)
        self._key = key
        self._value = value
        self._headers = headers
        self._error = error
        self._timestamp = timestamp
        self._latency = latency
        self._leader_epoch = _opt_int("leader_epoch", leader_epoch)
        self._delivery_count = _opt_int("delivery_count", delivery_count)

    def topic(self) -> str | None:
        return self._topic

    def partition(self) -> int | None:
        partition = self._partition
        return None if partition is None or partition < 0 else partition

    def offset(self) -> int | None:
        """The offset; None when there is none (a logical offset, e.g. a failed delivery's OFFSET_INVALID)."""
        offset = self._offset
        return None if offset is None or offset < 0 else offset

    def key(self) -> Any:
        return self._key

    def value(self) -> Any:
        return self._value

    def headers(self) -> Any:
        return self._headers

    def error(self) -> KafkaError | None:
        return self._error

    def timestamp(self) -> tuple[int, int]:
        """(timestamp type, milliseconds since epoch); type is one of the TIMESTAMP_* constants."""
        return self._timestamp

    def latency(self) -> float | None:
        """Seconds from produce() to delivery report (produced messages only)."""
        latency = self._latency
        return None if latency is None or latency < 0 else latency

    def leader_epoch(self) -> int | None:
        epoch = self._leader_epoch
        return None if epoch is None or epoch < 0 else epoch

    def delivery_count(self) -> int | None:
        """Share-consumer delivery count (>= 1); None for the standard consumer and the producer."""
        count = self._delivery_count
        return None if count is None or count < 1 else count

    def deserialized_key(self) -> Any:
        """The key, after a deserializer replaced it (the same object as ``key()``)."""
        return self._key

    def deserialized_value(self) -> Any:
        """The value, after a deserializer replaced it (the same object as ``value()``)."""
        return self._value

    def set_topic(self, topic: Any) -> None:
        _track(self)
        self._topic = topic

    def set_key(self, key: Any) -> None:
        """Replace the key (deserialisers use this to hand back Python objects)."""
        _track(self)
        self._key = key

    def set_value(self, value: Any) -> None:
        """Replace the value (deserialisers use this to hand back Python objects)."""
        _track(self)
        self._value = value

    def set_headers(self, headers: Any) -> None:
        """Replace the headers (stored as given, like confluent-kafka)."""
        _track(self)
        self._headers = headers

    def set_error(self, error: Any) -> None:
        _track(self)
        self._error = error

    def __len__(self) -> int:
        """Size of the value (``len(value)``); 0 when there is none."""
        value = self._value
        return 0 if value is None else len(value)

    def len(self) -> int:
        return self.__len__()

    def _fields(self) -> tuple[Any, ...]:
        return (self._topic, self.partition(), self.offset(), self._key, self._value, self._headers,
                self._error, self._timestamp, self.leader_epoch())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return False
        return self._fields() == other._fields()

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = None  # type: ignore[assignment]  # mutable, like confluent-kafka's

    def __reduce__(self) -> tuple[Any, ...]:
        return (Message, (self._topic, self.partition(), self.offset(), self._key, self._value, self._headers,
                          self._error, self._timestamp, self.latency(), self.leader_epoch(),
                          self.delivery_count()))

    def __repr__(self) -> str:
        if self._error is not None:
            return (f"Message{{topic={self._topic},partition={self._partition},offset={self._offset},"
                    f"error={self._error!r}}}")
        try:
            size = len(self)
        except TypeError:
            size = None
        return (f"Message{{topic={self._topic},partition={self._partition},offset={self._offset},"
                f"key={self._key!r},len={size}}}")


def _check_int(name: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"TopicPartition {name} must be an int, not {type(value).__name__}")
    return value


class TopicPartition:
    """A topic partition with an optional offset, commit metadata, leader epoch and error.

    Equal and hashed by (topic, partition) only, ordered by (topic, partition), like confluent-kafka's.
    A negative ``leader_epoch`` means unknown and reads back as None.
    """

    __slots__ = ("topic", "partition", "offset", "metadata", "leader_epoch", "error")

    def __init__(
        self,
        topic: str,
        partition: int = -1,
        offset: int = OFFSET_INVALID,
        metadata: str | None = None,
        leader_epoch: int | None = None,
    ) -> None:
        if not isinstance(topic, str):
            raise TypeError(f"TopicPartition topic must be a str, not {type(topic).__name__}")
        self.topic = topic
        self.partition = _check_int("partition", partition)
        self.offset = _check_int("offset", offset)
        if metadata is not None and not isinstance(metadata, str):
            raise TypeError(f"TopicPartition metadata must be a str or None, not {type(metadata).__name__}")
        self.metadata = metadata
        if leader_epoch is not None:
            leader_epoch = _check_int("leader_epoch", leader_epoch)
            if leader_epoch < 0:
                leader_epoch = None
        self.leader_epoch = leader_epoch
        self.error: KafkaError | None = None

    def _key(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TopicPartition):
            return NotImplemented
        return self.topic == other.topic and self.partition == other.partition

    def __ne__(self, other: object) -> bool:
        if not isinstance(other, TopicPartition):
            return NotImplemented
        return self.topic != other.topic or self.partition != other.partition

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, TopicPartition):
            return NotImplemented
        return self._key() < other._key()

    def __le__(self, other: object) -> bool:
        if not isinstance(other, TopicPartition):
            return NotImplemented
        return self._key() <= other._key()

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, TopicPartition):
            return NotImplemented
        return self._key() > other._key()

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, TopicPartition):
            return NotImplemented
        return self._key() >= other._key()

    def __hash__(self) -> int:
        return hash((self.topic, self.partition))

    def __repr__(self) -> str:
        error = repr(self.error) if self.error is not None else "None"
        return (f"TopicPartition{{topic={self.topic},partition={self.partition},offset={self.offset},"
                f"leader_epoch={self.leader_epoch},error={error}}}")

    __str__ = __repr__

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_topic_partition, self.to_tuple())

    def to_tuple(self) -> tuple[Any, ...]:
        """Compact msgpack-friendly form: (topic, partition, offset, metadata, leader_epoch, error)."""
        error = self.error.to_tuple() if self.error is not None else None
        return (self.topic, self.partition, self.offset, self.metadata, self.leader_epoch, error)

    @classmethod
    def from_tuple(cls, data: tuple | list) -> TopicPartition:
        """Inverse of ``to_tuple`` (lists from msgpack are accepted)."""
        return _rebuild_topic_partition(*data)


def _rebuild_topic_partition(topic: str, partition: int, offset: int, metadata: str | None,
                             leader_epoch: int | None, error: Any) -> TopicPartition:
    tp = TopicPartition(topic, partition, offset, metadata, leader_epoch)
    if error is not None:
        tp.error = error if isinstance(error, KafkaError) else KafkaError.from_tuple(error)
    return tp
