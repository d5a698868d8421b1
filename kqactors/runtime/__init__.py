"""Runs in: every process. The actor runtime: ops, queues, actors, hosts and their supervision.

Imports nothing Kafka-specific; the Kafka layer maps :class:`ActorError` codes onto librdkafka's.
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
from .runtime import AppQueue, Runtime
from .timers import TimerHeap

__all__ = [
    "APP", "CB", "CHILD_EXITED", "POISON", "REPLY", "TERMINATE",
    "Actor", "ActorContext", "ActorError", "AppQueue", "CallbackRegistry", "ErrorCode", "Op", "OpError",
    "OpQueue", "Runtime", "TimerHeap", "decode_batch", "encode_batch", "on",
]
