"""Runs in: every actor host of a client, as the actor ``log/<host>``. Owns the host's Python logging: a handler on
the host's ``kqactors`` logger turns each record made by code on this host (an actor's warning, the runtime's
report of a failed handler, ...) into a librdkafka-style LOG op to the app, which emits it through the
application's logger from poll() — so nothing an actor host logs is lost on a host's stderr.

Records are filtered where they are made: by ``log_level``, and Python debug records by the ``debug`` context
of the module that made them (e.g. ``kqactors.actors.cgrp`` → cgrp). The host's own stderr handler (set up by
the host process) no longer sees ``kqactors`` records while the handler is installed.

Ops in:  LOG_RELAY (its own: a record made on another thread of this host, handed over through a ThreadInbox).
Ops out: LOG (app).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from kqactors.core.log import LOG_DEBUG, ClientLog, syslog_level
from kqactors.ops import client as ops
from kqactors.runtime.actor import Actor, ActorContext, on
from kqactors.runtime.op import Op
from kqactors.runtime.threadsafe import ThreadInbox

FACTORY = "kqactors.actors.log:LogForwarder"
_RELAY = "LOG_RELAY"
_ROOT = "kqactors"

# (logger name prefix, facility, debug context), most specific first
_SOURCES = (
    ("kqactors.actors.broker.source", "FETCH", "fetch"),
    ("kqactors.actors.broker", "BROKER", "broker"),
    ("kqactors.actors.cgrp", "CGRP", "cgrp"),
    ("kqactors.actors.consumer_main", "METADATA", "metadata"),
    ("kqactors.actors.main", "METADATA", "metadata"),
    ("kqactors.actors.ctoppar", "FETCH", "fetch"),
    ("kqactors.actors.toppar", "MSG", "msg"),
    ("kqactors.actors.stats_collector", "STATS", "generic"),
    ("kqactors.runtime", "RUNTIME", "generic"),
    ("kqactors", "KQACTORS", "generic"),
)


def forwarder_name(host_key: str) -> str:
    """The actor name of host ``host_key``'s log forwarder."""
    return f"log/{host_key}"


def source_of(logger_name: str) -> tuple[str, str]:
    """(facility, debug context) of records made by the Python logger ``logger_name``."""
    for prefix, fac, context in _SOURCES:
        if logger_name == prefix or logger_name.startswith(prefix + "."):
            return fac, context
    return "KQACTORS", "generic"


class ForwardingHandler(logging.Handler):
    """Python records → LOG payloads. On the host's loop thread they go out at once; from another thread they
    are handed to the loop through ``relay`` (records are never sent from two threads)."""

    def __init__(self, clog: ClientLog, send: Any, relay: Any) -> None:
        super().__init__(logging.DEBUG)
        self.clog = clog
        self.send = send
        self.relay = relay
        self.loop_thread = threading.get_ident()
        self._busy = False
        self._formatter = logging.Formatter()

    def emit(self, record: logging.LogRecord) -> None:
        if self._busy:  # a record made while sending one: never recurse
            return
        level = syslog_level(record.levelno)
        fac, context = source_of(record.name)
        if level == LOG_DEBUG and context not in self.clog.contexts:
            return
        if not self.clog.wants(level):
            return
        try:
            text = record.getMessage()
            if record.exc_info:
                text = f"{text}\n{self._formatter.formatException(record.exc_info)}"
        except Exception:  # noqa: BLE001 - a bad format string must not break the host
            text = str(record.msg)
        payload = ops.log_payload(level, fac, self.clog.prefix + text)
        self._busy = True
        try:
            if threading.get_ident() == self.loop_thread:
                self.send(payload)
            else:
                self.relay(payload)
        finally:
            self._busy = False


class LogForwarder(Actor):
    """``log/<host>``: installs the forwarding handler while it runs. ``config`` holds ``log_level``, ``debug``
    and ``log.thread.name``; ``app`` is where LOG ops go."""

    def __init__(self, ctx: ActorContext, config: dict[str, Any] | None = None, app: str = "app") -> None:
        super().__init__(ctx)
        self.app = app
        # records are named after the host they were made on ("[thrd:h1]"): the actor that made one is unknown
        self.clog = ClientLog.from_config(dict(config or {}), self._send, thread=ctx.name.rpartition("/")[2])
        self.handler: ForwardingHandler | None = None
        self.inbox: ThreadInbox | None = None
        self._saved: tuple[int, bool] | None = None

    def on_start(self) -> None:
        self.inbox = ThreadInbox(self.ctx)
        inbox = self.inbox
        self.handler = ForwardingHandler(self.clog, self._send, lambda payload: inbox.post(Op(_RELAY, payload)))
        root = logging.getLogger(_ROOT)
        self._saved = (root.level, root.propagate)
        root.setLevel(logging.DEBUG if self.clog.contexts else logging.INFO)
        root.propagate = False
        root.addHandler(self.handler)

    def on_stop(self) -> None:
        root = logging.getLogger(_ROOT)
        if self.handler is not None:
            root.removeHandler(self.handler)
            self.handler = None
        if self._saved is not None:
            root.setLevel(self._saved[0])
            root.propagate = self._saved[1]
            self._saved = None
        if self.inbox is not None:
            self.inbox.close()
            self.inbox = None

    @on(_RELAY)
    def _on_relay(self, op: Op) -> None:
        self._send(op.payload)

    def _send(self, payload: dict[str, Any]) -> None:
        self.ctx.send(self.app, Op(ops.LOG, payload))
