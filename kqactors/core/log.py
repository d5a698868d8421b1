"""Runs in: every process of a client (actor hosts decide which records to make, the app emits them). Owns the
client's log as librdkafka keeps it: syslog levels (``log_level``), debug contexts (``debug``: "broker,topic,msg",
"all"), facility names (BROKER, METADATA, ...), the optional thread name prefix (``log.thread.name``) and the
mapping between syslog and Python ``logging`` levels (confluent-kafka's: 0-2 CRITICAL, 3 ERROR, 4 WARNING, 5-6
INFO, 7 DEBUG).

``ClientLog`` is pure: it filters and formats, and hands each record (``kqactors.ops.client.log_payload``) to the
``emit`` callable it was given (an actor sends it to the app as a LOG op; the app writes it to its logger).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kqactors.ops.client import log_payload

__all__ = ["ClientLog", "LOG_ERR", "LOG_WARNING", "LOG_NOTICE", "LOG_INFO", "LOG_DEBUG", "DEBUG_CONTEXTS",
           "python_level", "syslog_level"]

LOG_EMERG, LOG_ALERT, LOG_CRIT, LOG_ERR, LOG_WARNING, LOG_NOTICE, LOG_INFO, LOG_DEBUG = range(8)

DEBUG_CONTEXTS = ("generic", "broker", "topic", "metadata", "feature", "queue", "msg", "protocol", "cgrp",
                  "security", "fetch", "interceptor", "plugin", "consumer", "admin", "eos", "mock", "assignor",
                  "conf", "telemetry")
"""librdkafka's debug contexts; ``all`` names every one of them."""

_PYTHON_LEVELS = (logging.CRITICAL, logging.CRITICAL, logging.CRITICAL, logging.ERROR, logging.WARNING,
                  logging.INFO, logging.INFO, logging.DEBUG)

Emit = Callable[[dict[str, Any]], Any]


def python_level(level: int) -> int:
    """The Python logging level of a syslog level (confluent-kafka's table)."""
    return _PYTHON_LEVELS[min(max(int(level), 0), LOG_DEBUG)]


def syslog_level(levelno: int) -> int:
    """The syslog level of a Python logging level (the reverse of ``python_level``)."""
    if levelno >= logging.CRITICAL:
        return LOG_CRIT
    if levelno >= logging.ERROR:
        return LOG_ERR
    if levelno >= logging.WARNING:
        return LOG_WARNING
    if levelno >= logging.INFO:
        return LOG_INFO
    return LOG_DEBUG


def debug_contexts(debug: Iterable[str] | str | None) -> frozenset[str]:
    """The enabled contexts of a ``debug`` value (a list, or librdkafka's comma-separated string)."""
    if not debug:
        return frozenset()
    names = debug.split(",") if isinstance(debug, str) else debug
    wanted = {name.strip().lower() for name in names if name and name.strip()}
    return frozenset(DEBUG_CONTEXTS) if "all" in wanted else frozenset(wanted)


class ClientLog:
    """Which records one part of a client makes, and their text. ``thread`` is the part's name as librdkafka's
    thread names read (``main``, ``127.0.0.1:9092/1``); with ``log.thread.name`` (default on) every message
    starts with ``[thrd:<thread>]: ``. Setting any debug context raises the level to LOG_DEBUG, as librdkafka
    does."""

    __slots__ = ("contexts", "level", "thread_name", "prefix", "emit")

    def __init__(self, emit: Emit, log_level: int = LOG_INFO, debug: Iterable[str] | str | None = (),
                 thread: str = "", thread_name: bool = True) -> None:
        self.emit = emit
        self.contexts = debug_contexts(debug)
        self.level = LOG_DEBUG if self.contexts else int(log_level)
        self.thread_name = thread_name
        self.prefix = ""
        self.rename(thread)

    @classmethod
    def from_config(cls, config: Mapping[str, Any], emit: Emit, thread: str = "") -> ClientLog:
        """From librdkafka-named properties (``log_level``, ``debug``, ``log.thread.name``); absent ones take
        librdkafka's defaults."""
        level = config.get("log_level")
        thread_name = config.get("log.thread.name")
        return cls(emit, LOG_INFO if level is None else int(level), config.get("debug") or (), thread,
                   True if thread_name is None else bool(thread_name))

    def rename(self, thread: str) -> None:
        """The part is known by a new name from now on (a broker actor learns its address)."""
        self.prefix = f"[thrd:{thread}]: " if self.thread_name and thread else ""

    def debugging(self, *contexts: str) -> bool:
        """True if debug records of any of ``contexts`` are wanted (check before building costly text)."""
        enabled = self.contexts
        return bool(enabled) and any(context in enabled for context in contexts)

    def wants(self, level: int) -> bool:
        return level <= self.level

    def log(self, level: int, fac: str, message: str) -> None:
        """A record at syslog ``level`` (LOG_ERR, LOG_WARNING, LOG_INFO, ...) unless log_level filters it out."""
        if level <= self.level:
            self.emit(log_payload(level, fac, self.prefix + message))

    def debug_any(self, fac: str, message: str) -> None:
        """A LOG_DEBUG record shown whatever debug context is enabled (librdkafka's ``all`` mask: INIT)."""
        if self.contexts:
            self.emit(log_payload(LOG_DEBUG, fac, self.prefix + message))

    def debug(self, context: str, fac: str, message: str) -> None:
        """A LOG_DEBUG record of debug ``context``; made only when that context is enabled."""
        if context in self.contexts:
            self.emit(log_payload(LOG_DEBUG, fac, self.prefix + message))
