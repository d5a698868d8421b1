"""Consumer group results: listings (list_consumer_groups) and descriptions (describe_consumer_groups).

Runs in: the app process.
"""

from __future__ import annotations

from typing import Any

from kqactors._model import ConsumerGroupState, ConsumerGroupType, Node
from kqactors.admin._acl import AclOperation
from kqactors.admin._util import to_enum
from kqactors.message import TopicPartition


def _operations(operations: list[Any] | None) -> list[AclOperation] | None:
    return [to_enum(op, AclOperation) for op in operations] if operations else None


class ConsumerGroupListing:
    """One group of list_consumer_groups(): ``group_id``, ``is_simple_consumer_group`` (no protocol type),
    ``state`` and ``type`` (set when known)."""

    def __init__(self, group_id: str, is_simple_consumer_group: bool,
                 state: ConsumerGroupState | str | int | None = None,
                 type: ConsumerGroupType | str | int | None = None) -> None:  # noqa: A002
        self.group_id = group_id
        self.is_simple_consumer_group = is_simple_consumer_group
        if state is not None:
            self.state = to_enum(state, ConsumerGroupState)
        if type is not None:
            self.type = to_enum(type, ConsumerGroupType)


class ListConsumerGroupsResult:
    """list_consumer_groups()'s result: the groups found (``valid``) and the brokers' errors (``errors``,
    KafkaExceptions)."""

    def __init__(self, valid: list[ConsumerGroupListing] | None = None, errors: list[Exception] | None = None
                 ) -> None:
        self.valid = valid
        self.errors = errors


class MemberAssignment:
    """The partitions assigned to a group member."""

    def __init__(self, topic_partitions: list[TopicPartition] | None) -> None:
        self.topic_partitions = topic_partitions or []


class MemberDescription:
    """A group member: ids, host, its assignment (and for consumer-protocol groups its target assignment)."""

    def __init__(self, member_id: str, client_id: str, host: str, assignment: MemberAssignment,
                 group_instance_id: str | None = None, target_assignment: MemberAssignment | None = None) -> None:
        self.member_id = member_id
        self.client_id = client_id
        self.host = host
        self.assignment = assignment
        self.target_assignment = target_assignment
        self.group_instance_id = group_instance_id


class ConsumerGroupDescription:
    """describe_consumer_groups()'s result for one group."""

    def __init__(self, group_id: str, is_simple_consumer_group: bool, members: list[MemberDescription],
                 partition_assignor: str, state: ConsumerGroupState | str | int | None, coordinator: Node,
                 authorized_operations: list[AclOperation | str | int] | None = None,
                 type: ConsumerGroupType | str | int = ConsumerGroupType.UNKNOWN) -> None:  # noqa: A002
        self.group_id = group_id
        self.is_simple_consumer_group = is_simple_consumer_group
        self.members = members
        self.authorized_operations = _operations(authorized_operations)
        self.partition_assignor = partition_assignor
        if state is not None:
            self.state = to_enum(state, ConsumerGroupState)
        if type is not None:
            self.type = to_enum(type, ConsumerGroupType)
        self.coordinator = coordinator
