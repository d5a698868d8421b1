"""Runs in: the main host. The consumer group: pure, event-driven state machines whose outputs are actions
the cgrp actor executes — ``GroupStateMachine`` (classic protocol) and ``ConsumerProtocolMachine`` (KIP-848,
group.protocol=consumer) — the assignors (range, roundrobin, cooperative-sticky), the consumer-protocol member
metadata and offset bookkeeping.
"""

from kqactors.core.group.actions import (
    ASSIGN,
    LOST,
    REVOKE,
    Action,
    Closed,
    CommitResult,
    CoordinatorChanged,
    RebalanceCallback,
    RequestMetadata,
    SendRequest,
    StartFetching,
    StopFetching,
    SurfaceError,
)
from kqactors.core.group.assignors import MemberSubscription, assignor_for
from kqactors.core.group.consumer_protocol import ConsumerProtocolMachine
from kqactors.core.group.machine import GroupStateMachine
from kqactors.core.group.settings import GroupSettings
from kqactors.core.group.states import CoordState, JoinState

__all__ = [
    "ASSIGN", "LOST", "REVOKE", "Action", "Closed", "CommitResult", "CoordinatorChanged", "RebalanceCallback",
    "RequestMetadata", "SendRequest", "StartFetching", "StopFetching", "SurfaceError", "MemberSubscription",
    "assignor_for", "GroupStateMachine", "ConsumerProtocolMachine", "GroupSettings", "CoordState", "JoinState",
]
