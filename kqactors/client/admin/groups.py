"""The AdminClient's consumer group methods: list_consumer_groups, describe_consumer_groups,
delete_consumer_groups, list_consumer_group_offsets, alter_consumer_group_offsets and the legacy list_groups.

Runs in: the app process. Group calls go to each group's coordinator, one request per group as librdkafka sends
them; ListGroups goes to every broker. describe_consumer_groups asks ConsumerGroupDescribe (KIP-848 groups)
first and falls back to DescribeGroups for a classic group or a broker without it, as librdkafka does.
"""

from __future__ import annotations

import concurrent.futures
import time
import warnings
from typing import Any

from kqactors._model import ConsumerGroupState, ConsumerGroupTopicPartitions, ConsumerGroupType, Node
from kqactors.admin._group import (
    ConsumerGroupDescription,
    ConsumerGroupListing,
    ListConsumerGroupsResult,
    MemberAssignment,
    MemberDescription,
)
from kqactors.admin._metadata import GroupMember, GroupMetadata
from kqactors.client.admin import results as res
from kqactors.client.admin.base import AdminBase
from kqactors.client.admin.dispatch import Outcome, new_future
from kqactors.client.handle import timeout_seconds
from kqactors.client.handle.metadata import BrokerMetadata
from kqactors.core.group.member_metadata import decode_assignment
from kqactors.errors import KafkaError, KafkaException
from kqactors.message import OFFSET_INVALID, TopicPartition
from kqactors.ops import admin as aops
from kqactors.runtime.op import ActorError, Op

__all__ = ["GroupsMixin"]

# librdkafka's names of the group states and types (matched case-insensitively, as it does)
STATE_NAMES = {ConsumerGroupState.UNKNOWN: "Unknown", ConsumerGroupState.PREPARING_REBALANCING: "PreparingRebalance",
               ConsumerGroupState.COMPLETING_REBALANCING: "CompletingRebalance", ConsumerGroupState.STABLE: "Stable",
               ConsumerGroupState.DEAD: "Dead", ConsumerGroupState.EMPTY: "Empty"}
TYPE_NAMES = {ConsumerGroupType.UNKNOWN: "Unknown", ConsumerGroupType.CONSUMER: "Consumer",
              ConsumerGroupType.CLASSIC: "Classic"}
_FALLBACK = {KafkaError.GROUP_ID_NOT_FOUND, KafkaError.UNSUPPORTED_VERSION, KafkaError._UNSUPPORTED_FEATURE}
# KIP-848 group states (ConsumerGroupDescribe) in classic terms, as librdkafka maps them
_CONSUMER_STATES = {"assigning": ConsumerGroupState.COMPLETING_REBALANCING,
                    "reconciling": ConsumerGroupState.COMPLETING_REBALANCING}


def state_of(name: str | None) -> ConsumerGroupState:
    wanted = (name or "").lower()
    if wanted in _CONSUMER_STATES:
        return _CONSUMER_STATES[wanted]
    for state, text in STATE_NAMES.items():
        if text.lower() == wanted:
            return state
    return ConsumerGroupState.UNKNOWN


def type_of(name: str | None) -> ConsumerGroupType:
    wanted = (name or "").lower()
    for kind, text in TYPE_NAMES.items():
        if text.lower() == wanted:
            return kind
    return ConsumerGroupType.UNKNOWN


def _group_ids(group_ids: Any, what: str) -> list[str]:
    if not isinstance(group_ids, list):
        raise TypeError(f"Expected input to be list of group ids to be {what}")
    if not group_ids:
        raise ValueError(f"Expected at least one group to be {what}")
    return group_ids


def _topic_partitions(request: Any, what: str, offsets: bool) -> None:
    """confluent-kafka's checks of a [ConsumerGroupTopicPartitions] offsets request (one group)."""
    if request is None:
        raise TypeError("request cannot be None")
    if not isinstance(request, list):
        raise TypeError("request must be a list")
    if len(request) != 1:
        raise ValueError(f"Currently we support {what} offsets for a single consumer group only")
    for entry in request:
        if not isinstance(entry, ConsumerGroupTopicPartitions):
            raise TypeError("Expected list of 'ConsumerGroupTopicPartitions'")
        if entry.group_id is None:
            raise TypeError("'group_id' cannot be None")
        if not isinstance(entry.group_id, str):
            raise TypeError("'group_id' must be a string")
        if not entry.group_id:
            raise ValueError("'group_id' cannot be empty")
        partitions = entry.topic_partitions
        if partitions is None:
            if offsets:
                raise ValueError("'topic_partitions' cannot be null")
            continue
        if not isinstance(partitions, list):
            raise TypeError("'topic_partitions' must be a list" + ("" if offsets else " or None"))
        if not partitions:
            raise ValueError("'topic_partitions' cannot be empty")
        for tp in partitions:
            if tp is None:
                raise ValueError("Element of 'topic_partitions' cannot be None")
            if not isinstance(tp, TopicPartition):
                raise TypeError("Element of 'topic_partitions' must be of type TopicPartition")
            if tp.topic is None:
                raise TypeError("Element of 'topic_partitions' must not have 'topic' attribute as None")
            if not tp.topic:
                raise ValueError("Element of 'topic_partitions' must not have 'topic' attribute as Empty")
            if tp.partition < 0:
                raise ValueError("Element of 'topic_partitions' must not have negative "
                                 + ("value for 'partition' field" if offsets else "'partition' value"))
            if offsets and tp.offset < 0:
                raise ValueError("Element of 'topic_partitions' must not have negative value for 'offset' field")
            if not offsets and tp.offset != OFFSET_INVALID:
                raise ValueError("Element of 'topic_partitions' must not have 'offset' value")


def _by_topic(partitions: list[TopicPartition]) -> dict[str, list[TopicPartition]]:
    out: dict[str, list[TopicPartition]] = {}
    for tp in partitions:
        out.setdefault(tp.topic, []).append(tp)
    return out


def _partition(topic: str, part: dict[str, Any], offset_field: str) -> TopicPartition:
    offset = int(part.get(offset_field, -1))
    epoch = int(part.get("committed_leader_epoch", -1))
    tp = TopicPartition(topic, int(part["partition_index"]), OFFSET_INVALID if offset < 0 else offset,
                        part.get("metadata"), epoch if epoch >= 0 else None)
    code = int(part.get("error_code") or 0)
    tp.error = res.kafka_error(code) if code else None
    return tp


def _classic_description(group: dict[str, Any], coordinator: Node | None,
                         include_operations: bool) -> ConsumerGroupDescription | KafkaError:
    code = int(group.get("error_code") or 0)
    protocol_type = group.get("protocol_type") or ""
    if code:
        return res.kafka_error(code, f"DescribeConsumerGroups: {KafkaError(code).str()}")
    if protocol_type not in ("", "consumer"):
        return res.kafka_error(KafkaError._INVALID_ARG,
                               f"GroupId {group['group_id']} is not a consumer group ({protocol_type}).")
    members = []
    for member in group.get("members") or ():
        assigned = [TopicPartition(t, p) for t, p in decode_assignment(member.get("member_assignment") or b"")]
        members.append(MemberDescription(member["member_id"], member["client_id"], member["client_host"],
                                         MemberAssignment(assigned), member.get("group_instance_id")))
    operations = res.acl_operations(group.get("authorized_operations")) if include_operations else None
    return ConsumerGroupDescription(group["group_id"], protocol_type == "", members, group.get("protocol_data") or "",
                                    state_of(group.get("group_state")), coordinator, operations,
                                    ConsumerGroupType.CLASSIC)


def _assignment(assignment: dict[str, Any] | None) -> MemberAssignment:
    parts = [TopicPartition(t.get("topic_name") or "", p) for t in (assignment or {}).get("topic_partitions") or ()
             for p in t.get("partitions") or ()]
    return MemberAssignment(parts)


def _consumer_description(group: dict[str, Any], coordinator: Node | None,
                          include_operations: bool) -> ConsumerGroupDescription | KafkaError:
    code = int(group.get("error_code") or 0)
    if code:
        return res.kafka_error(code, group.get("error_message") or None)
    members = [MemberDescription(m["member_id"], m["client_id"], m["client_host"], _assignment(m.get("assignment")),
                                 m.get("instance_id"), _assignment(m.get("target_assignment")))
               for m in group.get("members") or ()]
    operations = res.acl_operations(group.get("authorized_operations")) if include_operations else None
    return ConsumerGroupDescription(group["group_id"], False, members, group.get("assignor_name") or "",
                                    state_of(group.get("group_state")), coordinator, operations,
                                    ConsumerGroupType.CONSUMER)


class GroupsMixin(AdminBase):
    """Consumer group methods of the AdminClient."""

    def list_consumer_groups(self, **kwargs: Any) -> concurrent.futures.Future:
        """List the cluster's consumer groups (every broker is asked). Options: ``states`` (set of
        ConsumerGroupState), ``types`` (set of ConsumerGroupType), ``request_timeout``. Returns a future of
        ListConsumerGroupsResult."""
        kwargs = dict(kwargs)
        states = kwargs.pop("states", None)
        types = kwargs.pop("types", None)
        if states is not None:
            if not isinstance(states, set):
                raise TypeError("'states' must be a set")
            if not all(isinstance(s, ConsumerGroupState) for s in states):
                raise TypeError("All elements of states must be of type ConsumerGroupState")
        if types is not None:
            if not isinstance(types, set):
                raise TypeError("'types' must be a set")
            if not all(isinstance(t, ConsumerGroupType) for t in types):
                raise TypeError("All elements of types must be of type ConsumerGroupType")
            if ConsumerGroupType.UNKNOWN in types:
                raise ValueError("UNKNOWN type is not allowed")
        future = new_future()
        options = self._options(kwargs, ("request_timeout",))
        self._check_open()
        args = {"states_filter": sorted(STATE_NAMES[s] for s in (states or ())),
                "types_filter": sorted(TYPE_NAMES[t].lower() for t in (types or ()))}

        def complete(outcomes: list[Outcome]) -> None:
            failure = res.outcome_exception(outcomes[0], "ListConsumerGroups")
            if failure is not None:
                future.set_exception(failure)
                return
            valid: list[ConsumerGroupListing] = []
            errors: list[Any] = []
            seen: set[str] = set()
            for node, code, reason, result in outcomes[0]["result"] or ():
                if not code and result is not None and int(result.get("error_code") or 0):
                    code = int(result["error_code"])
                    reason = f"Broker [{node}] ListConsumerGroups: {KafkaError(code).str()}"
                if code:
                    errors.append(res.kafka_error(code, reason))
                    continue
                version = int(result.get("_version", 0))
                for group in result.get("groups") or ():
                    protocol_type = group.get("protocol_type") or ""
                    if protocol_type not in ("", "consumer") or group["group_id"] in seen:
                        continue
                    seen.add(group["group_id"])
                    valid.append(ConsumerGroupListing(
                        group["group_id"], protocol_type == "",
                        state_of(group.get("group_state")) if version >= 4 else ConsumerGroupState.UNKNOWN,
                        type_of(group.get("group_type")) if version >= 5 else ConsumerGroupType.UNKNOWN))
            future.set_result(ListConsumerGroupsResult(valid, errors))

        self._submit(aops.LISTCONSUMERGROUPS, [aops.call(["all"], "admin:ListGroups", args)], options, complete,
                     [future])
        return future

    def describe_consumer_groups(self, group_ids: list[str], **kwargs: Any) -> dict[str, concurrent.futures.Future]:
        """Describe groups (state, assignor, members and their assignments, coordinator). Options:
        ``include_authorized_operations``, ``request_timeout``. Returns {group_id: future of
        ConsumerGroupDescription}."""
        groups = _group_ids(group_ids, "described")
        futures = self._futures(groups)
        options = self._options(kwargs, ("request_timeout", "include_authorized_operations"))
        names = []
        for group in groups:
            if group is None:
                raise ValueError("Expected list of group strings, not NoneType")
            names.append(str(group))
        self._check_open()
        if len(set(names)) != len(names):
            self._fail(futures.values(), res.exception(KafkaError._INVALID_ARG, "Duplicate groups not allowed"))
            return dict(futures)
        include = options.include_authorized_operations
        by_name = dict(zip(names, futures.values(), strict=True))

        def described(outcomes: list[Outcome]) -> None:
            for name, outcome in zip(names, outcomes, strict=False):
                future = by_name[name]
                code = int(outcome.get("error_code") or 0)
                groups_found = (outcome.get("result") or {}).get("groups") or [{}]
                found = groups_found[0]
                if not code and int(found.get("error_code") or 0) in _FALLBACK:
                    code = int(found["error_code"])
                if code in _FALLBACK:
                    classic.append(name)
                    continue
                if code:
                    future.set_exception(res.exception(code, outcome.get("reason")))
                    continue
                value = _consumer_description(found, res.node_from(outcome.get("node")),
                                              include)
                self._settle(future, value)
            if classic:
                calls = [aops.call(["coordinator", name], "admin:DescribeGroups",
                                   {"groups": [name], "include_authorized_operations": include}) for name in classic]
                self._submit(aops.DESCRIBECONSUMERGROUPS, calls, options, described_classic,
                             [by_name[n] for n in classic])

        def described_classic(outcomes: list[Outcome]) -> None:
            for name, outcome in zip(classic, outcomes, strict=False):
                future = by_name[name]
                failure = res.outcome_exception(outcome, "")
                if failure is not None:
                    future.set_exception(failure)
                    continue
                found = ((outcome.get("result") or {}).get("groups") or [None])[0]
                if found is None:
                    future.set_exception(res.exception(KafkaError._FAIL, f"group {name} missing from the response"))
                    continue
                coordinator = res.node_from(outcome.get("node"))
                self._settle(future, _classic_description(found, coordinator, include))

        classic: list[str] = []
        calls = [aops.call(["coordinator", name], "admin:ConsumerGroupDescribe",
                           {"group_ids": [name], "include_authorized_operations": include}) for name in names]
        self._submit(aops.DESCRIBECONSUMERGROUPS, calls, options, described, futures.values())
        return dict(futures)

    @staticmethod
    def _settle(future: concurrent.futures.Future, value: Any) -> None:
        if isinstance(value, KafkaError):
            future.set_exception(KafkaException(value))
        else:
            future.set_result(value)

    def delete_consumer_groups(self, group_ids: list[str], **kwargs: Any) -> dict[str, concurrent.futures.Future]:
        """Delete groups (each must be empty). Options: ``request_timeout``. Returns {group_id: future} whose
        result is None."""
        groups = _group_ids(group_ids, "deleted")
        futures = self._futures(groups, str, what="<class 'str'>")
        options = self._options(kwargs, ("request_timeout",))
        self._check_open()
        if len(set(groups)) != len(groups):
            self._fail(futures.values(), res.exception(KafkaError._INVALID_ARG, "Duplicate groups not allowed"))
            return dict(futures)
        calls = [aops.call(["coordinator", g], "admin:DeleteGroups", {"groups_names": [g]}) for g in groups]

        def complete(outcomes: list[Outcome]) -> None:
            for group, outcome in zip(groups, outcomes, strict=False):
                failure = res.outcome_exception(outcome, "")
                if failure is None:
                    found = ((outcome.get("result") or {}).get("results") or [{}])[0]
                    code = int(found.get("error_code") or 0)
                    failure = res.exception(code) if code else None
                if failure is not None:
                    futures[group].set_exception(failure)
                else:
                    futures[group].set_result(None)

        self._submit(aops.DELETEGROUPS, calls, options, complete, futures.values())
        return dict(futures)

    def list_consumer_group_offsets(self, list_consumer_group_offsets_request: list[ConsumerGroupTopicPartitions],
                                    **kwargs: Any) -> dict[str, concurrent.futures.Future]:
        """A group's committed offsets: of its ``topic_partitions``, or of every partition it committed (None).
        Options: ``require_stable``, ``request_timeout``. Returns {group_id: future of
        ConsumerGroupTopicPartitions} (each TopicPartition carries its offset, metadata, leader epoch, error)."""
        request = list_consumer_group_offsets_request
        _topic_partitions(request, "listing", offsets=False)
        futures = self._futures([r.group_id for r in request], str, what="<class 'str'>")
        options = self._options(kwargs, ("require_stable", "request_timeout"))
        self._check_open()
        entry = request[0]
        partitions = entry.topic_partitions
        if partitions is not None and len({(tp.topic, tp.partition) for tp in partitions}) != len(partitions):
            self._fail(futures.values(), res.exception(KafkaError._INVALID_ARG, "Duplicate partitions not allowed"))
            return dict(futures)
        topics = None if partitions is None else [
            {"name": topic, "partition_indexes": [tp.partition for tp in tps]}
            for topic, tps in _by_topic(partitions).items()]
        args = {"group_id": entry.group_id, "topics": topics, "require_stable": options.require_stable}
        future = futures[entry.group_id]

        def complete(outcomes: list[Outcome]) -> None:
            failure = res.outcome_exception(outcomes[0], "")
            result = outcomes[0].get("result") or {}
            if result.get("groups"):  # v8+: the one group asked for
                result = result["groups"][0]
            if failure is None and int(result.get("error_code") or 0):
                failure = res.exception(int(result["error_code"]))
            if failure is not None:
                future.set_exception(failure)
                return
            found = [_partition(t["name"], p, "committed_offset") for t in result.get("topics") or ()
                     for p in t.get("partitions") or ()]
            future.set_result(ConsumerGroupTopicPartitions(entry.group_id, found))

        self._submit(aops.LISTCONSUMERGROUPOFFSETS,
                     [aops.call(["coordinator", entry.group_id], "admin:OffsetFetch", args)], options, complete,
                     futures.values())
        return dict(futures)

    def alter_consumer_group_offsets(self, alter_consumer_group_offsets_request: list[ConsumerGroupTopicPartitions],
                                     **kwargs: Any) -> dict[str, concurrent.futures.Future]:
        """Set a group's committed offsets (the group must have no active members). Options:
        ``request_timeout``. Returns {group_id: future of ConsumerGroupTopicPartitions} (each TopicPartition
        carries its error, if any)."""
        request = alter_consumer_group_offsets_request
        _topic_partitions(request, "altering", offsets=True)
        futures = self._futures([r.group_id for r in request], str, what="<class 'str'>")
        options = self._options(kwargs, ("request_timeout",))
        self._check_open()
        entry = request[0]
        partitions = entry.topic_partitions
        if len({(tp.topic, tp.partition) for tp in partitions}) != len(partitions):
            self._fail(futures.values(), res.exception(KafkaError._INVALID_ARG, "Duplicate partitions not allowed"))
            return dict(futures)
        topics = [{"name": topic, "partitions": [
            {"partition_index": tp.partition, "committed_offset": tp.offset, "committed_metadata": tp.metadata,
             "committed_leader_epoch": tp.leader_epoch if tp.leader_epoch is not None else -1} for tp in tps]}
            for topic, tps in _by_topic(partitions).items()]
        args = {"group_id": entry.group_id, "generation_id_or_member_epoch": -1, "member_id": "",
                "retention_time_ms": -1, "topics": topics}
        future = futures[entry.group_id]

        def complete(outcomes: list[Outcome]) -> None:
            failure = res.outcome_exception(outcomes[0], "")
            if failure is not None:
                future.set_exception(failure)
                return
            result = outcomes[0].get("result") or {}
            found = [_partition(t["name"], p, "-") for t in result.get("topics") or ()
                     for p in t.get("partitions") or ()]
            offsets = {(tp.topic, tp.partition): tp.offset for tp in partitions}
            for tp in found:
                tp.offset = offsets.get((tp.topic, tp.partition), OFFSET_INVALID)
            future.set_result(ConsumerGroupTopicPartitions(entry.group_id, found))

        self._submit(aops.ALTERCONSUMERGROUPOFFSETS,
                     [aops.call(["coordinator", entry.group_id], "admin:OffsetCommit", args)], options, complete,
                     futures.values())
        return dict(futures)

    # ---- the legacy list_groups() -------------------------------------------------------------------------
    def list_groups(self, group: str | None = None, timeout: float = -1) -> list[GroupMetadata]:
        """Deprecated (use list_consumer_groups and describe_consumer_groups): every group of the cluster, or
        just ``group``, described by its coordinator. Blocks up to ``timeout`` seconds (-1: socket.timeout.ms)."""
        warnings.warn("list_groups() is deprecated, use list_consumer_groups() and describe_consumer_groups() "
                      "instead.", category=DeprecationWarning, stacklevel=2)
        if group is not None and not isinstance(group, str):
            raise TypeError(f"argument 1 must be str or None, not {type(group).__name__}")
        self._check_open()
        deadline = time.monotonic() + timeout_seconds(timeout, self._default_timeout_ms / 1000)
        cluster = self._handle.metadata([], max(0.001, deadline - time.monotonic()), False)
        listed = self._blocking(aops.LISTGROUPS, [aops.call(["all"], "admin:ListGroups", {})], deadline)[0]
        if listed.get("error_code"):
            raise res.exception(int(listed["error_code"]), f"Failed to list groups: {listed.get('reason')}")
        wanted: dict[int, list[str]] = {}
        failures = []
        for node, code, reason, result in listed.get("result") or ():
            if not code and result is not None and int(result.get("error_code") or 0):
                code, reason = int(result["error_code"]), ""
            if code:
                failures.append((code, reason))
                continue
            names = [g["group_id"] for g in result.get("groups") or () if group is None or g["group_id"] == group]
            if names:
                wanted[node] = names
        nodes = sorted(wanted)
        calls = [aops.call(["broker", n], "admin:DescribeGroups", {"groups": wanted[n]}) for n in nodes]
        described = self._blocking(aops.LISTGROUPS, calls, deadline) if calls else []
        out: list[GroupMetadata] = []
        for node, outcome in zip(nodes, described, strict=False):
            broker = cluster.brokers.get(node) or BrokerMetadata(node, "", -1)
            for found in (outcome.get("result") or {}).get("groups") or ():
                meta = GroupMetadata()
                meta.broker = broker
                meta.id = found["group_id"]
                code = int(found.get("error_code") or 0)
                meta.error = res.kafka_error(code) if code else None
                meta.state = found.get("group_state")
                meta.protocol_type = found.get("protocol_type")
                meta.protocol = found.get("protocol_data")
                for m in found.get("members") or ():
                    member = GroupMember()
                    member.id, member.client_id, member.client_host = m["member_id"], m["client_id"], m["client_host"]
                    member.metadata, member.assignment = bytes(m["member_metadata"]), bytes(m["member_assignment"])
                    meta.members.append(member)
                out.append(meta)
        if failures and not out:  # librdkafka reports a broker's error when nothing was found
            code, reason = failures[0]
            raise res.exception(code, f"Failed to list groups: {reason or KafkaError(code).str()}")
        return out

    def _blocking(self, op_type: str, calls: list[dict[str, Any]], deadline: float) -> list[Outcome]:
        """One admin request, waited for (the legacy synchronous calls)."""
        remaining = max(0.001, deadline - time.monotonic())
        try:
            reply = self._rt.request("main", Op(op_type, aops.request_payload(calls, int(remaining * 1000))),
                                     timeout=remaining + 2.0)
        except ActorError as exc:
            raise res.exception(KafkaError._TIMED_OUT, f"Failed to list groups: {exc}") from None
        return list((reply.payload or {}).get("results") or ())
