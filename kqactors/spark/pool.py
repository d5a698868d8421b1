"""Idle kqactors clients kept by a Spark Python worker between tasks.

Runs in: an executor's Python worker (consumers, producers) and the planner workers (the batch reader's
AdminClient). Spark reuses a worker for task after task (``spark.python.worker.reuse``, on by default) and
stops it after about a minute without work; starting a kqactors client costs a few hundred milliseconds (its
host process), and closing one a few more, which every task of a micro-batch and every query's planning
would otherwise pay. A task takes a client
built with the same configuration if one is idle here, and gives it back when it ends cleanly; a client that
saw an error is closed instead. Clients idle longer than ``IDLE_TIMEOUT_S`` are closed by a daemon thread
that lives while the pool holds any, and every one at the worker's exit (their host processes also die with
the worker).
"""

from __future__ import annotations

import atexit
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

__all__ = ["ClientPool", "config_key", "CONSUMERS", "PRODUCERS", "ADMINS", "IDLE_TIMEOUT_S"]

IDLE_TIMEOUT_S = 60.0


def config_key(kind: str, conf: dict[str, Any]) -> Hashable:
    """A pool key for a client configuration (values are compared as text; callables by identity)."""
    return (kind, tuple(sorted((k, v if callable(v) else str(v)) for k, v in conf.items())))


class ClientPool:
    """Idle clients by configuration key. ``close`` is how a client is closed."""

    def __init__(self, close: Callable[[Any], None], idle_timeout_s: float = IDLE_TIMEOUT_S,
                 clock: Callable[[], float] = time.monotonic, reap: bool = True) -> None:
        self._close = close
        self._idle_timeout_s = idle_timeout_s
        self._clock = clock
        self._idle: dict[Hashable, list[tuple[Any, float]]] = {}
        self._lock = threading.Lock()
        self._reap = reap
        self._reaper: threading.Thread | None = None

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
            if self._reap and (self._reaper is None or not self._reaper.is_alive()):
                # A worker may sit idle for long: a thread closes what outlives the timeout, then ends.
                self._reaper = threading.Thread(target=self._reap_loop, name="kqactors-spark-pool", daemon=True)
                self._reaper.start()
        self._expire()

    def _reap_loop(self) -> None:
        while True:
            time.sleep(self._idle_timeout_s / 4)
            self._expire()
            with self._lock:
                if not self._idle:
                    self._reaper = None
                    return

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


def _close_admin(admin: Any) -> None:
    admin.__exit__(None, None, None)  # kqactors' AdminClient closes on context exit (confluent-kafka's has no close)


CONSUMERS = ClientPool(_close_consumer)
PRODUCERS = ClientPool(_close_producer)
ADMINS = ClientPool(_close_admin)
atexit.register(PRODUCERS.close_all)
atexit.register(CONSUMERS.close_all)
atexit.register(ADMINS.close_all)
