"""Runs in: the main host (group leader only). Owns the roundrobin assignor: all subscribed
topic-partitions in (topic, partition) order dealt out in turn to the ordered members, skipping a member
that is not subscribed to the partition's topic.

Same results as the Java and librdkafka roundrobin assignors for the same inputs.
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


class RoundRobinAssignor:
    name = "roundrobin"
    rebalance_protocol = EAGER

    def assign(self, partition_counts: Mapping[str, int],
               members: Sequence[MemberSubscription]) -> Assignment:
        result = empty_assignment(members)
        order = ordered_members(members)
        if not order:
            return result
        subscribed = [set(m.topics) for m in order]
        all_topics = sorted(set().union(*subscribed))
        cursor = 0
        for topic in all_topics:
            for partition in range(max(partition_counts.get(topic, 0), 0)):
                # Some member subscribes to every topic in all_topics, so this loop always ends.
                while topic not in subscribed[cursor]:
                    cursor = (cursor + 1) % len(order)
                result[order[cursor].member_id].append((topic, partition))
                cursor = (cursor + 1) % len(order)
        return result

    def subscription_user_data(self, generation_id: int) -> bytes | None:
        return None
