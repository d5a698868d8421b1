"""Runs in: the main host (cgrp state machine). Owns the consumer-protocol payloads carried opaquely by
JoinGroup (member subscription) and SyncGroup (member assignment): encode and decode through the generated
ConsumerProtocolSubscription / ConsumerProtocolAssignment codecs, in the layout Java and librdkafka members
read, so mixed groups work.
"""

from __future__ import annotations

from collections.abc import Iterable

from kqactors.core.group.assignors import MemberSubscription, TopicPartitionKey
from kqactors.core.group.assignors.sticky import decode_generation_user_data
from kqactors.errors import KafkaError, KafkaException
from kqactors.protocol.errors import ProtocolError
from kqactors.protocol.generated.consumer_protocol import (
    ConsumerProtocolAssignment,
    ConsumerProtocolAssignmentTopicPartition,
    ConsumerProtocolSubscription,
)
from kqactors.protocol.generated.consumer_protocol import TopicPartition as SubscriptionTopicPartition

SUBSCRIPTION_VERSION = 3  # owned partitions (v1), generation (v2), rack (v3)
ASSIGNMENT_VERSION = 3  # v1-v3 share v0's layout; Java writes its latest


def _group_by_topic(partitions: Iterable[TopicPartitionKey]) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = {}
    for topic, partition in sorted(set(partitions)):
        grouped.setdefault(topic, []).append(partition)
    return grouped


def encode_subscription(topics: Iterable[str], owned_partitions: Iterable[TopicPartitionKey] = (),
                        generation_id: int = -1, user_data: bytes | None = None, rack_id: str | None = None,
                        version: int = SUBSCRIPTION_VERSION) -> bytes:
    """JoinGroup protocol metadata for this member (topics sorted, as Java sends them)."""
    owned = [SubscriptionTopicPartition(topic=t, partitions=p)
             for t, p in _group_by_topic(owned_partitions).items()] if version >= 1 else []
    body = ConsumerProtocolSubscription(
        topics=sorted(set(topics)), user_data=user_data, owned_partitions=owned,
        generation_id=generation_id if version >= 2 else -1, rack_id=rack_id if version >= 3 else None)
    return body.encode_versioned(version)


def decode_subscription(member_id: str, group_instance_id: str | None, metadata: bytes) -> MemberSubscription:
    """Decode one JoinGroup member's metadata; a malformed payload is a KafkaException(_BAD_MSG)."""
    try:
        body, version = ConsumerProtocolSubscription.decode_versioned(metadata)
    except ProtocolError as exc:
        raise KafkaException(KafkaError(KafkaError._BAD_MSG,
                                        f"member {member_id}: bad subscription metadata: {exc}")) from exc
    generation = body.generation_id
    if version < 2:
        from_user_data = decode_generation_user_data(body.user_data)
        generation = from_user_data if from_user_data is not None else -1
    owned = [(tp.topic, p) for tp in body.owned_partitions for p in tp.partitions]
    return MemberSubscription(member_id=member_id, topics=list(body.topics), group_instance_id=group_instance_id,
                              owned_partitions=owned, generation_id=generation, user_data=body.user_data,
                              rack_id=body.rack_id)


def encode_assignment(partitions: Iterable[TopicPartitionKey], user_data: bytes | None = None,
                      version: int = ASSIGNMENT_VERSION) -> bytes:
    body = ConsumerProtocolAssignment(
        assigned_partitions=[ConsumerProtocolAssignmentTopicPartition(topic=t, partitions=p)
                             for t, p in _group_by_topic(partitions).items()],
        user_data=user_data)
    return body.encode_versioned(version)


def decode_assignment(data: bytes) -> list[TopicPartitionKey]:
    """Partitions of a SyncGroup assignment, sorted. An empty payload is an empty assignment (Java's rule)."""
    if not data:
        return []
    try:
        body, _version = ConsumerProtocolAssignment.decode_versioned(data)
    except ProtocolError as exc:
        raise KafkaException(KafkaError(KafkaError._BAD_MSG, f"bad assignment payload: {exc}")) from exc
    return sorted({(tp.topic, p) for tp in body.assigned_partitions for p in tp.partitions})
