"""Adaptive placement: which host runs a partition's toppar actor, and when another toppar host is started.

Runs in: the app process, inside a facade (the producer's hand-over thread calls ``note`` with what it handed over,
under its hand-over lock; the consumer's polling thread with the records the app took). Owns the decision only; the
facade starts the host (``ClientHandle.add_toppar_host``), moves its toppars (producer: the old toppar drains, its
successor gets what was held back, in order; consumer: the successor fetches from the next offset not yet queued
for the app) and retires hosts (``Runtime.retire_host``).

Why: with ``kqactors.hosts`` at its default (-1, adaptive) a client starts with one actor host, main's, which also
runs the toppars — two processes in all, and one process hop fewer each way than a toppar host costs, so a quiet
client has the lowest latency and footprint. When the rate handed over climbs past
``kqactors.placement.scale.rate`` messages/s per host already running toppars, one more toppar host is started, up
to the core count (``KQACTORS_CPU_COUNT`` in the environment overrides it: tests and benchmarks simulate a larger
machine). Once the rate has stayed under half the rate at which the last host joined for
``kqactors.placement.retire.ms``, that host is retired: its toppars move back (the same hand-over) and its process
stops, so a burst does not leave idle processes holding memory. A consumer counts the records the app takes
(consume()/poll()): fetching, and so decoding, follows them once prefetch is full. A consumer also passes its
backlog (``note``): a host joins only for a rate expected to last ``PAYOFF_S``; a producer's rate must have
lasted that long.
"""

from __future__ import annotations

import os
import time
import zlib
from collections.abc import Callable

__all__ = ["AdaptivePlacement", "core_count", "fixed_host_for"]

WINDOW_S = 0.5
"""The rate is measured over windows this long."""
SETTLE_S = 2.0
"""After a host joins, the rate is not judged again for this long (its toppars are moving)."""
CALM_WINDOWS = 2
"""Windows in a row under the rate that ends a busy spell (the time ``PAYOFF_S`` counts from)."""
PAYOFF_S = 2.0
"""A host joins only for a rate expected to last this long: starting one costs a few hundred ms of a core and
each move a pause, so a backlog the current hosts drain sooner is read where it is (see ``note``)."""


def core_count() -> int:
    """The cores adaptive placement may use: ``KQACTORS_CPU_COUNT`` if set (a positive int), else the machine's."""
    text = os.environ.get("KQACTORS_CPU_COUNT", "").strip()
    if text:
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"KQACTORS_CPU_COUNT must be a positive integer, got {text!r}") from None
        if value < 1:
            raise ValueError(f"KQACTORS_CPU_COUNT must be a positive integer, got {text!r}")
        return value
    return os.cpu_count() or 1


def fixed_host_for(topic: str, partition: int, toppar_hosts: int) -> int:
    """Host index of a partition's toppar with ``toppar_hosts`` toppar hosts (h1..hK; 0: main's host). Consecutive
    partitions of a topic go to consecutive hosts, so a topic's load spreads over every host (a hash of the whole
    name can put all of them on one)."""
    if toppar_hosts <= 0:
        return 0
    return 1 + (zlib.crc32(topic.encode()) + partition) % toppar_hosts


class AdaptivePlacement:
    """Toppar hosts that follow the rate. ``max_hosts``: toppar hosts at most (the cores); ``rate``: messages/s
    per host (main's counts as one while it runs the toppars) above which one more joins; ``retire_s``: how long
    the rate must stay under half the rate at which the last host joined before that host is retired (0: never).
    """

    def __init__(self, max_hosts: int, rate: float, clock: Callable[[], float] = time.monotonic,
                 retire_s: float = 0.0) -> None:
        if max_hosts < 0:
            raise ValueError("max_hosts must be >= 0")
        if rate <= 0:
            raise ValueError("rate must be > 0")
        if retire_s < 0:
            raise ValueError("retire_s must be >= 0")
        self.max_hosts = max_hosts
        self.rate = float(rate)
        self.retire_s = float(retire_s)
        self.clock = clock
        #: runtime host indexes of the toppar hosts in use, in joining order; empty: toppars on main's host
        self.hosts: list[int] = []
        self._window_start = clock()
        self._window_count = 0
        self._settle_until = 0.0
        self._low_since: float | None = None
        self._busy_since: float | None = None  # since when each window's rate called for one more host
        self._busy_windows = 0  # how many windows in a row
        self._calm_windows = 0  # how many windows in a row did not call for one (CALM_WINDOWS end a busy spell)
        self._unjudged = False  # a window closed that note() has not judged yet
        #: the last window's rate, messages/s (statistics, tests)
        self.last_rate = 0.0

    @property
    def toppar_hosts(self) -> int:
        """Toppar hosts in use (0: the toppars run on main's host)."""
        return len(self.hosts)

    def host_for(self, topic: str, partition: int) -> int:
        """Where a partition's toppar belongs now (runtime host index; 0: main's host)."""
        slot = fixed_host_for(topic, partition, len(self.hosts))
        return self.hosts[slot - 1] if slot else 0

    def note(self, count: int, backlog: Callable[[], int] | None = None) -> bool:
        """``count`` messages were handed over (or consumed) now. True when another toppar host should join
        (the caller then calls ``grew``).

        ``backlog`` (a consumer's: the records known to be there and not consumed yet, its partitions' high
        watermarks minus its positions) is asked only when the rate has called for a host two windows in a row
        (the first may include the wait for the first records): the host joins if that rate has lasted
        ``PAYOFF_S`` already (a stream) or the backlog holds ``PAYOFF_S`` of it. A burst the current hosts read
        sooner ends before a move pays off: a host's start (a few hundred ms of a core, on the cores the
        client uses) and the moves cost more than it saves. Without ``backlog`` (the producer: what it will be
        asked to send is not known) the rate must have lasted ``PAYOFF_S``: a burst of a second or two is sent
        from where the toppars are."""
        self._window_count += count
        now = self.clock()
        self._close_window(now)
        if not self._unjudged:  # judged once per window, whichever call closed it (retire_due closes them too)
            return False
        self._unjudged = False
        if not self._busy_windows:
            return False
        if len(self.hosts) >= self.max_hosts or now < self._settle_until:
            return False
        if backlog is None:
            return now - self._busy_since >= PAYOFF_S  # type: ignore[operator]
        if self._busy_windows < 2:
            return False  # the first busy window may hold the time before any record came: its rate is too low
        return now - self._busy_since >= PAYOFF_S or backlog() >= self.last_rate * PAYOFF_S

    def retire_due(self) -> bool:
        """Called now and then, also when nothing flows: True when the last host to join should be retired
        (the caller moves its toppars back with ``retire`` and then stops it)."""
        now = self.clock()
        self._close_window(now)
        if not self.retire_s or not self.hosts or now < self._settle_until or self._low_since is None:
            return False
        return now - self._low_since >= self.retire_s

    def _close_window(self, now: float) -> bool:
        elapsed = now - self._window_start
        if elapsed < WINDOW_S:
            return False
        self.last_rate = self._window_count / elapsed
        self._unjudged = True
        if self.last_rate > self.rate * (len(self.hosts) + 1):  # calls for one more host
            if self._busy_since is None:
                self._busy_since = self._window_start
            self._busy_windows += 1
            self._calm_windows = 0
        else:
            self._busy_windows = 0
            self._calm_windows += 1
            if self._calm_windows >= CALM_WINDOWS:  # the burst is over (one calm window is a hiccup: a full
                self._busy_since = None             # queue, a pause of the producing thread)
        self._window_start = now
        self._window_count = 0
        if self.last_rate * 2 < self.rate * len(self.hosts):
            if self._low_since is None:
                self._low_since = now - elapsed
        else:
            self._low_since = None
        return True

    def grew(self, index: int | None = None) -> None:
        """Toppar host ``index`` (runtime host index; default: the next one) runs: partitions are placed over it
        from now on."""
        self.hosts.append(len(self.hosts) + 1 if index is None else index)
        self._settle_until = self.clock() + SETTLE_S
        self._low_since = None
        self._busy_since, self._busy_windows = None, 0  # one host more: the next must pay off at the new threshold

    def retire(self) -> int:
        """The last host to join leaves the placement (its toppars belong elsewhere from now on); returns its
        runtime host index for the caller to move them and then stop the host."""
        index = self.hosts.pop()
        self._settle_until = self.clock() + SETTLE_S
        self._low_since = None
        return index
