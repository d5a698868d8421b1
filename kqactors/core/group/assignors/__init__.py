"""Runs in: the main host, inside the consumer-group leader's state machine. Owns the assignor interface,
the member ordering rule shared by the classic assignors, and the registry behind
``partition.assignment.strategy``.

An assignor is a pure function of (topic → partition count, member subscriptions) to
(member id → partitions). Assignment lists are sorted, every member appears in the result, and topics with no
partitions in the metadata are skipped (a member cannot fetch a topic the cluster does not have).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

__all__ = [
    "EAGER",
    "COOPERATIVE",
    "Assignment",
    "Assignor",
    "MemberSubscription",
    "TopicPartitionKey",
    "assignor_for",
    "assignor_names",
    "member_order_key",
    "ordered_members",
]

EAGER = "EAGER"
COOPERATIVE = "COOPERATIVE"

TopicPartitionKey = tuple[str, int]
Assignment = dict[str, list[TopicPartitionKey]]


@dataclass
class MemberSubscription:
    """What one member told the group in its JoinGroup metadata (decoded ConsumerProtocolSubscription)."""

    member_id: str
    topics: list[str]
    group_instance_id: str | None = None
    owned_partitions: list[TopicPartitionKey] = field(default_factory=list)
    generation_id: int = -1
    user_data: bytes | None = None
    rack_id: str | None = None


class Assignor(Protocol):
    """Interface of a partition assignor (the leader runs the one the coordinator picked)."""

    name: str
    rebalance_protocol: str  # EAGER or COOPERATIVE

    def assign(self, partition_counts: Mapping[str, int],
               members: Sequence[MemberSubscription]) -> Assignment: ...

    def subscription_user_data(self, generation_id: int) -> bytes | None: ...


def member_order_key(member: MemberSubscription) -> tuple[int, str]:
    """Java's member order: static members first by group.instance.id, then dynamic ones by member id.

    Ordering static members by their instance id keeps their assignment stable across restarts, when the
    broker hands them a fresh member id.
    """
    if member.group_instance_id is not None:
        return (0, member.group_instance_id)
    return (1, member.member_id)


def ordered_members(members: Sequence[MemberSubscription]) -> list[MemberSubscription]:
    ids = [m.member_id for m in members]
    if len(set(ids)) != len(ids):
        raise ValueError("duplicate member ids in the group")
    return sorted(members, key=member_order_key)


def empty_assignment(members: Sequence[MemberSubscription]) -> Assignment:
    return {m.member_id: [] for m in members}


def assignor_names() -> list[str]:
    return ["range", "roundrobin", "cooperative-sticky"]


def assignor_for(name: str) -> Assignor:
    """The assignor registered under ``name`` (a partition.assignment.strategy value)."""
    from kqactors.core.group.assignors.range import RangeAssignor
    from kqactors.core.group.assignors.roundrobin import RoundRobinAssignor
    from kqactors.core.group.assignors.sticky import CooperativeStickyAssignor

    table: dict[str, type] = {
        "range": RangeAssignor,
        "roundrobin": RoundRobinAssignor,
        "cooperative-sticky": CooperativeStickyAssignor,
    }
    factory = table.get(name.strip())
    if factory is None:
        raise ValueError(f"unknown partition.assignment.strategy {name!r} (known: {', '.join(table)})")
    return factory()
