"""Runs in: the main host (counters of broker connections, the snapshot's assembly) and the app (the fields
only the app knows, then ``stats_cb``). Owns the statistics JSON that ``statistics.interval.ms`` emits, in
librdkafka's layout (STATISTICS.md): the same field names and units, so dashboards and exporters written for
confluent-kafka read it unchanged.

Fields kqactors does not track are left out rather than filled with made-up zeros; which ones are emitted
is listed in docs/statistics.md.
"""

from __future__ import annotations

import itertools
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_PERCENTILES = (("p50", 50.0), ("p75", 75.0), ("p90", 90.0), ("p95", 95.0), ("p99", 99.0), ("p99_99", 99.99))
WINDOW_MAX_SAMPLES = 100_000  # a window keeps at most this many samples per interval (librdkafka: 10 s of µs)


def monotonic_us() -> int:
    return time.monotonic_ns() // 1000


class LatencyWindow:
    """librdkafka's "window stats": values sampled since the last snapshot, summarised and then reset.

    A window nobody snapshots (statistics.interval.ms=0) is turned off with ``enabled = False``: it would
    otherwise fill up to WINDOW_MAX_SAMPLES ints (~4 MB) and keep them for the connection's life."""

    __slots__ = ("_samples", "_out_of_range", "enabled")

    def __init__(self, enabled: bool = True) -> None:
        self._samples: list[int] = []
        self._out_of_range = 0
        self.enabled = enabled

    def add(self, value: int) -> None:
        if not self.enabled:
            return
        if len(self._samples) < WINDOW_MAX_SAMPLES:
            self._samples.append(value)
        else:
            self._out_of_range += 1

    def snapshot(self) -> dict[str, int]:
        """The summary of this interval's samples (all zeros for none); the window starts again empty."""
        samples, self._samples = sorted(self._samples), []
        out_of_range, self._out_of_range = self._out_of_range, 0
        count = len(samples)
        summary = {"min": 0, "max": 0, "avg": 0, "sum": 0, "stddev": 0, "cnt": count,
                   "hdrsize": 0, "outofrange": out_of_range}
        summary.update({name: 0 for name, _ in _PERCENTILES})
        if not count:
            return summary
        total = sum(samples)
        mean = total / count
        summary.update(min=samples[0], max=samples[-1], avg=int(mean), sum=total,
                       stddev=int(math.sqrt(sum((v - mean) ** 2 for v in samples) / count)))
        for name, pct in _PERCENTILES:
            summary[name] = samples[min(count - 1, max(0, math.ceil(pct / 100 * count) - 1))]
        return summary


@dataclass
class ConnectionCounters:
    """What one broker connection counts, as librdkafka's broker stats name it."""

    tx: int = 0
    txbytes: int = 0
    txerrs: int = 0
    req_timeouts: int = 0
    rx: int = 0
    rxbytes: int = 0
    rxerrs: int = 0
    rxcorriderrs: int = 0
    connects: int = 0
    disconnects: int = 0
    last_tx_us: int = -1
    last_rx_us: int = -1
    req: dict[str, int] = field(default_factory=dict)
    rtt: LatencyWindow = field(default_factory=LatencyWindow)

    def sent(self, api: str, nbytes: int, now_us: int) -> None:
        self.tx += 1
        self.txbytes += nbytes
        self.last_tx_us = now_us
        self.req[api] = self.req.get(api, 0) + 1

    def received(self, nbytes: int, rtt_us: int, now_us: int) -> None:
        self.rx += 1
        self.rxbytes += nbytes
        self.last_rx_us = now_us
        self.rtt.add(rtt_us)


def broker_stats(name: str, node_id: int, nodename: str, source: str, state: str, state_since_us: int,
                 counters: ConnectionCounters, outbuf_cnt: int, waitresp_cnt: int,
                 partitions: list[tuple[str, int]], now_us: int) -> dict[str, Any]:
    """One entry of ``brokers`` (its windows are reset by this snapshot)."""
    c = counters
    return {
        "name": name, "nodeid": node_id, "nodename": nodename, "source": source, "state": state,
        "stateage": max(0, now_us - state_since_us), "outbuf_cnt": outbuf_cnt, "waitresp_cnt": waitresp_cnt,
        "tx": c.tx, "txbytes": c.txbytes, "txerrs": c.txerrs, "req_timeouts": c.req_timeouts,
        "txidle": -1 if c.last_tx_us < 0 else now_us - c.last_tx_us,
        "rx": c.rx, "rxbytes": c.rxbytes, "rxerrs": c.rxerrs, "rxcorriderrs": c.rxcorriderrs,
        "rxidle": -1 if c.last_rx_us < 0 else now_us - c.last_rx_us,
        "connects": c.connects, "disconnects": c.disconnects, "req": dict(c.req),
        "rtt": c.rtt.snapshot(),
        "toppars": {f"{topic}-{partition}": {"topic": topic, "partition": partition}
                    for topic, partition in sorted(partitions)},
    }


def assemble(kind: str, name: str, client_id: str, created_us: int, brokers: list[dict[str, Any]],
             partitions: list[dict[str, Any]], metadata_topics: int, now_us: int) -> dict[str, Any]:
    """The snapshot as the main host sees it: brokers, topics with their partitions, and the totals over
    them. The app adds what only it knows (see ``complete_in_app``) before handing it to ``stats_cb``."""
    topics: dict[str, dict[str, Any]] = {}
    for part in sorted(partitions, key=lambda p: (p["topic"], p["partition"])):
        name = part["topic"]
        topic = topics.setdefault(name, {"topic": name, "partitions": {}})
        topic["partitions"][str(part["partition"])] = {k: v for k, v in part.items() if k != "topic"}
    totals = {key: sum(b[src] for b in brokers) for key, src in
              (("tx", "tx"), ("tx_bytes", "txbytes"), ("rx", "rx"), ("rx_bytes", "rxbytes"))}
    for key, src in (("txmsgs", "txmsgs"), ("txmsg_bytes", "txbytes"), ("rxmsgs", "rxmsgs"),
                     ("rxmsg_bytes", "rxbytes")):
        totals[key] = sum(p.get(src, 0) for p in partitions)
    return {
        "name": name, "client_id": client_id, "type": kind, "ts": now_us, "time": int(time.time()),
        "age": max(0, now_us - created_us), "metadata_cache_cnt": metadata_topics, **totals,
        "brokers": {b["name"]: b for b in brokers}, "topics": topics,
    }


def complete_in_app(stats: dict[str, Any], app_fields: dict[str, Any],
                    partition_fields: dict[tuple[str, int], dict[str, Any]]) -> dict[str, Any]:
    """Merge the app's own fields (queue gauges, positions, committed offsets, group state) into a snapshot
    from the main host, and derive consumer lag where both ends are known."""
    stats.update(app_fields)
    for (topic, partition), extra in partition_fields.items():
        part = stats.get("topics", {}).get(topic, {}).get("partitions", {}).get(str(partition))
        if part is None:
            continue
        part.update(extra)
        end = part.get("ls_offset", -1) if part.get("_read_committed") else part.get("hi_offset", -1)
        for lag_key, from_key in (("consumer_lag", "committed_offset"), ("consumer_lag_stored", "stored_offset")):
            start = part.get(from_key, -1)
            part[lag_key] = max(0, end - start) if end >= 0 and start >= 0 else -1
    for topic in stats.get("topics", {}).values():
        for part in topic["partitions"].values():
            part.pop("_read_committed", None)
    return stats


_instances = itertools.count(1)  # librdkafka numbers its handles in one sequence per process


def next_client_number() -> int:
    """The next client handle number of this process (``rdkafka#producer-<n>``: one sequence for every kind)."""
    return next(_instances)


class StatsEmitter:
    """The app's end: names this client as librdkafka would (``rdkafka#producer-1``), merges the app's
    fields into each snapshot from main and calls ``stats_cb`` with the JSON text."""

    def __init__(self, callback: Callable[[str], Any], kind: str, client_id: str, number: int) -> None:
        self.callback = callback
        self.name = f"{client_id}#{kind}-{number}"

    @classmethod
    def from_config(cls, callback: Callable[[str], Any] | None, kind: str, interval_ms: int,
                    client_id: str, number: int | None = None) -> StatsEmitter | None:
        """Called once per client, so every client takes its handle number (unless ``number`` says which it
        took: ``next_client_number``); None unless both a callback and an interval are set (then main
        collects nothing)."""
        if number is None:
            number = next(_instances)
        if callback is None or interval_ms <= 0:
            return None
        return cls(callback, kind, client_id, number)

    def deliver(self, snapshot: Any, app_fields: dict[str, Any],
                partition_fields: dict[tuple[str, int], dict[str, Any]] | None = None) -> None:
        if not isinstance(snapshot, dict):
            return
        stats = complete_in_app(snapshot, {"name": self.name, **app_fields}, partition_fields or {})
        self.callback(json.dumps(stats))
