"""Runs in: the main host (built from the consumer's validated config when the cgrp is created). Owns the
consumer-group properties the state machines need, their librdkafka defaults, and the checks librdkafka
makes on them (a group.id, one rebalance protocol across the configured assignors; like librdkafka, not
heartbeat.interval.ms against session.timeout.ms, which the broker checks), and which group protocol runs (classic, or KIP-848 with its server-side assignor).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kqactors.core.group.assignors import Assignor, assignor_for
from kqactors.errors import KafkaError, KafkaException

__all__ = ["GroupSettings"]


def _invalid(reason: str) -> KafkaException:
    return KafkaException(KafkaError(KafkaError._INVALID_ARG, reason))


@dataclass(frozen=True)
class GroupSettings:
    """Consumer-group settings; times in milliseconds, defaults as librdkafka's."""

    group_id: str
    group_instance_id: str | None = None
    assignment_strategies: tuple[str, ...] = ("range", "roundrobin")
    session_timeout_ms: int = 45000
    heartbeat_interval_ms: int = 3000
    max_poll_interval_ms: int = 300000
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5000
    enable_auto_offset_store: bool = True
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1000
    client_rack: str | None = None
    group_protocol: str = "classic"
    remote_assignor: str | None = None
    coordinator_query_interval_ms: int = 600000

    def __post_init__(self) -> None:
        if not self.group_id:
            raise _invalid("group.id must be set to use the consumer group")
        if not self.assignment_strategies:
            raise _invalid("partition.assignment.strategy must name at least one assignor")
        if self.group_protocol not in ("classic", "consumer"):
            raise _invalid(f"group.protocol must be classic or consumer, not {self.group_protocol!r}")
        try:
            assignors = self.assignors()
        except ValueError as exc:
            raise _invalid(str(exc)) from None
        if len({a.rebalance_protocol for a in assignors}) > 1:
            raise _invalid("partition.assignment.strategy cannot mix eager and cooperative assignors")
        for name in ("session_timeout_ms", "heartbeat_interval_ms", "max_poll_interval_ms",
                     "retry_backoff_ms", "retry_backoff_max_ms", "coordinator_query_interval_ms"):
            if getattr(self, name) <= 0:
                raise _invalid(f"{name.replace('_', '.')} must be positive")

    def assignors(self) -> list[Assignor]:
        return [assignor_for(name) for name in self.assignment_strategies]

    @property
    def rebalance_protocol(self) -> str:
        return self.assignors()[0].rebalance_protocol

    @property
    def consumer_protocol(self) -> bool:
        """KIP-848 (group.protocol=consumer): the broker assigns, membership rides on heartbeats."""
        return self.group_protocol == "consumer"

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> GroupSettings:
        """Build from librdkafka property names (a kqactors Config or a plain dict)."""
        strategies = config.get("partition.assignment.strategy", ["range", "roundrobin"])
        if isinstance(strategies, str):
            strategies = [s for s in (part.strip() for part in strategies.split(",")) if s]
        rack = config.get("client.rack") or None
        return cls(
            group_id=config.get("group.id", "") or "",
            group_instance_id=config.get("group.instance.id") or None,
            assignment_strategies=tuple(strategies),
            session_timeout_ms=int(config.get("session.timeout.ms", 45000)),
            heartbeat_interval_ms=int(config.get("heartbeat.interval.ms", 3000)),
            max_poll_interval_ms=int(config.get("max.poll.interval.ms", 300000)),
            enable_auto_commit=bool(config.get("enable.auto.commit", True)),
            auto_commit_interval_ms=int(config.get("auto.commit.interval.ms", 5000)),
            enable_auto_offset_store=bool(config.get("enable.auto.offset.store", True)),
            retry_backoff_ms=int(config.get("retry.backoff.ms", 100)),
            retry_backoff_max_ms=int(config.get("retry.backoff.max.ms", 1000)),
            client_rack=rack,
            group_protocol=str(config.get("group.protocol", "classic") or "classic"),
            remote_assignor=config.get("group.remote.assignor") or None,
            coordinator_query_interval_ms=int(config.get("coordinator.query.interval.ms", 600000) or 600000),
        )
