"""Runs in: every process (app and hosts). Owns OpQueue (priority, forwarding, serve, version barrier) and
the per-process callback registry that resolves CB ops.

Semantics follow librdkafka's rd_kafka_q_t: ops are served highest priority first, FIFO within a priority;
a queue forwarded to another hands every enqueued op to the end of the forward chain, stamping it with the
serve handler of the queue it was first enqueued on (the outermost queue), so the destination serves it as
the original queue would have; an op whose version is older than its target's current version is dropped
when served (the version barrier). The generic serve loop knows only TERMINATE, CB and versions.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import time
from collections.abc import Callable
from typing import Any

from .op import CB, TERMINATE, Op

log = logging.getLogger(__name__)

Handler = Callable[[Op], Any]


class CallbackRegistry:
    """Callables never cross a process: they are registered here and CB ops carry only the id."""

    def __init__(self) -> None:
        self._callbacks: dict[int, Callable[[Op], Any]] = {}
        self._ids = itertools.count(1)

    def register(self, fn: Callable[[Op], Any]) -> int:
        if not callable(fn):
            raise TypeError(f"callback must be callable, not {type(fn).__name__}")
        cb_id = next(self._ids)
        self._callbacks[cb_id] = fn
        return cb_id

    def unregister(self, cb_id: int) -> None:
        self._callbacks.pop(cb_id, None)

    def resolve(self, cb_id: int) -> Callable[[Op], Any] | None:
        return self._callbacks.get(cb_id)


class OpQueue:
    """A priority op queue with forwarding, a serve handler and a version barrier.

    ``barrier(op)`` returns the current version of the op's target (0 = unversioned); ops with a non-zero
    version older than that are dropped when served. ``on_poison(op, exc)``, when set, makes handler
    exceptions non-fatal: the op is retried once, then handed to ``on_poison``. ``waiter(ready, deadline)``
    lets serve() block (app side only) by pumping the transport until ``ready()`` or the deadline.
    """

    def __init__(
        self,
        serve: Handler | None = None,
        *,
        name: str = "",
        barrier: Callable[[Op], int] | None = None,
        callbacks: CallbackRegistry | None = None,
        on_poison: Callable[[Op, BaseException], None] | None = None,
        on_enqueue: Callable[[OpQueue], None] | None = None,
        waiter: Callable[[Callable[[], bool], float], None] | None = None,
    ) -> None:
        self.name = name
        self.serve_handler = serve
        self.barrier = barrier
        self.callbacks = callbacks
        self.on_poison = on_poison
        self.on_enqueue = on_enqueue
        self.waiter = waiter
        self.terminated = False
        self.dropped_outdated = 0
        self._heap: list[tuple[int, int, Op]] = []
        self._seq = itertools.count()
        self._fwd: OpQueue | None = None

    # -- forwarding -------------------------------------------------------------------------------
    def forward_to(self, dest: OpQueue) -> None:
        """Forward this queue to ``dest``: ops already queued move there, later ones follow."""
        if dest is self:
            raise ValueError("a queue cannot be forwarded to itself")
        node: OpQueue | None = dest
        while node is not None:
            if node is self:
                raise ValueError("forwarding would create a loop")
            node = node._fwd
        self._fwd = dest
        moved = self.purge()
        for op in moved:
            self._stamp_and_push(op)

    def unforward(self) -> None:
        """Stop forwarding; ops already handed on stay where they are."""
        self._fwd = None

    @property
    def forwarded_to(self) -> OpQueue | None:
        return self._fwd

    def destination(self) -> OpQueue:
        """The queue at the end of the forward chain (self when not forwarded)."""
        q = self
        while q._fwd is not None:
            q = q._fwd
        return q

    # -- enqueue / dequeue -------------------------------------------------------------------------
    def enqueue(self, op: Op) -> None:
        self._stamp_and_push(op)

    def _stamp_and_push(self, op: Op) -> None:
        # heappush/heappop on (int, int, op) tuples never call back into Python, so under the GIL they are
        # atomic: app threads may enqueue and pop concurrently without a lock.
        if self._fwd is None:
            dest = self
        else:
            dest = self.destination()
            if op.serve is None and self.serve_handler is not None:
                op.serve = self.serve_handler  # the outermost queue's handler travels with the op
        heapq.heappush(dest._heap, (-op.priority, next(dest._seq), op))
        if dest.on_enqueue is not None:
            dest.on_enqueue(dest)

    def pop(self) -> Op | None:
        """Remove and return the next op (highest priority, then oldest), or None.

        A KeyboardInterrupt (the app's main thread) is raised after a call returns: right after a plain
        heappop it would take the op with it. Here the pop and the store are one C call, so an interrupt
        finds the op in ``popped`` and puts it back (same priority and sequence: same place) before it
        goes on."""
        dest = self if self._fwd is None else self.destination()
        heap = dest._heap
        popped: list[tuple[int, int, Op]] = []
        try:
            popped.extend(map(heapq.heappop, (heap,)))
        except IndexError:
            return None
        except KeyboardInterrupt:
            if popped:
                heapq.heappush(heap, popped[0])
            raise
        return popped[0][2]

    def __len__(self) -> int:
        if self._fwd is None:
            return len(self._heap)
        return len(self.destination()._heap)

    def __bool__(self) -> bool:
        return True

    def purge(self) -> list[Op]:
        """Remove and return every queued op (e.g. to fail them when their owner dies)."""
        ops = [op for _, _, op in sorted(self._heap)]
        self._heap.clear()
        return ops

    # -- serving ------------------------------------------------------------------------------------
    def serve(self, handler: Handler | None = None, *, max_ops: int | None = None, timeout: float = 0.0) -> int:
        """Serve up to ``max_ops`` ops, waiting up to ``timeout`` seconds for the first one.

        Returns the number of ops handled (dropped outdated ops do not count). Stops after a TERMINATE.
        """
        dest = self if self._fwd is None else self.destination()
        if not dest._heap and dest.waiter is not None:
            dest.waiter(lambda: bool(dest._heap) or dest._fwd is not None, time.monotonic() + max(0.0, timeout))
            dest = self.destination()
        served = 0
        limit = -1 if max_ops is None else max_ops
        heap = dest._heap
        dispatch = dest.dispatch
        while served != limit and heap:
            try:
                op = heapq.heappop(heap)[2]
            except IndexError:
                break
            if dispatch(op, handler):
                served += 1
            if dest.terminated:
                break
        return served

    def is_outdated(self, op: Op) -> bool:
        if not op.version or self.barrier is None:
            return False
        current = self.barrier(op)
        return bool(current) and op.version < current

    def dispatch(self, op: Op, handler: Handler | None = None) -> bool:
        """Handle one op as the generic serve loop does. Returns False if it was dropped as outdated."""
        if op.version and self.barrier is not None and self.is_outdated(op):
            self.dropped_outdated += 1
            return False
        if op.flags & CB:
            fn = self.callbacks.resolve(op.cb_id) if self.callbacks is not None else None
            if fn is None:
                log.warning("CB op %s names callback %d, which is not registered here", op.type, op.cb_id)
                return True
        else:
            fn = op.serve or handler or self.serve_handler
            if fn is None:
                if op.type == TERMINATE:
                    self.terminated = True
                else:
                    log.warning("queue %r has no handler for op %s; dropped", self.name, op.type)
                return True
        if self.on_poison is None:
            fn(op)
        else:
            self._call(fn, op)
        if op.type == TERMINATE:
            self.terminated = True
        return True

    def _call(self, fn: Handler, op: Op) -> None:
        try:
            fn(op)
        except Exception:  # noqa: BLE001 - a handler must never take the host down; retry once
            try:
                fn(op)
            except Exception as exc:  # noqa: BLE001
                self.on_poison(op, exc)
