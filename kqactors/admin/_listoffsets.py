"""OffsetSpec (what list_offsets() asks for) and ListOffsetsResultInfo (what it answers).

Runs in: the app process. ``OffsetSpec(value)`` returns the spec of a value: -1 latest, -2 earliest,
-3 max_timestamp, and a timestamp in ms for any value >= 0; the three fixed specs are singletons.
"""

from __future__ import annotations

from typing import Any

OFFSET_SPEC_MAX_TIMESTAMP = -3
OFFSET_SPEC_EARLIEST = -2
OFFSET_SPEC_LATEST = -1


class OffsetSpec:
    """Which offset list_offsets() looks up for a partition."""

    _fixed: dict[int, OffsetSpec] = {}

    def __new__(cls, index: int) -> Any:
        if index < 0:
            return cls._fixed[index]
        return TimestampSpec(index)

    @property
    def _value(self) -> int:
        raise NotImplementedError

    @classmethod
    def earliest(cls) -> EarliestSpec:
        return cls._fixed[OFFSET_SPEC_EARLIEST]  # type: ignore[return-value]

    @classmethod
    def latest(cls) -> LatestSpec:
        return cls._fixed[OFFSET_SPEC_LATEST]  # type: ignore[return-value]

    @classmethod
    def max_timestamp(cls) -> MaxTimestampSpec:
        return cls._fixed[OFFSET_SPEC_MAX_TIMESTAMP]  # type: ignore[return-value]

    @classmethod
    def for_timestamp(cls, timestamp: int) -> TimestampSpec:
        return TimestampSpec(timestamp)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, OffsetSpec):
            return NotImplemented
        return self._value < other._value


class TimestampSpec(OffsetSpec):
    """The earliest offset whose timestamp is >= ``timestamp`` (ms)."""

    def __new__(cls, _timestamp: int) -> Any:
        return object.__new__(cls)

    def __init__(self, timestamp: int) -> None:
        self.timestamp = timestamp

    @property
    def _value(self) -> int:
        return self.timestamp


class MaxTimestampSpec(OffsetSpec):
    """The offset of the message with the largest timestamp (not always the latest one)."""

    def __new__(cls) -> Any:
        return object.__new__(cls)

    @property
    def _value(self) -> int:
        return OFFSET_SPEC_MAX_TIMESTAMP


class LatestSpec(OffsetSpec):
    """The partition's end offset (high watermark, or last stable offset with READ_COMMITTED)."""

    def __new__(cls) -> Any:
        return object.__new__(cls)

    @property
    def _value(self) -> int:
        return OFFSET_SPEC_LATEST


class EarliestSpec(OffsetSpec):
    """The partition's first offset."""

    def __new__(cls) -> Any:
        return object.__new__(cls)

    @property
    def _value(self) -> int:
        return OFFSET_SPEC_EARLIEST


OffsetSpec._fixed.update({OFFSET_SPEC_MAX_TIMESTAMP: MaxTimestampSpec(), OFFSET_SPEC_EARLIEST: EarliestSpec(),
                          OFFSET_SPEC_LATEST: LatestSpec()})


class ListOffsetsResultInfo:
    """A partition's answer: ``offset``, ``timestamp`` (ms, -1 when not asked by time) and ``leader_epoch``
    (None when unknown)."""

    def __init__(self, offset: int, timestamp: int, leader_epoch: int) -> None:
        self.offset = offset
        self.timestamp = timestamp
        self.leader_epoch: int | None = leader_epoch if leader_epoch >= 0 else None
