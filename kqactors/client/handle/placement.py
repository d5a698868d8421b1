"""Adaptive placement: which host runs a partition's toppar actor, and when another toppar host is started.

Runs in: the app process, inside a facade (the producer's hand-over thread calls ``note`` with what it handed over,
under its hand-over lock). Owns the decision only; the facade starts the host (``ClientHandle.add_toppar_host``)
and moves its toppars (a hand-over: the old toppar drains, its successor on the new host gets what was held back,
in order).

Why: with ``kqactors.hosts`` at its default (-1, adaptive) a client starts with one actor host, main's, which also
runs the toppars — two processes in all, and one process hop fewer each way than a toppar host costs, so a quiet
client has the lowest latency and footprint. When the rate handed over climbs past
``kqactors.placement.scale.rate`` messages/s per host already running toppars, one more toppar host is started, up
to the core count (``KQACTORS_CPU_COUNT`` in the environment overrides it: tests and benchmarks simulate a larger
machine). Hosts are not stopped again when the rate falls (a host costs memory, not CPU, when idle).
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
    per host (main's counts as one while it runs the toppars) above which one more joins."""

    def __init__(self, max_hosts: int, rate: float, clock: Callable[[], float] = time.monotonic) -> None:
        if max_hosts < 0:
            raise ValueError("max_hosts must be >= 0")
        if rate <= 0:
            raise ValueError("rate must be > 0")
        self.max_hosts = max_hosts
        self.rate = float(rate)
        self.clock = clock
        #: toppar hosts started so far (h1..hN); 0: the toppars run on main's host
        self.toppar_hosts = 0
        self._window_start = clock()
        self._window_count = 0
        self._settle_until = 0.0
        #: the last window's rate, messages/s (statistics, tests)
        self.last_rate = 0.0

    def host_for(self, topic: str, partition: int) -> int:
        """Where a partition's toppar belongs now (host index)."""
        return fixed_host_for(topic, partition, self.toppar_hosts)

    def note(self, count: int) -> bool:
        """``count`` messages were handed over now. True when another toppar host should join (the caller
        then calls ``grew``)."""
        now = self.clock()
        self._window_count += count
        elapsed = now - self._window_start
        if elapsed < WINDOW_S:
            return False
        self.last_rate = self._window_count / elapsed
        self._window_start = now
        self._window_count = 0
        if self.toppar_hosts >= self.max_hosts or now < self._settle_until:
            return False
        return self.last_rate > self.rate * (self.toppar_hosts + 1)

    def grew(self) -> None:
        """One more toppar host runs: partitions are placed over it from now on."""
        self.toppar_hosts += 1
        self._settle_until = self.clock() + SETTLE_S
