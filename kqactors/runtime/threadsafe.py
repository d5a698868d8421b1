"""Runs in: any host process (and the in-process transport). Owns ``ThreadInbox``, the one thread-safe way to hand
an op to an actor on its own host: a worker thread (e.g. a blocking DNS lookup) posts, the host loop delivers.

The host loop is single-threaded and only wakes for its inbox, timers and registered file descriptors, so the
inbox is a pipe whose read end the actor registers in the loop: ``post`` queues the op and writes one byte;
the loop sees the pipe readable and the ops go to the actor's mailbox as ordinary ops sent to itself.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from typing import TYPE_CHECKING

from .op import Op

if TYPE_CHECKING:
    from .actor import ActorContext


class ThreadInbox:
    """Ops posted from any thread, served on ``ctx``'s actor mailbox. Close it in the actor's on_stop."""

    def __init__(self, ctx: ActorContext) -> None:
        self._ctx = ctx
        self._ops: deque[Op] = deque()
        self._lock = threading.Lock()
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        os.set_blocking(self._write_fd, False)
        self.closed = False
        ctx.register_fd(self._read_fd, self._drain)

    def post(self, op: Op) -> bool:
        """Thread-safe: deliver ``op`` to the actor on its loop. False if the inbox is closed (op dropped)."""
        with self._lock:
            if self.closed:
                return False
            self._ops.append(op)
            try:
                os.write(self._write_fd, b"\0")
            except BlockingIOError:
                pass  # the pipe is full of wake-ups already: the loop will drain every queued op anyway
        return True

    def _drain(self) -> None:
        try:
            while os.read(self._read_fd, 4096):
                pass
        except BlockingIOError:
            pass
        ctx = self._ctx
        while self._ops:
            ctx.send(ctx.name, self._ops.popleft())

    def close(self) -> None:
        with self._lock:
            if self.closed:
                return
            self.closed = True
            self._ops.clear()
        try:
            self._ctx.unregister_fd(self._read_fd)
        finally:
            os.close(self._read_fd)
            os.close(self._write_fd)
