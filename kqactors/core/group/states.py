"""Runs in: the main host. Owns the consumer-group state names (librdkafka's coordinator states and join
states), shared by the state machine's parts and reported to the app/statistics."""

from __future__ import annotations

from enum import Enum

__all__ = ["CoordState", "JoinState", "JOINING_STATES"]


class CoordState(Enum):
    INIT = "init"
    WAIT_COORD = "wait-coord"
    UP = "up"
    TERM = "term"


class JoinState(Enum):
    INIT = "init"
    WAIT_JOIN = "wait-join"
    WAIT_METADATA = "wait-metadata"
    WAIT_SYNC = "wait-sync"
    WAIT_UNASSIGN_CALL = "wait-unassign-call"
    WAIT_ASSIGN_CALL = "wait-assign-call"
    STEADY = "steady"


JOINING_STATES = (JoinState.WAIT_JOIN, JoinState.WAIT_METADATA, JoinState.WAIT_SYNC)
