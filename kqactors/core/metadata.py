"""Runs in: the main host, inside the main actor. Owns the metadata cache, the partition → leader routing
table and the refresh schedule, as plain classes (no ops, no sockets, no clock of their own).

`MetadataCache.apply` merges one Metadata response and reports what changed — brokers added, removed or
moved to a new address, partition leaders that moved (each one becomes PARTITION_LEAVE on the old broker and
PARTITION_JOIN on the new), partition counts — so the main actor only turns those changes into ops.
`RefreshScheduler` decides when the next Metadata request goes out: periodically, and fast (with exponential
backoff) while some topic has no usable leader.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kqactors.errors import KafkaError

# Partition-level metadata errors that mean "the leader is not known right now, refresh soon".
LEADER_ERRORS = frozenset({KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION,
                           KafkaError.FENCED_LEADER_EPOCH, KafkaError.UNKNOWN_LEADER_EPOCH,
                           KafkaError.REPLICA_NOT_AVAILABLE})


@dataclass(frozen=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass
class PartitionInfo:
    partition: int
    leader: int = -1
    leader_epoch: int = -1
    replicas: list[int] = field(default_factory=list)
    isr: list[int] = field(default_factory=list)
    error_code: int = KafkaError.NO_ERROR


@dataclass
class TopicInfo:
    name: str
    error_code: int = KafkaError.NO_ERROR
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)
    topic_id: bytes | None = None


@dataclass
class MetadataSnapshot:
    """One Metadata response in plain form (built from the protocol's response by an adapter)."""

    brokers: list[BrokerInfo]
    topics: list[TopicInfo]
    controller_id: int = -1
    cluster_id: str | None = None


def snapshot_to_wire(snapshot: MetadataSnapshot) -> dict[str, Any]:
    """Plain lists so a snapshot crosses processes in msgpack (the shape the Metadata request kind returns)."""
    return {
        "brokers": [[b.node_id, b.host, b.port, b.rack] for b in snapshot.brokers],
        "controller_id": snapshot.controller_id,
        "cluster_id": snapshot.cluster_id,
        "topics": [[t.name, t.error_code, t.topic_id,
                    [[p.partition, p.leader, p.leader_epoch, p.replicas, p.isr, p.error_code]
                     for p in t.partitions.values()]] for t in snapshot.topics],
    }


def snapshot_from_wire(data: dict[str, Any]) -> MetadataSnapshot:
    """A snapshot from the Metadata request kind's result (or ``snapshot_to_wire``)."""
    brokers = [BrokerInfo(node_id, host, port, rack) for node_id, host, port, rack in data["brokers"]]
    topics = [TopicInfo(name, error, {p[0]: PartitionInfo(p[0], p[1], p[2], list(p[3]), list(p[4]), p[5])
                                      for p in parts}, topic_id)
              for name, error, topic_id, parts in data["topics"]]
    return MetadataSnapshot(brokers, topics, data.get("controller_id", -1), data.get("cluster_id"))


@dataclass(frozen=True)
class LeaderChange:
    """A partition's leader moved: old_leader leaves, new_leader joins (-1 = none)."""

    topic: str
    partition: int
    old_leader: int
    new_leader: int
    leader_epoch: int


@dataclass
class MetadataDelta:
    brokers_added: list[BrokerInfo] = field(default_factory=list)
    brokers_removed: list[BrokerInfo] = field(default_factory=list)
    brokers_moved: list[BrokerInfo] = field(default_factory=list)
    leader_changes: list[LeaderChange] = field(default_factory=list)
    partition_counts: dict[str, tuple[int, int]] = field(default_factory=dict)
    topic_errors: dict[str, int] = field(default_factory=dict)
    topics_removed: list[str] = field(default_factory=list)
    unresolved_topics: set[str] = field(default_factory=set)

    @property
    def empty(self) -> bool:
        return not (self.brokers_added or self.brokers_removed or self.brokers_moved or self.leader_changes
                    or self.partition_counts or self.topic_errors or self.topics_removed)


class MetadataCache:
    """Brokers and topics as last seen, with leader-epoch checks so a stale response never moves a leader
    back (KIP-320)."""

    def __init__(self) -> None:
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.controller_id = -1
        self.cluster_id: str | None = None
        self.updated_at: float | None = None

    # ---- routing -----------------------------------------------------------------------------------------

    def leader(self, topic: str, partition: int) -> int:
        info = self.topics.get(topic)
        part = info.partitions.get(partition) if info else None
        return part.leader if part else -1

    def leader_epoch(self, topic: str, partition: int) -> int:
        info = self.topics.get(topic)
        part = info.partitions.get(partition) if info else None
        return part.leader_epoch if part else -1

    def partition_count(self, topic: str) -> int:
        info = self.topics.get(topic)
        return len(info.partitions) if info else 0

    def topic_error(self, topic: str) -> int:
        info = self.topics.get(topic)
        return info.error_code if info else KafkaError.UNKNOWN_TOPIC_OR_PART

    def partitions_led_by(self, node_id: int) -> list[tuple[str, int]]:
        return [(name, p.partition) for name, info in self.topics.items() for p in info.partitions.values()
                if p.leader == node_id]

    # ---- merging -----------------------------------------------------------------------------------------

    def apply(self, snapshot: MetadataSnapshot, requested: Iterable[str] | None, now: float) -> MetadataDelta:
        """Merge a response to a request for `requested` topics (None: all topics, so absent ones are gone)."""
        delta = MetadataDelta()
        self._merge_brokers(snapshot.brokers, delta)
        self.controller_id = snapshot.controller_id
        if snapshot.cluster_id is not None:
            self.cluster_id = snapshot.cluster_id
        seen: set[str] = set()
        for topic in snapshot.topics:
            seen.add(topic.name)
            self._merge_topic(topic, delta)
        if requested is None:
            for name in [n for n in self.topics if n not in seen]:
                self._drop_topic(name, delta)
        else:
            for name in requested:
                if name not in seen:
                    delta.unresolved_topics.add(name)
        self.updated_at = now
        return delta

    def _merge_brokers(self, brokers: list[BrokerInfo], delta: MetadataDelta) -> None:
        fresh = {b.node_id: b for b in brokers}
        for node_id, info in fresh.items():
            old = self.brokers.get(node_id)
            if old is None:
                delta.brokers_added.append(info)
            elif (old.host, old.port) != (info.host, info.port):
                delta.brokers_moved.append(info)
        for node_id, old in self.brokers.items():
            if node_id not in fresh:
                delta.brokers_removed.append(old)
        self.brokers = fresh

    def _merge_topic(self, topic: TopicInfo, delta: MetadataDelta) -> None:
        name = topic.name
        cached = self.topics.get(name)
        if topic.error_code == KafkaError.UNKNOWN_TOPIC_OR_PART or (topic.error_code and not topic.partitions):
            delta.topic_errors[name] = topic.error_code
            if topic.error_code == KafkaError.LEADER_NOT_AVAILABLE:
                delta.unresolved_topics.add(name)
            if cached is not None and topic.error_code == KafkaError.UNKNOWN_TOPIC_OR_PART:
                self._drop_topic(name, delta)
            elif cached is None:
                self.topics[name] = TopicInfo(name, topic.error_code, {}, topic.topic_id)
            else:
                cached.error_code = topic.error_code
            return
        if cached is None:
            cached = TopicInfo(name, KafkaError.NO_ERROR, {}, topic.topic_id)
            self.topics[name] = cached
        if cached.error_code != topic.error_code:
            delta.topic_errors[name] = topic.error_code
        cached.error_code = topic.error_code
        cached.topic_id = topic.topic_id or cached.topic_id
        old_count = len(cached.partitions)
        for part in topic.partitions.values():
            self._merge_partition(name, cached, part, delta)
        for gone in [p for p in cached.partitions if p not in topic.partitions]:
            old = cached.partitions.pop(gone)
            if old.leader != -1:
                delta.leader_changes.append(LeaderChange(name, gone, old.leader, -1, old.leader_epoch))
        if len(cached.partitions) != old_count:
            delta.partition_counts[name] = (old_count, len(cached.partitions))

    def _merge_partition(self, topic: str, cached: TopicInfo, part: PartitionInfo, delta: MetadataDelta) -> None:
        old = cached.partitions.get(part.partition)
        new_leader = part.leader if part.error_code not in LEADER_ERRORS else -1
        if new_leader == -1 or part.error_code in LEADER_ERRORS:
            delta.unresolved_topics.add(topic)
        if old is None:
            cached.partitions[part.partition] = PartitionInfo(part.partition, new_leader, part.leader_epoch,
                                                              list(part.replicas), list(part.isr),
                                                              part.error_code)
            delta.leader_changes.append(LeaderChange(topic, part.partition, -1, new_leader, part.leader_epoch))
            return
        if part.leader_epoch >= 0 and old.leader_epoch >= 0 and part.leader_epoch < old.leader_epoch:
            return  # stale response from a broker that has not caught up
        old_leader = old.leader
        old.leader, old.leader_epoch = new_leader, part.leader_epoch
        old.replicas, old.isr, old.error_code = list(part.replicas), list(part.isr), part.error_code
        if old_leader != new_leader:
            delta.leader_changes.append(LeaderChange(topic, part.partition, old_leader, new_leader,
                                                     part.leader_epoch))

    def _drop_topic(self, name: str, delta: MetadataDelta) -> None:
        info = self.topics.pop(name)
        delta.topics_removed.append(name)
        for part in info.partitions.values():
            if part.leader != -1:
                delta.leader_changes.append(LeaderChange(name, part.partition, part.leader, -1,
                                                         part.leader_epoch))
        if info.partitions:
            delta.partition_counts[name] = (len(info.partitions), 0)

    def mark_leader_unknown(self, topic: str, partition: int) -> LeaderChange | None:
        """A broker said NOT_LEADER for this partition: stop routing to it until metadata says otherwise."""
        info = self.topics.get(topic)
        part = info.partitions.get(partition) if info else None
        if part is None or part.leader == -1:
            return None
        change = LeaderChange(topic, partition, part.leader, -1, part.leader_epoch)
        part.leader = -1
        return change


class RefreshScheduler:
    """When to send the next Metadata request, and for which topics.

    Periodic: every `interval_ms` (topic.metadata.refresh.interval.ms; -1 disables) for all known topics.
    Fast: topics flagged as unresolved are requested at once, then after `fast_ms`
    (topic.metadata.refresh.fast.interval.ms) doubling up to `fast_max_ms` (retry.backoff.max.ms), until a
    response resolves them. One request is outstanding at a time; a lost one is given up after
    `request_timeout_ms`.
    """

    def __init__(self, interval_ms: int = 300000, fast_ms: int = 100, fast_max_ms: int = 1000,
                 request_timeout_ms: int = 60000) -> None:
        self.interval_ms = interval_ms
        self.fast_ms = fast_ms
        self.fast_max_ms = max(fast_max_ms, fast_ms)
        self.request_timeout_ms = request_timeout_ms
        self.urgent: set[str] = set()
        self.full_requested = False
        self._fast_backoff_ms = float(fast_ms)
        self._fast_at: float | None = None
        self._periodic_at: float | None = None
        self._outstanding_since: float | None = None
        self._outstanding_topics: set[str] | None = None

    def start(self, now: float) -> None:
        """First (bootstrap) refresh right away, then the periodic timer."""
        self.full_requested = True
        self._fast_at = now
        self._arm_periodic(now)

    def request(self, topics: Iterable[str] | None, now: float) -> None:
        """Something needs fresh metadata for `topics` (None: everything) as soon as possible."""
        if topics is None:
            self.full_requested = True
        else:
            self.urgent.update(topics)
        if self._fast_at is None or self._fast_at > now:
            self._fast_at = now

    def due(self, now: float, known_topics: Iterable[str]) -> list[str] | None | bool:
        """Topics to request now (None means all topics), or False when nothing is due."""
        if self._outstanding_since is not None:
            if (now - self._outstanding_since) * 1000 < self.request_timeout_ms:
                return False
            self._outstanding_since = None  # lost: try again
        if self._periodic_at is not None and now >= self._periodic_at:
            self._arm_periodic(now)
            self.urgent.update(known_topics)
            if self._fast_at is None:
                self._fast_at = now
        if self._fast_at is None or now < self._fast_at:
            return False
        if not self.full_requested and not self.urgent:
            self._fast_at = None
            return False
        topics: list[str] | None = None if self.full_requested else sorted(self.urgent)
        self._outstanding_since = now
        self._outstanding_topics = None if topics is None else set(topics)
        self.full_requested = False
        self.urgent.clear()
        self._fast_at = None
        return topics

    def on_response(self, unresolved: Iterable[str], now: float, failed: bool = False) -> None:
        """The outstanding request finished. Unresolved topics (or all requested on failure) go fast again."""
        requested = self._outstanding_topics
        self._outstanding_since = None
        self._outstanding_topics = None
        again = set(unresolved)
        if failed:
            if requested is None:
                self.full_requested = True
            else:
                again |= requested
        if again or (failed and self.full_requested):
            self.urgent |= again
            self._fast_at = now + self._fast_backoff_ms / 1000
            self._fast_backoff_ms = min(self._fast_backoff_ms * 2, self.fast_max_ms)
        else:
            self._fast_backoff_ms = float(self.fast_ms)
            if self.urgent or self.full_requested:
                self._fast_at = now

    def next_wakeup(self) -> float | None:
        times = [t for t in (self._fast_at, self._periodic_at) if t is not None]
        if self._outstanding_since is not None:
            times = [t for t in times if t == self._periodic_at]
            times.append(self._outstanding_since + self.request_timeout_ms / 1000)
        return min(times) if times else None

    def _arm_periodic(self, now: float) -> None:
        self._periodic_at = None if self.interval_ms < 0 else now + self.interval_ms / 1000
