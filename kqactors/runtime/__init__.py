"""Runs in: every process. The actor runtime: ops, queues, actors, hosts and their supervision.

Imports nothing Kafka-specific; the Kafka layer maps :class:`ActorError` codes onto librdkafka's. ``Runtime`` and
``AppQueue`` (the app's side: supervisor, process control, subprocess, tempfile) load on first use, so an actor
host, which imports this package too, does not carry them.
"""

from .actor import Actor, ActorContext, on
from .op import (
    APP,
    CB,
    CHILD_EXITED,
    POISON,
    REPLY,
    TERMINATE,
    ActorError,
    ErrorCode,
    Op,
    OpError,
    decode_batch,
    encode_batch,
)
from .queue import CallbackRegistry, OpQueue
from .timers import TimerHeap

__all__ = [
    "APP", "CB", "CHILD_EXITED", "POISON", "REPLY", "TERMINATE",
    "Actor", "ActorContext", "ActorError", "AppQueue", "CallbackRegistry", "ErrorCode", "Op", "OpError",
    "OpQueue", "Runtime", "TimerHeap", "decode_batch", "encode_batch", "on",
]


def __getattr__(name: str) -> object:
    if name in ("AppQueue", "Runtime"):
        from . import runtime

        return getattr(runtime, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
