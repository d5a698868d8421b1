"""Offset look-ups for the Consumer facade: watermarks and offsets_for_times.

Runs in: the app process (blocking calls made by the application thread). Owns finding each partition's
leader (from the client handle's metadata, the last answer cached between calls, list_topics' too) and
sending ListOffsets REQUESTs straight to the leaders' broker actors, with one deadline for the whole call
and clear KafkaExceptions for every failure. The request kind travels by name ("ListOffsets", one of the
kinds in kqactors.protocol.requests that broker actors serve): the app imports no protocol or actor code.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from kqactors.client.handle import ClientHandle, ClusterMetadata
from kqactors.errors import KafkaError, KafkaException
from kqactors.ops import client as ops
from kqactors.ops.client import runtime_failure_code
from kqactors.runtime.op import ActorError, Op

__all__ = ["OffsetLookup", "EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP"]

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
_RETRIABLE = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.UNKNOWN_TOPIC_OR_PART,
              KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError.FENCED_LEADER_EPOCH, KafkaError.UNKNOWN_LEADER_EPOCH,
              KafkaError.OFFSET_NOT_AVAILABLE, KafkaError._DESTROY}


class OffsetLookup:
    """Blocking ListOffsets calls through the consumer's client handle (metadata) and runtime (requests).

    Leaders come from the last metadata this lookup saw while it holds every topic asked about; a leader
    or transport error (or a missing topic) fetches fresh metadata for the retry. The ListOffsets requests
    of one call (one per leader, two for a watermark pair: a request names a partition once) go out
    together, so the call waits for the slowest of them, not their sum: a broker answers a connection's
    requests in order, so each may wait behind that connection's held Fetch (fetch.wait.max.ms).
    """

    def __init__(self, handle: ClientHandle, read_committed: bool, default_timeout_s: float) -> None:
        assert handle.rt is not None, "the client handle was not started"
        self._handle = handle
        self._rt = handle.rt
        self._read_committed = read_committed
        self.default_timeout_s = default_timeout_s
        self._cluster: ClusterMetadata | None = None
        handle.on_metadata(self._remember)

    def _remember(self, cluster: ClusterMetadata) -> None:
        self._cluster = cluster

    def metadata(self, topics: list[str] | None, timeout: float) -> ClusterMetadata:
        return self._handle.metadata(topics, timeout, allow_auto_create=False)

    def _leaders_of(self, topics: list[str], fresh: bool, timeout: float) -> ClusterMetadata:
        cached = self._cluster
        if not fresh and cached is not None and all(
                t in cached.topics and cached.topics[t].error is None for t in topics):
            return cached
        return self.metadata(topics, timeout)

    def list_offsets(self, rows: Iterable[tuple[str, int, int]], timeout: float
                     ) -> dict[tuple[str, int], tuple[int, int]]:
        """{(topic, partition): (error code, offset)} for (topic, partition, timestamp) rows; retries leader
        and transport errors until ``timeout``."""
        found = self._lookup(list(rows), timeout)
        return {(topic, partition): answer for (topic, partition, _ts), answer in found.items()}

    def _lookup(self, rows: list[tuple[str, int, int]], timeout: float
                ) -> dict[tuple[str, int, int], tuple[int, int]]:
        """{(topic, partition, timestamp): (error code, offset)}; a partition may appear with several
        timestamps."""
        deadline = time.monotonic() + timeout
        results: dict[tuple[str, int, int], tuple[int, int]] = {}
        pending = set(rows)
        fresh = False
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                for row in pending:
                    results.setdefault(row, (KafkaError._TIMED_OUT, -1))
                break
            cluster = self._leaders_of(sorted({t for t, _, _ in pending}), fresh, remaining)
            by_leader: dict[int, list[tuple[str, int, int]]] = {}
            for row in sorted(pending):
                topic, partition, _ts = row
                meta = cluster.topics.get(topic)
                if meta is None or meta.error is not None:
                    code = meta.error.code() if meta is not None and meta.error is not None else KafkaError._UNKNOWN_TOPIC
                    results[row] = (code, -1)
                    continue
                part = meta.partitions.get(partition)
                if part is None:
                    results[row] = (KafkaError._UNKNOWN_PARTITION, -1)
                    continue
                by_leader.setdefault(part.leader, []).append(row)
            for row in [r for r in pending if r in results and results[r][0] not in _RETRIABLE]:
                pending.discard(row)
            for row, answer in self._ask_leaders(by_leader, deadline).items():
                results[row] = answer
                if answer[0] not in _RETRIABLE:
                    pending.discard(row)
            if pending:
                fresh = True  # the cached leaders may be stale: ask the cluster for the retry
                time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
        return results

    def _ask_leaders(self, by_leader: dict[int, list[tuple[str, int, int]]], deadline: float
                     ) -> dict[tuple[str, int, int], tuple[int, int]]:
        """Send every ListOffsets request at once, then collect the answers."""
        out: dict[tuple[str, int, int], tuple[int, int]] = {}
        queue = self._rt.new_queue()
        sent: dict[int, list[tuple[str, int, int]]] = {}
        for leader, rows in by_leader.items():
            if leader < 0:
                out.update({row: (KafkaError.LEADER_NOT_AVAILABLE, -1) for row in rows})
                continue
            for request_rows in _unique_partitions(rows):
                remaining = max(0.05, deadline - time.monotonic())
                try:
                    req_id = self._rt.request_async(ops.broker_name(leader), self._request(request_rows, remaining),
                                                    queue, remaining + 0.5)
                except ActorError:
                    out.update({row: (KafkaError._TRANSPORT, -1) for row in request_rows})
                    continue
                sent[req_id] = request_rows
        while sent:
            reply = queue.poll(max(0.0, deadline - time.monotonic()) + 1.0)
            if reply is None:  # the runtime's own deadline answers first; this is a safety net
                for request_rows in sent.values():
                    out.update({row: (KafkaError._TIMED_OUT, -1) for row in request_rows})
                break
            request_rows = sent.pop(reply.req_id, None)
            if request_rows is not None:
                out.update(self._answers(request_rows, reply))
        return out

    def _request(self, rows: list[tuple[str, int, int]], remaining: float) -> Op:
        by_topic: dict[str, list[list[int]]] = {}
        for topic, partition, timestamp in rows:
            by_topic.setdefault(topic, []).append([partition, timestamp, -1])
        args: dict[str, Any] = {"isolation_level": 1 if self._read_committed else 0,
                                "topics": [[t, p] for t, p in by_topic.items()]}
        return Op(ops.REQUEST, {"kind": "ListOffsets", "args": args, "timeout_ms": int(remaining * 1000)})

    @staticmethod
    def _answers(rows: list[tuple[str, int, int]], reply: Op) -> dict[tuple[str, int, int], tuple[int, int]]:
        if reply.error is not None:
            code = runtime_failure_code(reply.error.code)
            return {row: (code, -1) for row in rows}
        payload = reply.payload or {}
        code = int(payload.get("error_code", 0))
        if code:
            return {row: (code, -1) for row in rows}
        by_partition = {row[:2]: row for row in rows}
        out = {row: (KafkaError._UNKNOWN_PARTITION, -1) for row in rows}
        for topic, partition, error_code, offset, _ts, _epoch in (payload.get("result") or {}).get("partitions", []):
            row = by_partition.get((topic, partition))
            if row is not None:
                out[row] = (error_code, offset)
        return out

    def watermarks(self, topic: str, partition: int, timeout: float) -> tuple[int, int]:
        """(low, high) watermark of one partition, fresh from its leader (both asked at once)."""
        low_row, high_row = (topic, partition, EARLIEST_TIMESTAMP), (topic, partition, LATEST_TIMESTAMP)
        results = self._lookup([low_row, high_row], timeout)
        for row in (low_row, high_row):
            code = results[row][0]
            if code:
                raise KafkaException(KafkaError(code, f"get_watermark_offsets({topic} [{partition}]) failed"))
        return results[low_row][1], results[high_row][1]


def _unique_partitions(rows: list[tuple[str, int, int]]) -> list[list[tuple[str, int, int]]]:
    """Split rows into requests that name each partition once (a broker rejects a repeated partition)."""
    requests: list[list[tuple[str, int, int]]] = []
    seen: list[set[tuple[str, int]]] = []
    for row in rows:
        key = row[:2]
        for index, keys in enumerate(seen):
            if key not in keys:
                keys.add(key)
                requests[index].append(row)
                break
        else:
            seen.append({key})
            requests.append([row])
    return requests
