"""Idle kqactors clients kept by a Spark Python worker between tasks.

Runs in: an executor's Python worker. Spark reuses a worker for task after task (``spark.python.worker.reuse``,
on by default) and stops it after about a minute without work; starting a kqactors client costs a few hundred
milliseconds (its host process), which a micro-batch would otherwise pay in every task. A task takes a client
built with the same configuration if one is idle here, and gives it back when it ends cleanly; a client that
saw an error is closed instead. Clients idle longer than ``IDLE_TIMEOUT_S`` are closed when the pool is next
used, and every one at the worker's exit (their host processes also die with the worker).
"""

from __future__ import annotations

import atexit
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

__all__ = ["ClientPool", "config_key", "CONSUMERS", "PRODUCERS", "IDLE_TIMEOUT_S"]

IDLE_TIMEOUT_S = 60.0


def config_key(kind: str, conf: dict[str, Any]) -> Hashable:
    """A pool key for a client configuration (values are compared as text; callables by identity)."""
    return (kind, tuple(sorted((k, v if callable(v) else str(v)) for k, v in conf.items())))


class ClientPool:
    """Idle clients by configuration key. ``close`` is how a client is closed."""

    def __init__(self, close: Callable[[Any], None], idle_timeout_s: float = IDLE_TIMEOUT_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._close = close
        self._idle_timeout_s = idle_timeout_s
        self._clock = clock
        self._idle: dict[Hashable, list[tuple[Any, float]]] = {}
        self._lock = threading.Lock()

    def take(self, key: Hashable) -> Any | None:
        """An idle client for ``key``, or None."""
        self._expire()
        with self._lock:
            entries = self._idle.get(key)
            if entries:
                client, _ = entries.pop()
                return client
        return None

    def give(self, key: Hashable, client: Any) -> None:
        with self._lock:
            self._idle.setdefault(key, []).append((client, self._clock()))
        self._expire()

    def __len__(self) -> int:
        with self._lock:
            return sum(len(entries) for entries in self._idle.values())

    def _expire(self) -> None:
        now = self._clock()
        stale = []
        with self._lock:
            for key, entries in list(self._idle.items()):
                keep = [(c, t) for c, t in entries if now - t < self._idle_timeout_s]
                stale.extend(c for c, t in entries if now - t >= self._idle_timeout_s)
                if keep:
                    self._idle[key] = keep
                else:
                    del self._idle[key]
        for client in stale:
            self._safe_close(client)

    def close_all(self) -> None:
        with self._lock:
            clients = [c for entries in self._idle.values() for c, _ in entries]
            self._idle.clear()
        for client in clients:
            self._safe_close(client)

    def _safe_close(self, client: Any) -> None:
        try:
            self._close(client)
        except Exception:  # a client that cannot close cleanly dies with its host processes anyway
            pass


def _close_consumer(consumer: Any) -> None:
    consumer.close()


def _close_producer(entry: Any) -> None:
    producer = entry[0]
    producer.close(5.0)


CONSUMERS = ClientPool(_close_consumer)
PRODUCERS = ClientPool(_close_producer)
atexit.register(PRODUCERS.close_all)
atexit.register(CONSUMERS.close_all)
