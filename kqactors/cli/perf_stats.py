"""Delivery statistics, progress line and summary for ``kqactors perf produce``.

Runs in: the user's shell process (the perf command). Owns the numbers only: per-message delivery
latencies, delivered counts and bytes, failures grouped by error name, the carriage-return progress line
and the final summary (text or JSON). Nothing here talks to a broker, so it is tested without one.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, TextIO

__all__ = ["DeliveryStats", "ProgressLine", "PerfSummary", "percentile"]


def percentile(sorted_values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of an ascending list (``fraction`` in 0..1); NaN for an empty list.

    Nearest-rank (not interpolation) so that p99 and max are real observed latencies.
    """
    if not sorted_values:
        return math.nan
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"percentile fraction must be within 0..1, got {fraction}")
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


@dataclass
class DeliveryStats:
    """Counts delivery reports as they arrive (the DR callback calls :meth:`record`)."""

    clock: Any = time.perf_counter
    delivered: int = 0
    delivered_bytes: int = 0
    failed: int = 0
    errors: Counter = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)
    last_report_at: float | None = None

    @property
    def reported(self) -> int:
        return self.delivered + self.failed

    def record(self, enqueued_at: float, error: Any, value_size: int) -> None:
        """One delivery report: ``error`` is None on success, else a KafkaError-like object."""
        now = self.clock()
        self.last_report_at = now
        self.latencies.append(now - enqueued_at)
        if error is None:
            self.delivered += 1
            self.delivered_bytes += value_size
        else:
            self.failed += 1
            self.errors[_error_name(error)] += 1

    def summary(self, produced: int, started_at: float, finished_at: float,
                undelivered: int = 0, interrupted: bool = False) -> PerfSummary:
        """Freeze the numbers; ``undelivered`` counts messages still without a report after flush;
        ``interrupted``: the run was stopped (Ctrl-C) before it produced everything or saw every report."""
        errors = dict(self.errors)
        if undelivered:
            errors["NO_DELIVERY_REPORT"] = errors.get("NO_DELIVERY_REPORT", 0) + undelivered
        elapsed = max(finished_at - started_at, 1e-9)
        latencies = sorted(self.latencies)
        return PerfSummary(
            produced=produced,
            delivered=self.delivered,
            failed=self.failed + undelivered,
            errors=errors,
            elapsed_s=elapsed,
            msgs_per_s=self.delivered / elapsed,
            mb_per_s=self.delivered_bytes / elapsed / 1e6,
            delivered_bytes=self.delivered_bytes,
            latency_p50_ms=percentile(latencies, 0.50) * 1e3,
            latency_p99_ms=percentile(latencies, 0.99) * 1e3,
            latency_max_ms=(latencies[-1] * 1e3) if latencies else math.nan,
            interrupted=interrupted,
        )


def _error_name(error: Any) -> str:
    name = getattr(error, "name", None)
    if callable(name):
        name = name()
    return str(name) if name else str(error)


@dataclass(frozen=True)
class PerfSummary:
    produced: int
    delivered: int
    failed: int
    errors: dict[str, int]
    elapsed_s: float
    msgs_per_s: float
    mb_per_s: float
    delivered_bytes: int
    latency_p50_ms: float
    latency_p99_ms: float
    latency_max_ms: float
    interrupted: bool = False

    @property
    def ok(self) -> bool:
        return self.failed == 0 and self.delivered == self.produced and not self.interrupted

    def as_dict(self, **extra: Any) -> dict[str, Any]:
        """JSON-ready dict; NaN latencies (nothing delivered) become None."""
        out: dict[str, Any] = dict(extra)
        for key, value in self.__dict__.items():
            out[key] = None if isinstance(value, float) and math.isnan(value) else value
        return out

    def to_json(self, **extra: Any) -> str:
        return json.dumps(self.as_dict(**extra), sort_keys=True)

    def to_text(self, topic: str, message_size: int) -> str:
        lines = ["interrupted (Ctrl-C): partial results"] if self.interrupted else []
        lines += [
            f"topic {topic}: {self.delivered}/{self.produced} messages of {message_size} B delivered "
            f"in {self.elapsed_s:.3f} s",
            f"throughput: {self.msgs_per_s:,.0f} msgs/s, {self.mb_per_s:.2f} MB/s",
            f"delivery latency: p50 {_ms(self.latency_p50_ms)}, p99 {_ms(self.latency_p99_ms)}, "
            f"max {_ms(self.latency_max_ms)}",
        ]
        if self.errors:
            grouped = ", ".join(f"{name}: {count}" for name, count in sorted(self.errors.items()))
            lines.append(f"delivery errors: {self.failed} ({grouped})")
        else:
            lines.append("delivery errors: 0")
        return "\n".join(lines)


def _ms(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.2f} ms"


class ProgressLine:
    """A single carriage-return status line on a terminal, redrawn at most every ``interval`` seconds."""

    def __init__(self, stream: TextIO, total: int, enabled: bool, interval: float = 0.5,
                 clock: Any = time.monotonic) -> None:
        self._stream = stream
        self._total = total
        self._enabled = enabled
        self._interval = interval
        self._clock = clock
        self._next_draw = 0.0
        self._drawn = False
        self._started = clock()

    @property
    def enabled(self) -> bool:
        return self._enabled

    def update(self, produced: int, stats: DeliveryStats, force: bool = False) -> None:
        if not self._enabled:
            return
        now = self._clock()
        if not force and now < self._next_draw:
            return
        self._next_draw = now + self._interval
        self._stream.write("\r" + self.render(produced, stats, now - self._started))
        self._stream.flush()
        self._drawn = True

    def render(self, produced: int, stats: DeliveryStats, elapsed: float) -> str:
        percent = 100.0 * stats.reported / self._total if self._total else 100.0
        rate = stats.delivered / elapsed if elapsed > 0 else 0.0
        return (f"produced {produced}/{self._total}  delivered {stats.delivered} ({percent:5.1f}%)  "
                f"failed {stats.failed}  {rate:,.0f} msgs/s ")

    def finish(self) -> None:
        """End the progress line so the summary starts on a fresh line."""
        if self._enabled and self._drawn:
            self._stream.write("\n")
            self._stream.flush()
