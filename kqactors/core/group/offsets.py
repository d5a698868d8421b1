"""Runs in: the main host (owned by the cgrp state machine). Owns offset bookkeeping for the assigned
partitions: the offsets the app (or auto offset store) stored, the offsets known committed, and which
stored offsets still need committing. Stored offsets are forgotten when a partition is revoked or lost, so a
later owner's progress is never overwritten with ours.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kqactors.core.group.assignors import TopicPartitionKey

__all__ = ["OffsetBook", "StoredOffset", "CommitEntry"]

CommitEntry = tuple[str, int, int, "int | None", "str | None"]
"""(topic, partition, offset, leader epoch, metadata) — one partition of an OffsetCommit."""


@dataclass(frozen=True)
class StoredOffset:
    offset: int
    leader_epoch: int | None = None
    metadata: str | None = None


class OffsetBook:
    """Stored and committed offsets per partition (offsets are the next offset to consume)."""

    def __init__(self) -> None:
        self._stored: dict[TopicPartitionKey, StoredOffset] = {}
        self._committed: dict[TopicPartitionKey, int] = {}

    def store(self, key: TopicPartitionKey, offset: int, leader_epoch: int | None = None,
              metadata: str | None = None) -> None:
        if offset < 0:
            raise ValueError(f"cannot store logical offset {offset} for {key[0]}[{key[1]}]")
        self._stored[key] = StoredOffset(offset, leader_epoch, metadata)

    def stored(self, key: TopicPartitionKey) -> StoredOffset | None:
        return self._stored.get(key)

    def committed(self, key: TopicPartitionKey) -> int | None:
        return self._committed.get(key)

    def set_committed(self, key: TopicPartitionKey, offset: int) -> None:
        """Record what the coordinator holds (from OffsetFetch or a successful commit)."""
        self._committed[key] = offset

    def uncommitted(self, partitions: Iterable[TopicPartitionKey]) -> list[CommitEntry]:
        """Stored offsets of ``partitions`` that differ from the committed ones, sorted."""
        entries = []
        for key in sorted(set(partitions)):
            stored = self._stored.get(key)
            if stored is not None and self._committed.get(key) != stored.offset:
                entries.append((key[0], key[1], stored.offset, stored.leader_epoch, stored.metadata))
        return entries

    def mark_committed(self, entries: Iterable[CommitEntry]) -> None:
        for topic, partition, offset, _epoch, _metadata in entries:
            self._committed[(topic, partition)] = offset

    def forget(self, partitions: Iterable[TopicPartitionKey]) -> None:
        """Drop stored and committed offsets (on revoke or loss)."""
        for key in partitions:
            self._stored.pop(key, None)
            self._committed.pop(key, None)
