"""Runs in: the main host, owned by the main actor. Gathers one statistics snapshot per
``statistics.interval.ms``: asks every broker actor and every partition actor for its part, assembles
librdkafka's layout (kqactors/core/stats.py) once all have answered or their requests timed out, and sends it to
the app, which adds its own fields and calls ``stats_cb`` from poll().
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from kqactors.core.stats import assemble, monotonic_us
from kqactors.ops import client as ops
from kqactors.runtime.actor import ActorContext
from kqactors.runtime.op import Op

ANSWER_TIMEOUT_MAX_S = 5.0  # a part that has not answered by then is left out of that snapshot


class StatsCollector:
    """One round at a time: a tick while a round is still open sends what that round has and starts anew."""

    def __init__(self, ctx: ActorContext, kind: str, client_id: str, interval_ms: int, app: str) -> None:
        self.ctx = ctx
        self.kind = kind
        self.client_id = client_id
        self.interval_s = interval_ms / 1000.0
        self.app = app
        self.created_us = monotonic_us()
        self._round = 0
        self._waiting: set[str] = set()
        self._parts: list[dict[str, Any]] = []
        self._metadata_topics = 0
        self._extra: dict[str, Any] = {}

    def tick(self, brokers: Iterable[str], partitions: Iterable[str], metadata_topics: int,
             extra: dict[str, Any] | None = None) -> None:
        """Start a round: every named actor is asked for its part; ``extra`` goes into the snapshot as is."""
        if self._waiting:
            self._emit()
        self._round += 1
        self._parts = []
        self._metadata_topics = metadata_topics
        self._extra = extra or {}
        names = [*brokers, *partitions]
        self._waiting = set(names)
        if not names:
            self._emit()
            return
        timeout = min(self.interval_s * 0.9, ANSWER_TIMEOUT_MAX_S)
        for name in names:
            self.ctx.request(name, Op(ops.STATS), self._on_part(self._round, name), timeout)

    def _on_part(self, round_id: int, name: str) -> Callable[[Op], None]:
        def on_reply(reply: Op) -> None:
            if round_id != self._round or name not in self._waiting:
                return  # a late answer to a round already sent
            self._waiting.discard(name)
            if reply.error is None and isinstance(reply.payload, dict):
                self._parts.append(reply.payload)
            if not self._waiting:
                self._emit()
        return on_reply

    def _emit(self) -> None:
        self._waiting = set()
        brokers = [p for p in self._parts if "nodeid" in p]
        partitions = [p for p in self._parts if "nodeid" not in p]
        snapshot = assemble(self.kind, "", self.client_id, self.created_us, brokers, partitions,
                            self._metadata_topics, monotonic_us())
        snapshot.update(self._extra)
        self.ctx.send(self.app, Op(ops.STATS, snapshot))
