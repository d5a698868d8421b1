"""Offset look-ups for the Consumer facade: watermarks, offsets_for_times and cluster metadata.

Runs in: the app process (blocking calls made by the application thread). Owns asking ``main`` for metadata
(to find each partition's leader) and sending ListOffsets REQUESTs straight to the leaders' broker actors
(the ``ListOffsets`` request kind is registered by ``kqactors.actors.fetcher``), with one deadline for the
whole call and clear KafkaExceptions for every failure.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from kqactors.actors import ops
from kqactors.errors import ERROR_CODES, KafkaError, KafkaException
from kqactors.producer_metadata import ClusterMetadata, request_metadata
from kqactors.runtime.op import ActorError, Op
from kqactors.runtime.runtime import Runtime

__all__ = ["OffsetLookup", "EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP"]

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
E = ERROR_CODES
_RETRIABLE = {E["NOT_LEADER_FOR_PARTITION"], E["LEADER_NOT_AVAILABLE"], E["UNKNOWN_TOPIC_OR_PART"],
              E["_TRANSPORT"], E["_TIMED_OUT"], E["FENCED_LEADER_EPOCH"], E["UNKNOWN_LEADER_EPOCH"],
              E["OFFSET_NOT_AVAILABLE"], E["_DESTROY"]}


class OffsetLookup:
    """Blocking metadata and ListOffsets calls through the consumer's runtime."""

    def __init__(self, runtime: Runtime, read_committed: bool, default_timeout_s: float) -> None:
        self._rt = runtime
        self._read_committed = read_committed
        self.default_timeout_s = default_timeout_s

    def metadata(self, topics: list[str] | None, timeout: float) -> ClusterMetadata:
        return request_metadata(self._rt, topics, timeout, allow_auto_create=False)

    def list_offsets(self, rows: Iterable[tuple[str, int, int]], timeout: float
                     ) -> dict[tuple[str, int], tuple[int, int]]:
        """{(topic, partition): (error code, offset)} for (topic, partition, timestamp) rows; retries leader
        and transport errors until ``timeout``."""
        wanted = {(topic, partition): timestamp for topic, partition, timestamp in rows}
        deadline = time.monotonic() + timeout
        results: dict[tuple[str, int], tuple[int, int]] = {}
        pending = dict(wanted)
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                for key in pending:
                    results.setdefault(key, (E["_TIMED_OUT"], -1))
                break
            cluster = self.metadata(sorted({t for t, _ in pending}), remaining)
            by_leader: dict[int, list[tuple[str, int, int]]] = {}
            for (topic, partition), timestamp in pending.items():
                meta = cluster.topics.get(topic)
                if meta is None or meta.error is not None:
                    code = meta.error.code() if meta is not None and meta.error is not None else E["_UNKNOWN_TOPIC"]
                    results[(topic, partition)] = (code, -1)
                    continue
                part = meta.partitions.get(partition)
                if part is None:
                    results[(topic, partition)] = (E["_UNKNOWN_PARTITION"], -1)
                    continue
                by_leader.setdefault(part.leader, []).append((topic, partition, timestamp))
            for key in [k for k in pending if k in results and results[k][0] not in _RETRIABLE]:
                pending.pop(key)
            for leader, leader_rows in by_leader.items():
                answers = self._ask_leader(leader, leader_rows, deadline)
                for key, (code, offset) in answers.items():
                    results[key] = (code, offset)
                    if code not in _RETRIABLE:
                        pending.pop(key, None)
            if pending:
                time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
        return results

    def _ask_leader(self, leader: int, rows: list[tuple[str, int, int]], deadline: float
                    ) -> dict[tuple[str, int], tuple[int, int]]:
        keys = [(t, p) for t, p, _ in rows]
        if leader < 0:
            return {key: (E["LEADER_NOT_AVAILABLE"], -1) for key in keys}
        remaining = max(0.05, deadline - time.monotonic())
        by_topic: dict[str, list[list[int]]] = {}
        for topic, partition, timestamp in rows:
            by_topic.setdefault(topic, []).append([partition, timestamp, -1])
        args: dict[str, Any] = {"isolation_level": 1 if self._read_committed else 0,
                                "topics": [[t, p] for t, p in by_topic.items()]}
        request = Op(ops.REQUEST, {"kind": "ListOffsets", "args": args, "timeout_ms": int(remaining * 1000)})
        try:
            reply = self._rt.request(ops.broker_name(leader), request, timeout=remaining + 0.5)
        except ActorError as exc:
            code = E["_TIMED_OUT"] if exc.code == "TIMED_OUT" else E["_TRANSPORT"]
            return {key: (code, -1) for key in keys}
        payload = reply.payload or {}
        code = int(payload.get("error_code", 0))
        if code:
            return {key: (code, -1) for key in keys}
        out = {key: (E["_UNKNOWN_PARTITION"], -1) for key in keys}
        for topic, partition, error_code, offset, _ts, _epoch in (payload.get("result") or {}).get("partitions", []):
            out[(topic, partition)] = (error_code, offset)
        return out

    def watermarks(self, topic: str, partition: int, timeout: float) -> tuple[int, int]:
        """(low, high) watermark of one partition, fresh from its leader."""
        results = self.list_offsets([(topic, partition, EARLIEST_TIMESTAMP)], timeout)
        low_code, low = results[(topic, partition)]
        if low_code:
            raise KafkaException(KafkaError(low_code, f"get_watermark_offsets({topic} [{partition}]) failed"))
        results = self.list_offsets([(topic, partition, LATEST_TIMESTAMP)], timeout)
        high_code, high = results[(topic, partition)]
        if high_code:
            raise KafkaException(KafkaError(high_code, f"get_watermark_offsets({topic} [{partition}]) failed"))
        return low, high
