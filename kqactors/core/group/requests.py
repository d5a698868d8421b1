"""Runs in: the main host (cgrp actor, when it executes a SendRequest action). Owns the translation between
the state machine's version-independent request fields and the generated group request classes at the
version negotiated with the coordinator, and the reading of group responses whose shape changed across
versions (FindCoordinator v4 batching, OffsetFetch v8 groups). ConsumerGroupHeartbeat (KIP-848) is built here
too: its fields are already version-independent except the v1 regex.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kqactors.errors import KafkaError, KafkaException
from kqactors.protocol.base import Message
from kqactors.protocol.generated.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    TopicPartitions,
)
from kqactors.protocol.generated.find_coordinator import FindCoordinatorRequest
from kqactors.protocol.generated.heartbeat import HeartbeatRequest
from kqactors.protocol.generated.join_group import JoinGroupRequest, JoinGroupRequestProtocol
from kqactors.protocol.generated.leave_group import LeaveGroupRequest, MemberIdentity
from kqactors.protocol.generated.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kqactors.protocol.generated.offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopic,
    OffsetFetchRequestTopics,
)
from kqactors.protocol.generated.sync_group import SyncGroupRequest, SyncGroupRequestAssignment

__all__ = ["build_request", "coordinator_from_response", "offset_fetch_partitions", "offset_commit_errors"]

_STATIC_MIN_VERSION = {"JoinGroup": 5, "SyncGroup": 3, "Heartbeat": 3, "OffsetCommit": 7, "LeaveGroup": 3}


def _require_static_support(api: str, fields: dict[str, Any], version: int) -> None:
    if fields.get("group_instance_id") is not None and version < _STATIC_MIN_VERSION[api]:
        raise KafkaException(KafkaError(
            KafkaError._UNSUPPORTED_FEATURE,
            f"group.instance.id (static membership) needs {api} v{_STATIC_MIN_VERSION[api]}+, "
            f"the coordinator offers v{version}"))


def _grouped(partitions: list[Any]) -> dict[str, list[Any]]:
    by_topic: dict[str, list[Any]] = {}
    for entry in partitions:
        by_topic.setdefault(entry[0], []).append(entry)
    return by_topic


def _find_coordinator(fields: dict[str, Any], version: int) -> Message:
    if version >= 4:
        return FindCoordinatorRequest(key_type=fields["key_type"], coordinator_keys=[fields["key"]])
    return FindCoordinatorRequest(key=fields["key"], key_type=fields["key_type"])


def _join_group(fields: dict[str, Any], version: int) -> Message:
    _require_static_support("JoinGroup", fields, version)
    return JoinGroupRequest(
        group_id=fields["group_id"], session_timeout_ms=fields["session_timeout_ms"],
        rebalance_timeout_ms=fields["rebalance_timeout_ms"], member_id=fields["member_id"],
        group_instance_id=fields["group_instance_id"], protocol_type=fields["protocol_type"],
        protocols=[JoinGroupRequestProtocol(name=name, metadata=metadata) for name, metadata in fields["protocols"]],
        reason=fields.get("reason"))


def _sync_group(fields: dict[str, Any], version: int) -> Message:
    _require_static_support("SyncGroup", fields, version)
    return SyncGroupRequest(
        group_id=fields["group_id"], generation_id=fields["generation_id"], member_id=fields["member_id"],
        group_instance_id=fields["group_instance_id"], protocol_type=fields["protocol_type"],
        protocol_name=fields["protocol_name"],
        assignments=[SyncGroupRequestAssignment(member_id=m, assignment=a) for m, a in fields["assignments"]])


def _heartbeat(fields: dict[str, Any], version: int) -> Message:
    _require_static_support("Heartbeat", fields, version)
    return HeartbeatRequest(group_id=fields["group_id"], generation_id=fields["generation_id"],
                            member_id=fields["member_id"], group_instance_id=fields["group_instance_id"])


def _leave_group(fields: dict[str, Any], version: int) -> Message:
    _require_static_support("LeaveGroup", fields, version)
    if version >= 3:
        member = MemberIdentity(member_id=fields["member_id"], group_instance_id=fields["group_instance_id"],
                                reason=fields.get("reason"))
        return LeaveGroupRequest(group_id=fields["group_id"], members=[member])
    return LeaveGroupRequest(group_id=fields["group_id"], member_id=fields["member_id"])


def _offset_commit(fields: dict[str, Any], version: int) -> Message:
    _require_static_support("OffsetCommit", fields, version)
    topics = []
    for topic, entries in sorted(_grouped(fields["offsets"]).items()):
        partitions = [OffsetCommitRequestPartition(
            partition_index=partition, committed_offset=offset,
            committed_leader_epoch=(epoch if epoch is not None and version >= 6 else -1),
            committed_metadata=metadata if metadata is not None else "")
            for _topic, partition, offset, epoch, metadata in entries]
        topics.append(OffsetCommitRequestTopic(name=topic, partitions=partitions))
    return OffsetCommitRequest(
        group_id=fields["group_id"], generation_id_or_member_epoch=fields["generation_id"],
        member_id=fields["member_id"], group_instance_id=fields["group_instance_id"], topics=topics)


def _offset_fetch(fields: dict[str, Any], version: int) -> Message:
    by_topic = sorted(_grouped(fields["partitions"]).items())
    stable = bool(fields.get("require_stable")) and version >= 7
    if version >= 8:
        topics = [OffsetFetchRequestTopics(name=t, partition_indexes=[p for _t, p in entries])
                  for t, entries in by_topic]
        group = OffsetFetchRequestGroup(group_id=fields["group_id"], topics=topics)
        return OffsetFetchRequest(groups=[group], require_stable=stable)
    topics = [OffsetFetchRequestTopic(name=t, partition_indexes=[p for _t, p in entries]) for t, entries in by_topic]
    return OffsetFetchRequest(group_id=fields["group_id"], topics=topics, require_stable=stable)


def _consumer_group_heartbeat(fields: dict[str, Any], version: int) -> Message:
    regex = fields.get("subscribed_topic_regex")
    if version < 1:
        if regex:
            raise KafkaException(KafkaError(
                KafkaError._UNSUPPORTED_FEATURE,
                f"regex subscriptions need ConsumerGroupHeartbeat v1+, the coordinator offers v{version}"))
        regex = None
    owned = fields.get("topic_partitions")
    return ConsumerGroupHeartbeatRequest(
        group_id=fields["group_id"], member_id=fields["member_id"], member_epoch=fields["member_epoch"],
        instance_id=fields.get("instance_id"), rack_id=fields.get("rack_id"),
        rebalance_timeout_ms=fields.get("rebalance_timeout_ms", -1),
        subscribed_topic_names=fields.get("subscribed_topic_names"), subscribed_topic_regex=regex,
        server_assignor=fields.get("server_assignor"),
        topic_partitions=None if owned is None else [TopicPartitions(topic_id=bytes(topic_id), partitions=list(parts))
                                                     for topic_id, parts in owned])


_BUILDERS: dict[str, Callable[[dict[str, Any], int], Message]] = {
    "FindCoordinator": _find_coordinator,
    "JoinGroup": _join_group,
    "SyncGroup": _sync_group,
    "Heartbeat": _heartbeat,
    "LeaveGroup": _leave_group,
    "OffsetCommit": _offset_commit,
    "OffsetFetch": _offset_fetch,
    "ConsumerGroupHeartbeat": _consumer_group_heartbeat,
}


def build_request(api: str, fields: dict[str, Any], version: int) -> Message:
    """The generated request object for ``api`` at ``version`` from the machine's plain fields."""
    builder = _BUILDERS.get(api)
    if builder is None:
        raise ValueError(f"the consumer group sends no {api!r} requests")
    return builder(fields, version)


# --- responses -----------------------------------------------------------------------------------------

def coordinator_from_response(response: Any) -> tuple[int, int, str, int, str | None]:
    """(error code, node id, host, port, error message) from a FindCoordinator response of any version."""
    coordinators = getattr(response, "coordinators", None)
    if coordinators:
        entry = coordinators[0]
        return entry.error_code, entry.node_id, entry.host, entry.port, entry.error_message
    return response.error_code, response.node_id, response.host, response.port, response.error_message


def offset_fetch_partitions(response: Any) -> tuple[int, dict[tuple[str, int], tuple[int, int, str | None, int]]]:
    """(group error code, {(topic, partition): (offset, leader epoch, metadata, error code)})."""
    groups = getattr(response, "groups", None)
    if groups:
        group = groups[0]
        error, topics = group.error_code, group.topics
    else:
        error, topics = getattr(response, "error_code", 0), response.topics
    result = {}
    for topic in topics:
        for part in topic.partitions:
            result[(topic.name, part.partition_index)] = (
                part.committed_offset, part.committed_leader_epoch, part.metadata, part.error_code)
    return error, result


def offset_commit_errors(response: Any) -> dict[tuple[str, int], int]:
    """{(topic, partition): error code} of an OffsetCommit response."""
    return {(topic.name, part.partition_index): part.error_code
            for topic in response.topics for part in topic.partitions}
