"""Runs in: the main host (group leader only). Owns the cooperative-sticky assignor (KIP-429 on top of the
KIP-54/KIP-341 sticky assignment): a balanced assignment that moves as few previously owned partitions as
possible, then the cooperative adjustment that withholds every partition still claimed by another member,
so it is first revoked there and handed over in the follow-up rebalance.

Ownership comes from the subscriptions' owned_partitions. Only members at the highest generation in the
group keep their claims (a member with an older generation missed a rebalance and its view is stale); a
partition claimed by two members of that generation is treated as unowned.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence

from kqactors.core.group.assignors import (
    COOPERATIVE,
    Assignment,
    MemberSubscription,
    TopicPartitionKey,
    ordered_members,
)

_GENERATION = struct.Struct(">i")


def decode_generation_user_data(user_data: bytes | None) -> int | None:
    """Generation carried in user_data by members on subscription versions < 2.

    Java's cooperative-sticky puts a bare int32 there; the older sticky format (StickyAssignorUserData v1)
    ends with the int32 generation after the previous assignment, so both read the last four bytes.
    """
    if not user_data or len(user_data) < 4:
        return None
    return _GENERATION.unpack_from(user_data, len(user_data) - 4)[0]


def valid_owners(partition_counts: Mapping[str, int],
                 members: Sequence[MemberSubscription]) -> dict[TopicPartitionKey, str]:
    """partition → member allowed to keep it (highest-generation, unique, still subscribed and existing)."""
    if not members:
        return {}
    max_generation = max(m.generation_id for m in members)
    claims: dict[TopicPartitionKey, list[str]] = {}
    for member in members:
        if member.generation_id != max_generation:
            continue
        topics = set(member.topics)
        for topic, partition in dict.fromkeys(member.owned_partitions):
            if topic in topics and 0 <= partition < partition_counts.get(topic, 0):
                claims.setdefault((topic, partition), []).append(member.member_id)
    return {tp: owners[0] for tp, owners in claims.items() if len(owners) == 1}


def sticky_assign(partition_counts: Mapping[str, int], members: Sequence[MemberSubscription]) -> Assignment:
    """Balanced, sticky assignment (before the cooperative adjustment).

    Keep valid owned partitions, give each unowned partition to the least-loaded eligible member, then move
    partitions from a member to an eligible one holding at least two fewer until no such move exists.
    Newly placed partitions move before kept ones, so stickiness only yields to balance. With identical
    subscriptions the result is balanced within one partition.
    """
    order = ordered_members(members)
    rank = {m.member_id: i for i, m in enumerate(order)}
    eligible_by_topic: dict[str, list[str]] = {}
    for member in order:
        for topic in dict.fromkeys(member.topics):
            if partition_counts.get(topic, 0) > 0:
                eligible_by_topic.setdefault(topic, []).append(member.member_id)

    assigned: dict[str, set[TopicPartitionKey]] = {m.member_id: set() for m in order}
    kept = valid_owners(partition_counts, order)
    for tp, owner in kept.items():
        assigned[owner].add(tp)

    def load_key(member_id: str) -> tuple[int, int]:
        return (len(assigned[member_id]), rank[member_id])

    unowned = [(topic, p) for topic in sorted(eligible_by_topic) for p in range(partition_counts[topic])
               if (topic, p) not in kept]
    # Most constrained partitions first, so members with narrow subscriptions get theirs before others fill up.
    unowned.sort(key=lambda tp: (len(eligible_by_topic[tp[0]]), tp))
    for tp in unowned:
        target = min(eligible_by_topic[tp[0]], key=load_key)
        assigned[target].add(tp)

    _rebalance(assigned, eligible_by_topic, kept, load_key)
    return {member_id: sorted(parts) for member_id, parts in assigned.items()}


def _rebalance(assigned: dict[str, set[TopicPartitionKey]], eligible_by_topic: dict[str, list[str]],
               kept: dict[TopicPartitionKey, str], load_key) -> None:
    """Move single partitions from heavier to eligible lighter members (by >= 2) until none can move.

    One move at a time, always from the heaviest member that can give: a member that kept too many sheds
    only while it is the heaviest, so it never drops below its share and then takes someone else's
    partition back. Each move lowers the sum of squared loads, so the loop ends.
    """
    while True:
        for source in sorted(assigned, key=load_key, reverse=True):
            source_load = len(assigned[source])
            # Partitions this member did not own before go first; then (topic, partition) order.
            for tp in sorted(assigned[source], key=lambda tp: (kept.get(tp) == source, tp)):
                lighter = [m for m in eligible_by_topic[tp[0]] if len(assigned[m]) <= source_load - 2]
                if lighter:
                    target = min(lighter, key=load_key)
                    assigned[source].remove(tp)
                    assigned[target].add(tp)
                    break
            else:
                continue
            break  # moved: look for the heaviest again
        else:
            return


class CooperativeStickyAssignor:
    name = "cooperative-sticky"
    rebalance_protocol = COOPERATIVE

    def assign(self, partition_counts: Mapping[str, int],
               members: Sequence[MemberSubscription]) -> Assignment:
        target = sticky_assign(partition_counts, members)
        return withhold_transfers(target, members)

    def subscription_user_data(self, generation_id: int) -> bytes | None:
        # For readers of subscription versions < 2, which have no generation field.
        return _GENERATION.pack(generation_id)


def withhold_transfers(target: Assignment, members: Sequence[MemberSubscription]) -> Assignment:
    """KIP-429 adjustment: drop from each member every partition some other member still claims.

    The claimant gets an assignment without it, revokes it and rejoins; the partition is then free and the
    next rebalance hands it over. No partition is ever owned by two members at once.
    """
    claimants: dict[TopicPartitionKey, set[str]] = {}
    for member in members:
        for tp in member.owned_partitions:
            claimants.setdefault(tp, set()).add(member.member_id)
    adjusted: Assignment = {}
    for member_id, partitions in target.items():
        adjusted[member_id] = [tp for tp in partitions
                               if not (claimants.get(tp, set()) - {member_id})]
    return adjusted
