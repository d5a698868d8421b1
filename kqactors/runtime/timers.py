"""Runs in: every host process and the in-process transport. Owns the timer heap behind ctx.timer() and
request deadlines.

Timers are ops: when a timer fires its action (usually "enqueue this op on that mailbox") runs inside the
host's loop, so a timer is served like any other op, in priority order, never concurrently.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable


class _Timer:
    __slots__ = ("timer_id", "due", "interval", "repeat", "action", "cancelled")

    def __init__(self, timer_id: int, due: float, interval: float, repeat: bool, action: Callable[[], None]):
        self.timer_id = timer_id
        self.due = due
        self.interval = interval
        self.repeat = repeat
        self.action = action
        self.cancelled = False


#: cancelled entries the heap may hold beyond as many as its live timers before it is rebuilt
_COMPACT_SLACK = 1024


class TimerHeap:
    """One-shot and repeating timers ordered by due time (monotonic clock)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._heap: list[tuple[float, int, _Timer]] = []
        self._timers: dict[int, _Timer] = {}
        self._ids = itertools.count(1)
        self._seq = itertools.count()

    def schedule(self, delay: float, action: Callable[[], None], *, repeat: bool = False) -> int:
        """Run ``action`` after ``delay`` seconds (and every ``delay`` seconds if ``repeat``)."""
        if delay < 0:
            raise ValueError(f"timer delay must be >= 0, got {delay}")
        if repeat and delay == 0:
            raise ValueError("a repeating timer needs an interval > 0")
        timer = _Timer(next(self._ids), self._clock() + delay, delay, repeat, action)
        self._timers[timer.timer_id] = timer
        heapq.heappush(self._heap, (timer.due, next(self._seq), timer))
        return timer.timer_id

    def cancel(self, timer_id: int) -> bool:
        """Cancel a timer; returns False if it already fired (one-shot) or never existed."""
        timer = self._timers.pop(timer_id, None)
        if timer is None:
            return False
        timer.cancelled = True
        # a cancelled timer stays in the heap until its due time; when most entries are such, rebuild it, so
        # that timers cancelled long before they are due (request timeouts of requests answered at once) take
        # no memory beyond a bounded share of the live ones
        if len(self._heap) > 2 * len(self._timers) + _COMPACT_SLACK:
            self._heap = [entry for entry in self._heap if not entry[2].cancelled]
            heapq.heapify(self._heap)
        return True

    def next_due(self) -> float | None:
        while self._heap and self._heap[0][2].cancelled:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def __len__(self) -> int:
        return len(self._timers)

    def run_due(self, now: float | None = None) -> int:
        """Run every action that is due; returns how many ran."""
        now = self._clock() if now is None else now
        fired = 0
        while self._heap and self._heap[0][0] <= now:
            _, _, timer = heapq.heappop(self._heap)
            if timer.cancelled:
                continue
            if timer.repeat:
                # Keep to the schedule, but after a long stall skip missed ticks rather than burst.
                timer.due += timer.interval
                if timer.due < now:
                    timer.due = now + timer.interval
                heapq.heappush(self._heap, (timer.due, next(self._seq), timer))
            else:
                self._timers.pop(timer.timer_id, None)
            timer.action()
            fired += 1
        return fired
