"""Runs in: the main host (group leader only). Owns the range assignor: per topic, contiguous partition
ranges over the members subscribed to that topic, earlier members taking one extra when it does not divide.

Same results as the Java and librdkafka range assignors for the same inputs (member order from
``member_order_key``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kqactors.core.group.assignors import (
    EAGER,
    Assignment,
    MemberSubscription,
    empty_assignment,
    ordered_members,
)


class RangeAssignor:
    name = "range"
    rebalance_protocol = EAGER

    def assign(self, partition_counts: Mapping[str, int],
               members: Sequence[MemberSubscription]) -> Assignment:
        result = empty_assignment(members)
        members_by_topic: dict[str, list[str]] = {}
        for member in ordered_members(members):
            for topic in dict.fromkeys(member.topics):
                members_by_topic.setdefault(topic, []).append(member.member_id)
        for topic in sorted(members_by_topic):
            count = partition_counts.get(topic, 0)
            if count <= 0:
                continue
            consumers = members_by_topic[topic]
            per_member, with_extra = divmod(count, len(consumers))
            for index, member_id in enumerate(consumers):
                start = per_member * index + min(index, with_extra)
                length = per_member + (1 if index < with_extra else 0)
                result[member_id].extend((topic, p) for p in range(start, start + length))
        for partitions in result.values():
            partitions.sort()
        return result

    def subscription_user_data(self, generation_id: int) -> bytes | None:
        return None
