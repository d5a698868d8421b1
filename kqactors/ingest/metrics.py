"""The daemon's numbers: per-source counters in the workers, their sum in the supervisor, and Prometheus.

Runs in: the worker processes (``SourceStats``, ``LatencyHistogram``, building snapshots) and the supervisor
(``MetricsBoard``: the latest snapshot of each worker plus what exited workers counted, so counters never go
back when a worker restarts; ``PrometheusCollector``: the board as Prometheus metric families, exported with
prometheus_client, which is imported only when a metrics port is asked for).

A worker counts in plain ints on its hot path and sends a JSON snapshot every ``metrics_interval_s`` and when it
exits; nothing here is per line except the counters' additions done by the emitter.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["LATENCY_BOUNDS", "LatencyHistogram", "SourceStats", "MetricsBoard", "PrometheusCollector",
           "RDKAFKA_FIELDS", "rdkafka_fields"]

#: Histogram bounds (seconds) of the delivery latency: a chunk's first produce() to its last delivery report.
LATENCY_BOUNDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

#: Top-level librdkafka statistics exported as gauges (statistics.interval.ms > 0): name → help.
RDKAFKA_FIELDS = {
    "msg_cnt": "Messages in the producer's queues",
    "msg_size": "Bytes of messages in the producer's queues",
    "tx": "Requests sent to brokers",
    "tx_bytes": "Bytes sent to brokers",
    "rx": "Responses received from brokers",
    "txmsgs": "Messages sent to brokers",
    "txmsg_bytes": "Message bytes sent to brokers",
}

COUNTERS = ("lines_in", "bytes_in", "lines_out", "bytes_out", "filtered", "no_key")
GAUGES = ("in_flight", "lag_bytes")


class LatencyHistogram:
    """Counts per bound (not cumulative; the last slot is +Inf), a sum and a count."""

    __slots__ = ("counts", "sum", "count")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BOUNDS) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(LATENCY_BOUNDS, seconds)] += 1
        self.sum += seconds
        self.count += 1

    def to_dict(self) -> dict[str, Any]:
        return {"counts": list(self.counts), "sum": self.sum, "count": self.count}


class SourceStats:
    """One source's counters in its worker (plain attributes: the emitter adds to them)."""

    __slots__ = (*COUNTERS, *GAUGES, "dropped", "errors", "latency")

    def __init__(self) -> None:
        for name in COUNTERS + GAUGES:
            setattr(self, name, 0)
        self.dropped: dict[str, int] = {}
        self.errors: dict[str, int] = {}
        self.latency = LatencyHistogram()

    def drop(self, reason: str, count: int = 1) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + count

    def error(self, kind: str, count: int = 1) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + count

    def snapshot(self) -> dict[str, Any]:
        out: dict[str, Any] = {name: getattr(self, name) for name in COUNTERS + GAUGES}
        out["dropped"] = dict(self.dropped)
        out["errors"] = dict(self.errors)
        out["latency"] = self.latency.to_dict()
        return out


def rdkafka_fields(stats: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a librdkafka statistics document the daemon exports."""
    out: dict[str, Any] = {name: stats[name] for name in RDKAFKA_FIELDS if isinstance(stats.get(name), (int, float))}
    rtts = {}
    for broker in (stats.get("brokers") or {}).values():
        rtt = (broker.get("rtt") or {}).get("avg") if isinstance(broker, Mapping) else None
        if isinstance(rtt, (int, float)) and broker.get("nodeid", -1) != -1:
            rtts[str(broker.get("name", broker.get("nodeid")))] = rtt / 1e6  # librdkafka reports microseconds
    out["broker_rtt_avg"] = rtts
    return out


# ---- supervisor side ---------------------------------------------------------------------------------------
def _add(into: dict[str, Any], snap: Mapping[str, Any]) -> None:
    for name in COUNTERS:
        into[name] = into.get(name, 0) + snap.get(name, 0)
    for key in ("dropped", "errors"):
        table = into.setdefault(key, {})
        for reason, count in snap.get(key, {}).items():
            table[reason] = table.get(reason, 0) + count
    lat = snap.get("latency")
    if lat:
        mine = into.setdefault("latency", {"counts": [0] * (len(LATENCY_BOUNDS) + 1), "sum": 0.0, "count": 0})
        mine["counts"] = [a + b for a, b in zip(mine["counts"], lat["counts"], strict=True)]
        mine["sum"] += lat["sum"]
        mine["count"] += lat["count"]


class MetricsBoard:
    """What the supervisor knows: each live worker's last snapshot and the totals of exited incarnations."""

    def __init__(self) -> None:
        self.live: dict[str, dict[str, Any]] = {}       # worker group → last snapshot
        self.base: dict[str, dict[str, Any]] = {}       # source → counters of exited workers
        self.restarts: dict[str, int] = {}
        self.up: dict[str, bool] = {}

    def update(self, group: str, snapshot: dict[str, Any]) -> None:
        self.live[group] = snapshot
        self.up[group] = True

    def worker_exited(self, group: str, restarting: bool) -> None:
        """Fold the worker's last counters into the base (they stay counted) and drop its gauges."""
        last = self.live.pop(group, None)
        if last:
            for source, snap in last.get("sources", {}).items():
                _add(self.base.setdefault(source, {}), snap)
        self.up[group] = False
        if restarting:
            self.restarts[group] = self.restarts.get(group, 0) + 1

    def forget_worker(self, group: str) -> None:
        self.up.pop(group, None)

    def sources(self) -> dict[str, dict[str, Any]]:
        """Per source: counters summed over incarnations, gauges of the live worker."""
        out: dict[str, dict[str, Any]] = {}
        for source, base in self.base.items():
            _add(out.setdefault(source, {}), base)
        for snap in self.live.values():
            for source, s in snap.get("sources", {}).items():
                mine = out.setdefault(source, {})
                _add(mine, s)
                for gauge in GAUGES:
                    mine[gauge] = mine.get(gauge, 0) + s.get(gauge, 0)
        return out

    def totals(self) -> dict[str, int]:
        total: dict[str, int] = {name: 0 for name in COUNTERS + GAUGES}
        total["dropped"] = total["errors"] = 0
        for s in self.sources().values():
            for name in COUNTERS + GAUGES:
                total[name] += s.get(name, 0)
            total["dropped"] += sum(s.get("dropped", {}).values())
            total["errors"] += sum(s.get("errors", {}).values())
        return total


class PrometheusCollector:
    """A prometheus_client collector reading a MetricsBoard at each scrape."""

    def __init__(self, board: MetricsBoard) -> None:
        self.board = board

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        p = "kqactors_ingest_"
        sources = self.board.sources()
        counters = {
            "lines_in": ("lines_read", "Lines read from the source"),
            "bytes_in": ("bytes_read", "Bytes of lines read from the source (newlines excluded)"),
            "lines_out": ("lines_delivered", "Lines whose delivery report said delivered"),
            "bytes_out": ("bytes_delivered", "Bytes of the messages delivered"),
            "filtered": ("lines_filtered", "Lines dropped by the source's transforms"),
            "no_key": ("lines_without_key", "Lines sent without a key (no JSON or no key_field)"),
        }
        for name, (metric, help_text) in counters.items():
            family = CounterMetricFamily(p + metric, help_text, labels=["source"])
            for source, s in sorted(sources.items()):
                family.add_metric([source], s.get(name, 0))
            yield family
        dropped = CounterMetricFamily(p + "lines_dropped", "Lines dropped: queue full (udp), rate limit (udp), "
                                      "rejected (http), delivery failures not retried, split lines",
                                      labels=["source", "reason"])
        errors = CounterMetricFamily(p + "errors", "Errors: delivery (retried), read, connection, request",
                                     labels=["source", "kind"])
        for source, s in sorted(sources.items()):
            for reason, count in sorted(s.get("dropped", {}).items()):
                dropped.add_metric([source, reason], count)
            for kind, count in sorted(s.get("errors", {}).items()):
                errors.add_metric([source, kind], count)
        yield dropped
        yield errors
        gauges = {"in_flight": ("lines_in_flight", "Lines produced whose delivery report is due"),
                  "lag_bytes": ("lag_bytes", "Bytes of the source's files past the checkpoint (not yet delivered)")}
        for name, (metric, help_text) in gauges.items():
            family = GaugeMetricFamily(p + metric, help_text, labels=["source"])
            for source, s in sorted(sources.items()):
                family.add_metric([source], s.get(name, 0))
            yield family
        latency = HistogramMetricFamily(p + "delivery_latency_seconds",
                                        "Per chunk of lines: first produce() to last delivery report",
                                        labels=["source"])
        for source, s in sorted(sources.items()):
            lat = s.get("latency")
            if not lat:
                continue
            cumulative, buckets = 0, []
            for bound, count in zip((*map(str, LATENCY_BOUNDS), "+Inf"), lat["counts"], strict=True):
                cumulative += count
                buckets.append((bound, cumulative))
            latency.add_metric([source], buckets, lat["sum"])
        yield latency
        yield from self._workers(GaugeMetricFamily, CounterMetricFamily)

    def _workers(self, gauge: Any, counter: Any) -> Iterator[Any]:
        p = "kqactors_ingest_"
        board = self.board
        up = gauge(p + "worker_up", "1 while the worker process runs", labels=["worker"])
        restarts = counter(p + "worker_restarts", "Worker processes restarted after exiting", labels=["worker"])
        queue = gauge(p + "producer_queue_messages", "Messages in the worker's producer (len(producer))",
                      labels=["worker"])
        rd = {name: gauge(p + "rdkafka_" + name, help_text + " (librdkafka statistics)", labels=["worker"])
              for name, help_text in RDKAFKA_FIELDS.items()}
        rtt = gauge(p + "rdkafka_broker_rtt_avg_seconds", "Average broker round trip (librdkafka statistics)",
                    labels=["worker", "broker"])
        for group in sorted(board.up):
            up.add_metric([group], 1 if board.up[group] else 0)
            restarts.add_metric([group], board.restarts.get(group, 0))
            snap = board.live.get(group, {})
            if "queue" in snap:
                queue.add_metric([group], snap["queue"])
            stats = snap.get("rdkafka") or {}
            for name, family in rd.items():
                if name in stats:
                    family.add_metric([group], stats[name])
            for broker, seconds in sorted((stats.get("broker_rtt_avg") or {}).items()):
                rtt.add_metric([group, broker], seconds)
        yield up
        yield restarts
        yield queue
        yield from rd.values()
        yield rtt
