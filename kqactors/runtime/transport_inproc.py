"""Runs in: the app process (tests). Owns the in-process transport: the same hosts, actors, supervision and
wire codec as the ZeroMQ transport, but every host is a HostCore object driven by the app's own thread.

Nothing runs unless the app waits (request, poll, serve), so tests are deterministic: ops are served in
a fixed order and no thread or process races. Every batch still goes through encode/decode, so an op that
could not cross a process boundary fails here too. "Killing" a host throws its HostCore away.
"""

from __future__ import annotations

import select
import time
from collections import deque
from collections.abc import Callable

from .host import APP_KEY, SUPERVISOR_KEY, HostCore
from .op import REPLY, SUPERVISOR, ActorError, ErrorCode, Op, decode_batch, encode_batch

MAX_ROUNDS = 10_000  # guards against two actors ping-ponging forever inside one pump


class InprocNetwork:
    """Hosts as objects; implements the supervisor's ControlChannel and the app's send/recv."""

    def __init__(self, on_death: Callable[[str, int | None], None] | None = None) -> None:
        self.cores: dict[str, HostCore] = {}
        self.app_inbox: deque[Op] = deque()
        self.sup_inbox: deque[Op] = deque()
        self.on_death = on_death
        self._req_id = 0

    # -- delivery ---------------------------------------------------------------------------------
    def transmit(self, key: str, ops: list[Op]) -> None:
        frames = [bytes(f) for f in encode_batch(ops)]
        delivered = decode_batch(frames)
        if key == APP_KEY:
            self.app_inbox.extend(delivered)
        elif key == SUPERVISOR_KEY:
            self.sup_inbox.extend(delivered)
        else:
            core = self.cores.get(key)
            if core is not None:  # a dead host's ops are lost, as with a killed process
                core.deliver(delivered)

    def run_all(self) -> int:
        """Run every host until none has work left (timers that are due included)."""
        served = 0
        for _ in range(MAX_ROUNDS):
            now = time.monotonic()
            busy = False
            for core in list(self.cores.values()):
                due = core.next_deadline()
                if core.has_work() or (due is not None and due <= now):
                    served += core.run()
                    busy = True
            if not busy:
                return served
        return served

    def _next_due(self) -> float | None:
        dues = [d for d in (c.next_deadline() for c in self.cores.values()) if d is not None]
        return min(dues) if dues else None

    def _idle_wait(self, deadline: float) -> None:
        """Sleep until the next timer or the deadline, waking early for actor-owned file descriptors."""
        wake = deadline
        due = self._next_due()
        if due is not None and due < wake:
            wake = due
        delay = wake - time.monotonic()
        if delay <= 0:
            return
        readers = {fd: c for c in self.cores.values() for fd, (_, r, _) in c.fds.items() if r}
        writers = {fd: c for c in self.cores.values() for fd, (_, _, w) in c.fds.items() if w}
        if not readers and not writers:
            time.sleep(delay)
            return
        readable, writable, _ = select.select(list(readers), list(writers), [], delay)
        for fd in set(readable) | set(writable):
            core = readers.get(fd) or writers[fd]
            core.fd_event(fd, fd in readable, fd in writable)

    def recv(self, timeout: float) -> list[Op]:
        """Run the hosts until ops for the app appear or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        while True:
            self.run_all()
            if self.app_inbox:
                ops = list(self.app_inbox)
                self.app_inbox.clear()
                return ops
            if time.monotonic() >= deadline:
                return []
            self._idle_wait(deadline)

    # -- ControlChannel -----------------------------------------------------------------------------
    def start_hosts(self, keys: list[str], timeout: float) -> None:
        for key in keys:
            self.cores[key] = HostCore(key, self.transmit)

    def send(self, key: str, ops: list[Op]) -> None:
        self.transmit(key, ops)

    def call(self, key: str, op: Op, timeout: float) -> Op:
        self._req_id += 1
        op.req_id = self._req_id
        op.reply_to = (SUPERVISOR, 0, 0)
        self.transmit(key, [op])
        self.run_all()
        while self.sup_inbox:
            reply = self.sup_inbox.popleft()
            if reply.flags & REPLY and reply.req_id == op.req_id:
                return reply
        raise ActorError(ErrorCode.DEAD_ACTOR, f"host {key} did not answer {op.type}")

    def forget(self, key: str) -> None:
        pass

    def kill(self, key: str) -> None:
        """Simulated kill -9: the host's state is gone; the supervisor restarts it (inline)."""
        if self.cores.pop(key, None) is None:
            raise ActorError(ErrorCode.DEAD_ACTOR, f"host {key} is not running")
        if self.on_death is not None:
            self.on_death(key, -9)

    def close(self) -> None:
        for core in self.cores.values():
            core.terminate()
        self.cores.clear()
        self.app_inbox.clear()
        self.sup_inbox.clear()
