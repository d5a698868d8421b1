"""The one fake clock of the tests.

Every pure core takes a ``clock`` callable returning seconds (``time.monotonic`` in production); a test hands
it a ``FakeClock`` and moves time by hand, so timeouts, lingers and backoffs run without sleeping.
"""

from __future__ import annotations


class FakeClock:
    """A monotonic clock that only moves when told: ``clock()`` reads it, ``advance(s)`` or ``now = t`` moves it."""

    def __init__(self, start: float = 100.0) -> None:
        self.now = float(start)

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        """Move the clock ``seconds`` forward (never back) and return the new time."""
        if seconds < 0:
            raise ValueError(f"a monotonic clock does not go back ({seconds} s)")
        self.now += seconds
        return self.now
