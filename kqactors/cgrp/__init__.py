"""Runs in: the main host. The consumer group: pure, event-driven state machines whose outputs are actions
the cgrp actor executes — ``GroupStateMachine`` (classic protocol) and ``ConsumerProtocolMachine`` (KIP-848,
group.protocol=consumer) — the assignors (range, roundrobin, cooperative-sticky), the consumer-protocol member
metadata and offset bookkeeping.
"""

from kqactors.cgrp.actions import (
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
from kqactors.cgrp.assignors import MemberSubscription, assignor_for
from kqactors.cgrp.consumer_protocol import ConsumerProtocolMachine
from kqactors.cgrp.machine import GroupStateMachine
from kqactors.cgrp.settings import GroupSettings
from kqactors.cgrp.states import CoordState, JoinState

__all__ = [
    "ASSIGN", "LOST", "REVOKE", "Action", "Closed", "CommitResult", "CoordinatorChanged", "RebalanceCallback",
    "RequestMetadata", "SendRequest", "StartFetching", "StopFetching", "SurfaceError", "MemberSubscription",
    "assignor_for", "GroupStateMachine", "ConsumerProtocolMachine", "GroupSettings", "CoordState", "JoinState",
]
