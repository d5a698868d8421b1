"""Test driver for GroupStateMachine: a fake clock, action collection and builders for the coordinator's
responses (generated protocol response classes, as the cgrp actor would decode them)."""

from __future__ import annotations

from kqactors.core.group.actions import SendRequest
from kqactors.core.group.machine import GroupStateMachine
from kqactors.core.group.member_metadata import encode_assignment, encode_subscription
from kqactors.core.group.settings import GroupSettings
from kqactors.errors import KafkaError
from kqactors.protocol.generated.find_coordinator import FindCoordinatorResponse
from kqactors.protocol.generated.heartbeat import HeartbeatResponse
from kqactors.protocol.generated.join_group import JoinGroupResponse, JoinGroupResponseMember
from kqactors.protocol.generated.leave_group import LeaveGroupResponse
from kqactors.protocol.generated.offset_commit import (
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)
from kqactors.protocol.generated.offset_fetch import (
    OffsetFetchResponse,
    OffsetFetchResponsePartition,
    OffsetFetchResponseTopic,
)
from kqactors.protocol.generated.sync_group import SyncGroupResponse


class Harness:
    def __init__(self, machine=GroupStateMachine, machine_args=None, **settings):
        settings.setdefault("group_id", "g")
        self.settings = GroupSettings(**settings)
        self.now = 0.0
        self.sm = machine(self.settings, self.now, **(machine_args or {}))
        self.actions: list = []

    # -- driving ------------------------------------------------------------------------------------
    def feed(self, actions):
        self.actions.extend(actions)
        return actions

    def call(self, method, *args, **kwargs):
        return self.feed(getattr(self.sm, method)(*args, now=self.now, **kwargs))

    def advance(self, ms):
        self.now += ms
        return self.feed(self.sm.tick(self.now))

    def respond(self, request, reply):
        return self.feed(self.sm.handle_response(request.request_id, reply, self.now))

    # -- inspecting ---------------------------------------------------------------------------------
    def take(self, kind, api=None):
        """Remove and return the collected actions of this type (and api for SendRequest)."""
        found = [a for a in self.actions if isinstance(a, kind) and (api is None or a.api == api)]
        self.actions = [a for a in self.actions if a not in found]
        return found

    def one(self, kind, api=None):
        found = self.take(kind, api)
        assert len(found) == 1, f"expected one {kind.__name__} {api or ''}, got {found} (others: {self.actions})"
        return found[0]

    def request(self, api):
        return self.one(SendRequest, api)

    def none(self, kind, api=None):
        found = [a for a in self.actions if isinstance(a, kind) and (api is None or a.api == api)]
        assert not found, f"unexpected {found}"


def coordinator(node_id=1, error=0):
    return FindCoordinatorResponse(error_code=error, node_id=node_id, host="localhost", port=9092)


def join_ok(member_id, generation=1, leader=None, protocol="range", members=()):
    return JoinGroupResponse(error_code=0, generation_id=generation, protocol_name=protocol,
                             leader=leader or member_id, member_id=member_id,
                             members=[JoinGroupResponseMember(member_id=m, group_instance_id=i, metadata=md)
                                      for m, i, md in members])


def join_error(code, member_id=""):
    return JoinGroupResponse(error_code=code, member_id=member_id)


def member(member_id, topics, instance=None, owned=(), generation=-1):
    return (member_id, instance, encode_subscription(topics, owned, generation))


def sync_ok(partitions):
    return SyncGroupResponse(error_code=0, assignment=encode_assignment(partitions))


def sync_error(code):
    return SyncGroupResponse(error_code=code)


def heartbeat(code=0):
    return HeartbeatResponse(error_code=code)


def leave_ok():
    return LeaveGroupResponse(error_code=0)


def commit_reply(request, code=0):
    by_topic = {}
    for topic, partition, *_ in request.fields["offsets"]:
        by_topic.setdefault(topic, []).append(OffsetCommitResponsePartition(partition_index=partition,
                                                                            error_code=code))
    return OffsetCommitResponse(topics=[OffsetCommitResponseTopic(name=t, partitions=p) for t, p in by_topic.items()])


def fetch_reply(request, committed):
    by_topic = {}
    for topic, partition in request.fields["partitions"]:
        by_topic.setdefault(topic, []).append(OffsetFetchResponsePartition(
            partition_index=partition, committed_offset=committed.get((topic, partition), -1)))
    return OffsetFetchResponse(topics=[OffsetFetchResponseTopic(name=t, partitions=p) for t, p in by_topic.items()])


TRANSPORT_DOWN = KafkaError(KafkaError._TRANSPORT, "connection lost")
