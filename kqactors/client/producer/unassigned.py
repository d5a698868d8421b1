"""Messages produced to a topic whose partition count is not known yet (librdkafka's "UA" partition).

Runs in: the app process. produce() holds such a message here instead of blocking on a metadata lookup, as
librdkafka queues it on the topic's unassigned partition; a resolver thread looks the topic up and either
releases the held messages, in produce order, to the partitioner and the partition buffers, or fails each
with one delivery report. While a topic has held messages, its new messages queue behind them, so
partitioning never reorders a topic's messages.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = ["HeldMessage", "UnassignedMessages"]

_log = logging.getLogger("kqactors.client.producer.producer")


class HeldMessage(NamedTuple):
    partition: int  # -1: the partitioner chooses once the count is known
    key: bytes | None
    value: bytes | None
    headers: list | None
    timestamp: int
    callback: Callable[..., Any] | None
    size: int


class UnassignedMessages:
    """Held messages per topic plus the thread that resolves their topics.

    ``resolve(topic)`` returns the partition count, or None when the lookup failed for good; it may block
    (it runs on the resolver thread). ``release(topic, messages, count)`` and ``fail(topic, messages)``
    are called with the messages taken off the topic, in produce order, under this object's lock, so a
    concurrent produce() either joins the batch being released or sees the topic no longer held.
    """

    def __init__(self, resolve: Callable[[str], int | None],
                 release: Callable[[str, list[HeldMessage], int], None],
                 fail: Callable[[str, list[HeldMessage]], None]) -> None:
        self.lock = threading.Lock()
        self.held: dict[str, list[HeldMessage]] = {}
        self._resolve = resolve
        self._release = release
        self._fail = fail
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

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)

    def _ensure_thread(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="kqactors-producer-metadata", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._closed:
            self._wake.wait()
            self._wake.clear()
            while not self._closed:
                with self.lock:
                    topics = list(self.held)
                if not topics:
                    break
                for topic in topics:
                    try:
                        count = self._resolve(topic)  # blocks: outside the lock, produce() keeps holding
                    except Exception:  # noqa: BLE001 - a failed lookup fails the held messages, not the thread
                        if not self._closed:
                            _log.exception("kqactors producer: metadata lookup for %r failed", topic)
                        count = None
                    with self.lock:
                        # The topic stays held until its messages are placed: a produce() meanwhile waits
                        # for this lock and then goes behind them.
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
