"""Runs in: the main host (owned by the KIP-848 member state machine). Owns the topic id <-> name map learned
from Metadata (v10+), and the translation of a coordinator's target assignment (topic ids + partitions) into the
(topic, partition) keys the rest of the group code uses, and back for the owned partitions a heartbeat reports.

KIP-848 heartbeats name topics only by id, while callbacks, fetchers and commits use names, so an id must be
resolved through metadata before its partitions can be assigned; unresolved ones wait for the next metadata.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kqactors.core.group.assignors import TopicPartitionKey

__all__ = ["TopicIdMap", "TargetAssignment", "ZERO_TOPIC_ID", "target_from_response"]

ZERO_TOPIC_ID = bytes(16)

TargetAssignment = dict[bytes, frozenset[int]]
"""topic id -> partitions, as a ConsumerGroupHeartbeat response assigns them."""


class TopicIdMap:
    """Topic ids seen in metadata (an id never changes name; a recreated topic gets a new id)."""

    def __init__(self) -> None:
        self._names: dict[bytes, str] = {}
        self._ids: dict[str, bytes] = {}

    def update(self, ids_by_name: Mapping[str, bytes | None]) -> None:
        for name, topic_id in ids_by_name.items():
            if topic_id is None:
                continue
            topic_id = bytes(topic_id)
            if topic_id == ZERO_TOPIC_ID:
                continue  # metadata older than v10 carries no ids
            self._names[topic_id] = name
            self._ids[name] = topic_id

    def name_of(self, topic_id: bytes) -> str | None:
        return self._names.get(bytes(topic_id))

    def resolve(self, target: TargetAssignment) -> tuple[set[TopicPartitionKey], set[bytes]]:
        """(keys of the resolvable part of ``target``, ids still unknown)."""
        keys: set[TopicPartitionKey] = set()
        unknown: set[bytes] = set()
        for topic_id, partitions in target.items():
            name = self._names.get(topic_id)
            if name is None:
                unknown.add(topic_id)
            else:
                keys.update((name, p) for p in partitions)
        return keys, unknown

    def by_id(self, keys: Iterable[TopicPartitionKey]) -> list[tuple[bytes, list[int]]]:
        """Owned partitions as [(topic id, sorted partitions)] sorted by id (topics without a known id are left
        out: the coordinator could not have assigned them)."""
        grouped: dict[bytes, list[int]] = {}
        for topic, partition in keys:
            topic_id = self._ids.get(topic)
            if topic_id is not None:
                grouped.setdefault(topic_id, []).append(partition)
        return [(topic_id, sorted(parts)) for topic_id, parts in sorted(grouped.items())]


def target_from_response(topic_partitions: Iterable[object]) -> TargetAssignment:
    """The response's Assignment.TopicPartitions as {topic id: partitions}."""
    target: TargetAssignment = {}
    for entry in topic_partitions:
        topic_id = bytes(entry.topic_id)  # type: ignore[attr-defined]
        target[topic_id] = target.get(topic_id, frozenset()) | frozenset(entry.partitions)  # type: ignore[attr-defined]
    return target
