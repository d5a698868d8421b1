"""The legacy list_groups() results: GroupMetadata and GroupMember (list_topics()' ClusterMetadata and the
rest are the client handle's, kqactors.client.handle.metadata, re-exported by kqactors.admin).

Runs in: the app process.
"""

from __future__ import annotations

from typing import Any


class GroupMember:
    """A member of a group, as the broker describes it (metadata and assignment as raw bytes)."""

    def __init__(self) -> None:
        self.id: str | None = None
        self.client_id: str | None = None
        self.client_host: str | None = None
        self.metadata: bytes | None = None
        self.assignment: bytes | None = None


class GroupMetadata:
    """A group as list_groups() reports it: its coordinator ``broker`` (BrokerMetadata), ``id``, ``error``,
    ``state``, ``protocol_type``, ``protocol`` and ``members``."""

    def __init__(self) -> None:
        self.broker: Any = None
        self.id: str | None = None
        self.error: Any = None
        self.state: str | None = None
        self.protocol_type: str | None = None
        self.protocol: str | None = None
        self.members: list[GroupMember] = []

    def __repr__(self) -> str:
        if self.error is not None:
            return f"GroupMetadata({self.id}, {self.error})"
        return f"GroupMetadata({self.id})"

    def __str__(self) -> str:
        return str(self.id)
