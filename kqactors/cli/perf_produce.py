"""The produce loop of ``kqactors perf produce``: pace, produce, serve delivery reports, flush.

Runs in: the user's shell process (the perf command). Owns one measured run against any producer with
confluent-kafka's Producer API (``produce(topic, value, on_delivery=...)``, ``poll``, ``flush``, ``len``),
so the same loop drives kqactors.Producer and, in tests, confluent-kafka's Producer.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from kqactors.cli.perf_stats import DeliveryStats, PerfSummary, ProgressLine

__all__ = ["ProduceRun", "RatePacer", "run_produce"]

#: How many produce() calls between two poll(0) calls that serve delivery reports.
POLL_EVERY = 1000
#: How long to poll for delivery reports when the producer's queue is full (BufferError).
QUEUE_FULL_POLL_S = 0.05
#: After Ctrl-C: how long the reports of messages already on their way are waited for before summarising.
INTERRUPT_FLUSH_S = 0.5


class RatePacer:
    """Spreads messages evenly at ``rate`` msgs/s: message i is due at ``start + i / rate``."""

    def __init__(self, rate: float, start: float) -> None:
        if rate < 0:
            raise ValueError(f"rate must be >= 0 (0 = unlimited), got {rate}")
        self.rate = rate
        self.start = start

    def delay_for(self, index: int, now: float) -> float:
        """Seconds to wait before message ``index`` may be produced (0 when due or unlimited)."""
        if self.rate == 0:
            return 0.0
        return max(0.0, self.start + index / self.rate - now)


@dataclass
class ProduceRun:
    """What to produce: ``count`` messages cycling through ``payloads`` to ``topic``."""

    topic: str
    payloads: Sequence[bytes]
    count: int
    rate: float = 0.0
    flush_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if self.count < 0:
            raise ValueError(f"count must be >= 0, got {self.count}")
        if not self.payloads:
            raise ValueError("need at least one payload")
        if self.flush_timeout_s <= 0:
            raise ValueError(f"flush timeout must be > 0, got {self.flush_timeout_s}")


def run_produce(producer: Any, run: ProduceRun, progress: ProgressLine | None = None,
                clock: Callable[[], float] = time.perf_counter) -> PerfSummary:
    """Produce ``run.count`` messages, wait for every delivery report (or the flush timeout), summarise.

    Latency per message is enqueue (just before produce()) → its delivery report callback. Ctrl-C
    (KeyboardInterrupt) stops the run where it is: the reports already on their way are waited for briefly
    and the summary covers what was produced so far (``interrupted``; the rest count as undelivered).
    """
    stats = DeliveryStats(clock=clock)
    message_size = len(run.payloads[0])

    def on_delivery(enqueued_at: float, error: Any, message: Any) -> None:
        stats.record(enqueued_at, error, message_size)

    payloads = run.payloads
    distinct = len(payloads)
    produce = producer.produce
    topic = run.topic
    started_at = clock()
    pacer = RatePacer(run.rate, started_at)
    produced = 0
    interrupted = False
    try:
        for index in range(run.count):
            if run.rate:
                _wait_until_due(producer, pacer, index, clock)
            callback = partial(on_delivery, clock())
            value = payloads[index % distinct]
            while True:
                try:
                    produce(topic, value, on_delivery=callback)
                    break
                except BufferError:
                    producer.poll(QUEUE_FULL_POLL_S)
                    if progress is not None:
                        progress.update(produced, stats)
            produced += 1
            if produced % POLL_EVERY == 0:
                producer.poll(0)
                if progress is not None:
                    progress.update(produced, stats)
        undelivered = _flush(producer, run.flush_timeout_s, produced, stats, progress)
    except KeyboardInterrupt:
        interrupted = True
        produced, undelivered = _flush_after_interrupt(producer, produced, stats)
    finished_at = stats.last_report_at if stats.last_report_at is not None else clock()
    if progress is not None:
        progress.update(produced, stats, force=True)
        progress.finish()
    return stats.summary(produced, started_at, finished_at, undelivered=undelivered, interrupted=interrupted)


def _flush_after_interrupt(producer: Any, produced: int, stats: DeliveryStats) -> tuple[int, int]:
    """Serve the reports that arrive within INTERRUPT_FLUSH_S (another Ctrl-C ends that at once); return the
    messages produced (one may have been taken just as Ctrl-C came, before it was counted) and the number
    still without a report."""
    try:
        producer.flush(INTERRUPT_FLUSH_S)
    except KeyboardInterrupt:
        pass
    try:
        produced = max(produced, stats.reported + len(producer))
    except TypeError:  # a producer without len()
        produced = max(produced, stats.reported)
    return produced, max(0, produced - stats.reported)


def _wait_until_due(producer: Any, pacer: RatePacer, index: int, clock: Callable[[], float]) -> None:
    """Serve delivery reports while waiting for message ``index``'s slot (poll may return early)."""
    delay = pacer.delay_for(index, clock())
    while delay > 0:
        producer.poll(delay)
        delay = pacer.delay_for(index, clock())


def _flush(producer: Any, timeout_s: float, produced: int, stats: DeliveryStats,
           progress: ProgressLine | None) -> int:
    """Flush in short slices (so the progress line moves); return messages still without a report."""
    deadline = time.monotonic() + timeout_s
    while True:
        remaining_time = deadline - time.monotonic()
        if remaining_time <= 0:
            break
        producer.flush(min(0.25, remaining_time))
        if progress is not None:
            progress.update(produced, stats)
        if stats.reported >= produced:
            return 0
    return max(0, produced - stats.reported)
