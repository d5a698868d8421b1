"""Message and TopicPartition value types, plus offset and timestamp-type constants.

Runs in: the app process (built in bulk by poll()/consume() and delivery reports) and any actor that
needs to describe a partition.  Owns the public shapes confluent-kafka users expect: ``Message`` with
accessor methods and ``TopicPartition`` with attributes, both on ``__slots__`` so that building
thousands per poll stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
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


def _normalise_headers(headers: Any) -> Headers | None:
    """Accept a list of (key, value) pairs or a dict; return a list of (str, bytes|None) tuples."""
    if headers is None:
        return None
    items: Iterable[Any] = headers.items() if isinstance(headers, Mapping) else headers
    result: Headers = []
    for item in items:
        try:
            key, value = item
        except (TypeError, ValueError):
            raise TypeError(f"headers must be (key, value) pairs, got {item!r}") from None
        if not isinstance(key, str):
            raise TypeError(f"header key must be str, not {type(key).__name__}")
        if isinstance(value, str):
            value = value.encode()
        elif value is not None and not isinstance(value, bytes):
            if isinstance(value, (bytearray, memoryview)):
                value = bytes(value)
            else:
                raise TypeError(f"header value for {key!r} must be bytes, str or None, not {type(value).__name__}")
        result.append((key, value))
    return result


class Message:
    """A consumed or produced message, or an event when ``error()`` is not None.

    Mirrors confluent-kafka's Message.  All constructor arguments are optional; the positional order is
    confluent-kafka's: topic, partition, offset, key, value, headers, error, timestamp, latency,
    leader_epoch.  ``headers`` is stored as given (the hot path builds it already normalised).
    """

    __slots__ = ("_topic", "_partition", "_offset", "_key", "_value", "_headers", "_error",
                 "_timestamp", "_latency", "_leader_epoch")

    def __init__(
        self,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
        key: bytes | None = None,
        value: bytes | None = None,
        headers: Headers | None = None,
        error: KafkaError | None = None,
        timestamp: tuple[int, int] = _NO_TIMESTAMP,
        latency: float | None = None,
        leader_epoch: int | None = None,
    ) -> None:
        self._topic = topic
        self._partition = partition
        self._offset = offset
        self._key = key
        self._value = value
        self._headers = headers
        self._error = error
        self._timestamp = timestamp
        self._latency = latency
        self._leader_epoch = leader_epoch

    def topic(self) -> str | None:
        return self._topic

    def partition(self) -> int | None:
        return self._partition

    def offset(self) -> int | None:
        return self._offset

    def key(self) -> Any:
        return self._key

    def value(self) -> Any:
        return self._value

    def headers(self) -> Headers | None:
        return self._headers

    def error(self) -> KafkaError | None:
        return self._error

    def timestamp(self) -> tuple[int, int]:
        """(timestamp type, milliseconds since epoch); type is one of the TIMESTAMP_* constants."""
        return self._timestamp

    def latency(self) -> float | None:
        """Seconds from produce() to delivery report (produced messages only)."""
        return self._latency

    def leader_epoch(self) -> int | None:
        return self._leader_epoch

    def set_topic(self, topic: str) -> None:
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
        """Replace the headers: list of (str, bytes) pairs, or a dict."""
        self._headers = _normalise_headers(headers)

    def set_error(self, error: KafkaError | None) -> None:
        _track(self)
        self._error = error

    def __len__(self) -> int:
        """Size of the value (payload) in bytes; 0 when there is none."""
        value = self._value
        if value is None:
            return 0
        if isinstance(value, str):
            return len(value.encode())
        try:
            return len(value)
        except TypeError:
            return 0

    def len(self) -> int:
        return self.__len__()

    def __repr__(self) -> str:
        if self._error is not None:
            return (f"Message{{topic={self._topic},partition={self._partition},offset={self._offset},"
                    f"error={self._error!r}}}")
        return (f"Message{{topic={self._topic},partition={self._partition},offset={self._offset},"
                f"key={self._key!r},len={len(self)}}}")


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
