"""Messages produced to a topic whose partition count is not known yet (librdkafka's "UA" partition).

Runs in: the app process. produce() holds such a message here instead of blocking on a metadata lookup, as
librdkafka queues it on the topic's unassigned partition; a resolver thread looks the topic up, again and
again while no answer comes (no broker reachable, none configured, a topic still propagating), and either
releases the held messages, in produce order, to the partitioner and the partition buffers, or fails each
with one delivery report. While a topic has held messages, its new messages queue behind them, so
partitioning never reorders a topic's messages. A held message that waits longer than message.timeout.ms
fails with _MSG_TIMED_OUT (``expire``, called by the producer's flusher thread), as librdkafka times out the
messages of its UA partitions.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = ["HeldMessage", "RETRY", "UnassignedMessages"]

_log = logging.getLogger("kqactors.client.producer.producer")

RETRY: Any = object()
"""What ``resolve`` returns when there is no answer yet (no broker reachable, the topic still propagating):
the topic stays held and is looked up again after a backoff."""

RETRY_BACKOFF_S = (0.1, 1.0)  # first and longest wait between two lookups of a topic that got no answer


class HeldMessage(NamedTuple):
    partition: int  # -1: the partitioner chooses once the count is known
    key: bytes | None
    value: bytes | None
    headers: list | None
    timestamp: int
    callback: Callable[..., Any] | None
    size: int
    held_at: float | None = None  # time.monotonic() of its produce(); None: it never times out here


class UnassignedMessages:
    """Held messages per topic plus the thread that resolves their topics.

    ``resolve(topic)`` returns the partition count, None when the topic failed for good, or ``RETRY``; it
    may block (it runs on the resolver thread). ``release(topic, messages, count)`` and ``fail(topic,
    messages)`` are called with the messages taken off the topic, in produce order, under this object's
    lock, so a concurrent produce() either joins the batch being released or sees the topic no longer held.
    With ``timeout_s`` (message.timeout.ms; 0: none), ``expire()`` hands the messages held longer than that
    to ``on_expired(topic, messages)``, also under the lock.
    """

    def __init__(self, resolve: Callable[[str], Any],
                 release: Callable[[str, list[HeldMessage], int], None],
                 fail: Callable[[str, list[HeldMessage]], None], *, timeout_s: float = 0.0,
                 on_expired: Callable[[str, list[HeldMessage]], None] | None = None) -> None:
        self.lock = threading.Lock()
        self.held: dict[str, list[HeldMessage]] = {}
        self._resolve = resolve
        self._release = release
        self._fail = fail
        self._timeout_s = timeout_s
        self._on_expired = on_expired
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None

    def hold(self, topic: str, message: HeldMessage, start: bool) -> bool:
        """Queue ``message`` behind the topic's held ones. With ``start`` a topic with none held starts
        being held (and resolved); without it, returns False when the topic is not held (any more)."""
        with self.lock:
            waiting = self.held.get(topic)
            if waiting is None:
                if not start:
                    return False
                waiting = self.held[topic] = []
                self._ensure_thread()
                self._wake.set()
            waiting.append(message)
        return True

    def take_all(self) -> dict[str, list[HeldMessage]]:
        """Every held message, by topic, removed (purge and close report them)."""
        with self.lock:
            held, self.held = self.held, {}
        return held

    def expire(self, now: float | None = None) -> int:
        """Hand every message held for longer than the timeout to ``on_expired`` (oldest first, per topic);
        the topic stays held (and looked up) for the messages that remain or come. Returns how many."""
        if not self._timeout_s or self._on_expired is None or not self.held:
            return 0
        cutoff = (time.monotonic() if now is None else now) - self._timeout_s
        expired = 0
        with self.lock:
            for topic, waiting in self.held.items():
                count = 0
                for message in waiting:  # in produce order, so the expired ones are a prefix
                    if message.held_at is None or message.held_at > cutoff:
                        break
                    count += 1
                if count:
                    gone = waiting[:count]
                    del waiting[:count]
                    expired += count
                    try:
                        self._on_expired(topic, gone)
                    except Exception:  # noqa: BLE001 - the other topics still expire
                        _log.exception("kqactors producer: timing out the messages held for %r failed", topic)
        return expired

    def stop(self) -> None:
        """Stop the resolver without waiting for it (the client's runtime is gone)."""
        self._closed = True
        self._wake.set()

    def close(self) -> None:
        self.stop()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)

    def _ensure_thread(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="kqactors-producer-metadata", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        backoff: dict[str, float] = {}   # topic → its current wait between lookups
        due: dict[str, float] = {}       # topic → when it is looked up next
        while not self._closed:
            with self.lock:
                topics = list(self.held)
            now = time.monotonic()
            for gone in [t for t in due if t not in topics]:
                due.pop(gone, None)
                backoff.pop(gone, None)
            ready = [t for t in topics if due.get(t, 0.0) <= now]
            if not ready:
                wait = min(due.values(), default=now + 3600.0) - now
                self._wake.wait(max(0.0, wait) if topics else None)
                self._wake.clear()
                continue
            for topic in ready:
                if self._closed:
                    return
                try:
                    count = self._resolve(topic)  # blocks: outside the lock, produce() keeps holding
                except Exception:  # noqa: BLE001 - a failed lookup fails the held messages, not the thread
                    if not self._closed:
                        _log.exception("kqactors producer: metadata lookup for %r failed", topic)
                    count = None
                if self._closed:
                    return
                if count is RETRY:
                    wait = backoff[topic] = min(backoff.get(topic, RETRY_BACKOFF_S[0] / 2) * 2, RETRY_BACKOFF_S[1])
                    due[topic] = time.monotonic() + wait
                    continue
                due.pop(topic, None)
                backoff.pop(topic, None)
                with self.lock:
                    # The topic stays held until its messages are placed: a produce() meanwhile waits for
                    # this lock and then goes behind them.
                    messages = self.held.get(topic)
                    try:
                        if messages:
                            if count is None:
                                self._fail(topic, messages)
                            else:
                                self._release(topic, messages, count)
                    except Exception:  # noqa: BLE001 - the thread must keep serving other topics
                        _log.exception("kqactors producer: placing the messages held for %r failed", topic)
                    finally:
                        self.held.pop(topic, None)
