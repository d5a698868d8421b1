"""Topic specifications (NewTopic for create_topics, NewPartitions for create_partitions) and TopicDescription
(describe_topics).

Runs in: the app process. NewTopic and NewPartitions behave as confluent-kafka's C types: a str topic (read-only
afterwards), C int fields (an int, or anything with __index__; a float is a TypeError, out of int32 range an
OverflowError), a dict config, equality and order by (topic, count) — comparing with another type raises
NotImplementedError, as theirs does — and a hash that agrees.
"""

from __future__ import annotations

import operator
from typing import Any

from kqactors._model import TopicPartitionInfo, Uuid
from kqactors.admin._acl import AclOperation
from kqactors.admin._util import to_enum

_INT32_MAX = 2**31 - 1


def c_int(value: Any) -> int:
    """``value`` as a C int, the way CPython's argument parser ("i") takes it."""
    if isinstance(value, float):
        raise TypeError("'float' object cannot be interpreted as an integer")
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"'{type(value).__name__}' object cannot be interpreted as an integer") from None
    if number > _INT32_MAX:
        raise OverflowError("signed integer is greater than maximum")
    if number < -_INT32_MAX - 1:
        raise OverflowError("signed integer is less than minimum")
    return number


def _c_str(value: Any, position: int) -> str:
    if not isinstance(value, str):
        raise TypeError(f"argument {position} must be str, not {type(value).__name__}")
    if "\0" in value:
        raise ValueError("embedded null character")
    return value


class _Spec:
    """Shared by NewTopic and NewPartitions: a read-only topic and one count that orders and hashes."""

    __slots__ = ("_topic",)
    _COUNT = ""

    @property
    def topic(self) -> str:
        return self._topic

    @topic.setter
    def topic(self, _value: Any) -> None:
        raise AttributeError("readonly attribute")

    def _key(self) -> tuple[str, int]:
        return (self._topic, getattr(self, self._COUNT))

    def _compare(self, other: object, test: Any) -> bool:
        if type(other) is not type(self):
            raise NotImplementedError
        return bool(test(self._key(), other._key()))  # type: ignore[attr-defined]

    def __eq__(self, other: object) -> bool:
        return self._compare(other, operator.eq)

    def __ne__(self, other: object) -> bool:
        return self._compare(other, operator.ne)

    def __lt__(self, other: object) -> bool:
        return self._compare(other, operator.lt)

    def __le__(self, other: object) -> bool:
        return self._compare(other, operator.le)

    def __gt__(self, other: object) -> bool:
        return self._compare(other, operator.gt)

    def __ge__(self, other: object) -> bool:
        return self._compare(other, operator.ge)


class NewTopic(_Spec):
    """A topic to create: ``num_partitions`` and ``replication_factor`` (-1: the broker's defaults), or a
    ``replica_assignment`` (a list of broker id lists, one per partition; then replication_factor stays -1)
    and ``config`` (dict of topic properties)."""

    __slots__ = ("_num_partitions", "_replication_factor", "replica_assignment", "_config")
    _COUNT = "num_partitions"

    def __init__(self, topic: str, num_partitions: int = -1, replication_factor: int = -1,
                 replica_assignment: list[list[int]] | None = None, config: dict[str, str] | None = None) -> None:
        self._topic = _c_str(topic, 1)
        self._num_partitions = c_int(num_partitions)
        self._replication_factor = c_int(replication_factor)
        if config is not None and not isinstance(config, dict):
            raise TypeError("config must be a dict of strings")
        self.replica_assignment = replica_assignment
        self._config = config

    @property
    def num_partitions(self) -> int:
        return self._num_partitions

    @num_partitions.setter
    def num_partitions(self, value: int) -> None:
        self._num_partitions = c_int(value)

    @property
    def replication_factor(self) -> int:
        return self._replication_factor

    @replication_factor.setter
    def replication_factor(self, value: int) -> None:
        self._replication_factor = c_int(value)

    @property
    def config(self) -> dict[str, str] | None:
        return self._config

    @config.setter
    def config(self, value: dict[str, str] | None) -> None:
        self._config = value

    def __repr__(self) -> str:
        if self._num_partitions == -1:
            return f"NewTopic(topic={self._topic})"
        return f"NewTopic(topic={self._topic},num_partitions={self._num_partitions})"

    def __hash__(self) -> int:
        if self._num_partitions == -1:
            return hash(self._topic)
        return hash(self._topic) ^ self._num_partitions


class NewPartitions(_Spec):
    """Grow ``topic`` to ``new_total_count`` partitions, optionally placing the new ones
    (``replica_assignment``: a broker id list per new partition)."""

    __slots__ = ("_new_total_count", "replica_assignment")
    _COUNT = "new_total_count"

    def __init__(self, topic: str, new_total_count: int, replica_assignment: list[list[int]] | None = None) -> None:
        self._topic = _c_str(topic, 1)
        self._new_total_count = c_int(new_total_count)
        self.replica_assignment = replica_assignment

    @property
    def new_total_count(self) -> int:
        return self._new_total_count

    @new_total_count.setter
    def new_total_count(self, value: int) -> None:
        self._new_total_count = c_int(value)

    def __repr__(self) -> str:
        return f"NewPartitions(topic={self._topic},new_total_count={self._new_total_count})"

    def __hash__(self) -> int:
        return hash(self._topic) ^ self._new_total_count


class TopicDescription:
    """describe_topics()'s answer for a topic: ``name``, ``topic_id`` (Uuid), ``is_internal``, ``partitions``
    (TopicPartitionInfo) and, when asked for, the operations this client may perform on it."""

    def __init__(self, name: str, topic_id: Uuid, is_internal: bool, partitions: list[TopicPartitionInfo],
                 authorized_operations: list[AclOperation | str | int] | None = None) -> None:
        self.name = name
        self.topic_id = topic_id
        self.is_internal = is_internal
        self.partitions = partitions
        self.authorized_operations: list[Any] | None = (
            [to_enum(op, AclOperation) for op in authorized_operations] if authorized_operations else None)
