"""Per-partition positions and versions of an assignment.

Runs in: the app process (``PositionTable``: the authority for versions, the application position for
position() and the stored offsets for store_offsets()/commit) and toppar hosts (``VersionGate``: adopt newer
versions, drop stale ops). Owns librdkafka's op-version barrier for the consumer: assign, seek, pause and
resume each give the partition a new, larger version; anything fetched at an older version is dropped, never
delivered. Versions come from one counter for the whole table, so a partition that is unassigned and
assigned again never reuses a version.

Offsets: the position is the next offset to consume (last consumed + 1) with the leader epoch of that last
message; auto-stored positions and explicitly stored offsets are kept apart from the commit bookkeeping.
"""

from __future__ import annotations

from collections.abc import Iterable

from kqactors.errors import KafkaError, KafkaException
from kqactors.message import OFFSET_INVALID, OFFSET_STORED

__all__ = ["PartitionPosition", "PositionTable", "VersionGate"]

_STATE = KafkaError._STATE
_INVALID_ARG = KafkaError._INVALID_ARG
_UNKNOWN_PARTITION = KafkaError._UNKNOWN_PARTITION

Key = tuple[str, int]


class PartitionPosition:
    """One assigned partition as the application sees it."""

    __slots__ = ("topic", "partition", "version", "start_offset", "position", "leader_epoch", "paused",
                 "stored_offset", "stored_leader_epoch", "stored_metadata", "committed_offset")

    def __init__(self, topic: str, partition: int, version: int, start_offset: int, leader_epoch: int) -> None:
        self.topic = topic
        self.partition = partition
        self.version = version
        #: Where fetching (re)starts: an absolute offset or a logical one (OFFSET_STORED/BEGINNING/END).
        self.start_offset = start_offset
        #: Next offset to consume (last consumed + 1); OFFSET_INVALID until a message was handed out, even after
        #: an absolute start offset or a seek (librdkafka's application position, as position() reports it).
        self.position = OFFSET_INVALID
        self.leader_epoch = leader_epoch
        self.paused = False
        self.stored_offset = OFFSET_INVALID
        self.stored_leader_epoch = -1
        self.stored_metadata: str | None = None
        self.committed_offset = OFFSET_INVALID

    @property
    def restart_offset(self) -> int:
        """Where a resumed or restarted fetch begins: the position if known, else the start offset."""
        return self.position if self.position >= 0 else self.start_offset

    def __repr__(self) -> str:
        return (f"PartitionPosition({self.topic}[{self.partition}] v{self.version} pos={self.position} "
                f"epoch={self.leader_epoch} stored={self.stored_offset}{' paused' if self.paused else ''})")


class PositionTable:
    """The assignment's positions and versions (app side); every mutator returns the new version(s)."""

    def __init__(self, *, auto_store: bool = True) -> None:
        self.auto_store = auto_store
        self._parts: dict[Key, PartitionPosition] = {}
        self._last_version = 0

    def _bump(self) -> int:
        self._last_version += 1
        return self._last_version

    def _get(self, topic: str, partition: int, code: int = _UNKNOWN_PARTITION) -> PartitionPosition:
        part = self._parts.get((topic, partition))
        if part is None:
            raise KafkaException(KafkaError(code, f"{topic} [{partition}] is not assigned"))
        return part

    # -- assignment -----------------------------------------------------------------------------------
    def assign(self, partitions: Iterable[tuple[str, int, int] | tuple[str, int, int, int]]
               ) -> list[PartitionPosition]:
        """Add (topic, partition, start offset[, leader epoch]) entries; a partition already assigned
        restarts with a new version. Logical start offsets (OFFSET_STORED, BEGINNING, END) are kept as is."""
        added = []
        for entry in partitions:
            topic, partition, offset = entry[0], entry[1], entry[2]
            leader_epoch = entry[3] if len(entry) > 3 else -1
            _check_topic_partition(topic, partition)
            if offset == OFFSET_INVALID:
                offset = OFFSET_STORED  # as librdkafka: an invalid start offset means "use the committed one"
            part = PartitionPosition(topic, partition, self._bump(), offset, leader_epoch)
            old = self._parts.get((topic, partition))
            if old is not None:
                part.stored_offset = old.stored_offset
                part.stored_leader_epoch = old.stored_leader_epoch
                part.stored_metadata = old.stored_metadata
                part.committed_offset = old.committed_offset
            self._parts[(topic, partition)] = part
            added.append(part)
        return added

    def unassign(self, keys: Iterable[Key] | None = None) -> list[PartitionPosition]:
        """Remove the given partitions (all when None); their late data is stale from now on."""
        if keys is None:
            removed = list(self._parts.values())
            self._parts.clear()
            return removed
        return [part for key in keys if (part := self._parts.pop(tuple(key), None)) is not None]

    def get(self, topic: str, partition: int) -> PartitionPosition | None:
        return self._parts.get((topic, partition))

    def assigned(self) -> list[PartitionPosition]:
        return list(self._parts.values())

    # -- seek / pause / resume ------------------------------------------------------------------------
    def seek(self, topic: str, partition: int, offset: int, leader_epoch: int = -1) -> int:
        """Restart the partition at ``offset`` (absolute or logical); returns the new version."""
        part = self._get(topic, partition)
        part.version = self._bump()
        part.start_offset = offset
        part.leader_epoch = leader_epoch
        part.position = OFFSET_INVALID  # fetching restarts at start_offset (restart_offset)
        return part.version

    def pause(self, topic: str, partition: int) -> int:
        """Stop delivering: what was fetched so far is dropped (and re-fetched on resume)."""
        part = self._get(topic, partition)
        part.paused = True
        part.version = self._bump()
        return part.version

    def resume(self, topic: str, partition: int) -> tuple[int, int]:
        """Deliver again; returns (new version, offset to fetch from = the application position)."""
        part = self._get(topic, partition)
        part.paused = False
        part.version = self._bump()
        return part.version, part.restart_offset

    # -- delivering -----------------------------------------------------------------------------------
    def accepts(self, topic: str, partition: int, version: int) -> bool:
        """True when data fetched at ``version`` may be delivered now (assigned, not paused, not stale)."""
        part = self._parts.get((topic, partition))
        return part is not None and not part.paused and version >= part.version

    def consumed(self, topic: str, partition: int, offset: int, leader_epoch: int | None = None) -> None:
        """The application received the message at ``offset``: the position moves past it."""
        part = self._parts.get((topic, partition))
        if part is None:
            return
        part.position = offset + 1
        part.leader_epoch = -1 if leader_epoch is None else leader_epoch
        if self.auto_store:
            part.stored_offset = part.position
            part.stored_leader_epoch = part.leader_epoch

    def position(self, topic: str, partition: int) -> tuple[int, int]:
        """(next offset to consume, its leader epoch); OFFSET_INVALID when nothing was consumed or sought."""
        part = self._parts.get((topic, partition))
        if part is None or part.position < 0:
            return OFFSET_INVALID, -1
        return part.position, part.leader_epoch

    # -- storing and committing -----------------------------------------------------------------------
    def store(self, topic: str, partition: int, offset: int, leader_epoch: int = -1,
              metadata: str | None = None, *, explicit: bool = True) -> None:
        """Store ``offset`` (as given: the next offset to consume) for the next commit.

        An explicit store (the application's store_offsets) is refused with _INVALID_ARG while
        enable.auto.offset.store is on, and with _STATE for a partition that is not assigned, as librdkafka.
        """
        if explicit and self.auto_store:
            raise KafkaException(KafkaError(_INVALID_ARG, "store_offsets() requires "
                                                          "enable.auto.offset.store=false"))
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise ValueError(f"stored offset must be an absolute offset >= 0, not {offset!r}")
        part = self._get(topic, partition, _STATE)
        part.stored_offset = offset
        part.stored_leader_epoch = leader_epoch
        part.stored_metadata = metadata

    def store_message(self, topic: str, partition: int, offset: int, leader_epoch: int | None = None) -> None:
        """store_offsets(message=...): stores the message's offset + 1."""
        self.store(topic, partition, offset + 1, -1 if leader_epoch is None else leader_epoch)

    def uncommitted(self) -> list[tuple[str, int, int, int, str | None]]:
        """(topic, partition, offset, leader epoch, metadata) stored but not yet committed."""
        return [(p.topic, p.partition, p.stored_offset, p.stored_leader_epoch, p.stored_metadata)
                for p in self._parts.values()
                if p.stored_offset >= 0 and p.stored_offset != p.committed_offset]

    def committed(self, topic: str, partition: int, offset: int) -> None:
        """A commit of ``offset`` succeeded (ignored for partitions no longer assigned)."""
        part = self._parts.get((topic, partition))
        if part is not None:
            part.committed_offset = offset


class VersionGate:
    """Toppar or broker side of the barrier: adopt newer versions, drop ops and data of older ones."""

    __slots__ = ("version",)

    def __init__(self, version: int = 0) -> None:
        self.version = version

    def advance(self, version: int) -> bool:
        """Adopt ``version`` if newer; True when it was."""
        if version > self.version:
            self.version = version
            return True
        return False

    def accepts(self, version: int) -> bool:
        return version >= self.version


def _check_topic_partition(topic: object, partition: object) -> None:
    if not isinstance(topic, str) or not topic:
        raise TypeError(f"topic must be a non-empty str, not {topic!r}")
    if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
        raise TypeError(f"partition must be an int >= 0, not {partition!r}")
