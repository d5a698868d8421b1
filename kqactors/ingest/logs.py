"""Structured logs for the ingestion daemon: one JSON object per line on stderr (or plain text).

Runs in: the supervisor and the worker processes (each sets up its own root handler; workers inherit the
daemon's stderr, so their lines interleave whole). Owns the record layout: ``ts`` (UTC, ISO 8601 with
milliseconds), ``level``, ``logger``, ``msg``, ``pid``, ``worker`` (the worker's group, "supervisor" in the
supervisor), and every ``extra={...}`` field given at the call (``event``, ``source``, ``path``, ``error``, ...).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

__all__ = ["JsonFormatter", "setup_logging"]

_STANDARD = set(vars(logging.LogRecord("n", 0, "p", 0, "m", None, None))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    def __init__(self, worker: str) -> None:
        super().__init__()
        self.worker = worker

    def format(self, record: logging.LogRecord) -> str:
        seconds = int(record.created)
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            "pid": record.process or os.getpid(),
            "worker": self.worker,
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in out:
                out[key] = value if isinstance(value, (str, int, float, bool, type(None))) else str(value)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


class _Handler(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler that lets a progress line clear itself before a record is written."""

    def __init__(self, stream: TextIO, before: Callable[[], None] | None) -> None:
        super().__init__(stream)
        self.before = before

    def emit(self, record: logging.LogRecord) -> None:
        if self.before is not None:
            self.before()
        super().emit(record)


def setup_logging(fmt: str, level: str, worker: str, stream: TextIO | None = None,
                  before: Callable[[], None] | None = None) -> logging.Handler:
    """Route the ``kqactors`` loggers to ``stream`` (stderr) in ``fmt`` ("json" or "text")."""
    handler = _Handler(stream or sys.stderr, before)
    if fmt == "json":
        handler.setFormatter(JsonFormatter(worker))
    else:
        handler.setFormatter(logging.Formatter(f"%(asctime)s %(levelname)s [{worker}] %(name)s: %(message)s"))
    logger = logging.getLogger("kqactors")
    for old in list(logger.handlers):
        if isinstance(old, _Handler):
            logger.removeHandler(old)
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
    return handler
