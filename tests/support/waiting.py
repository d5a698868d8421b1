"""The one way tests wait for something that happens in another thread or process.

``wait_until(predicate, timeout, what)`` polls ``predicate`` until it returns something truthy and returns
that; after ``timeout`` seconds it fails the test saying what did not happen and the last value seen. Wait
on public behaviour (a public method, a delivered message, a callback), not on private fields.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import pytest

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float, what: str, *, interval: float = 0.01,
               sleep: Callable[[float], object] = time.sleep) -> T:
    """Poll ``predicate`` every ``interval`` s until it is truthy (returned), or fail after ``timeout`` s.

    ``sleep`` may be a call that does work while waiting, e.g. a runtime's ``sleep`` that serves its
    mailbox, or ``lambda s: consumer.poll(s)``.
    """
    start = time.monotonic()
    deadline = start + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {time.monotonic() - start:.1f} s waiting for {what} "
                        f"(last seen: {value!r})", pytrace=False)
        sleep(interval)
