"""Runs in: the app process, on the thread of an asyncio event loop, plus at most one worker thread per client
for the few calls that block (metadata, synchronous commits, close). Owns the bridge between one client's
app inbox and that event loop (``LoopDriver``) and the adapters that let the application's callbacks be
coroutine functions (``loop_callback``).

How the loop is woken (docs/runtime.md, "Request/reply hot path", for the inbox itself): the driver watches
the runtime's ``wakeup_fd()`` (ZeroMQ's ZMQ_FD of the app's PULL socket) with ``loop.add_reader``. When it turns
readable the driver routes what has arrived with ``Runtime.pump_nowait()`` (never blocking), lets its client
serve the ops (the producer resolves delivery futures) and wakes every coroutine waiting in ``wait()``.
ZeroMQ's descriptor is edge-style: a thread that pumps the same inbox (a blocking request on the worker, the
producer's topic resolver) may take the signal of ops it leaves behind. So an op routed by another thread
wakes the loop through the queues' ``on_enqueue`` hook, every call on the worker is followed by a drain, and
while anything waits a 10 ms tick drains too; none of it costs a thread per call.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import logging
import threading
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from kqactors.runtime.op import ActorError
from kqactors.runtime.runtime import AppQueue, Runtime

__all__ = ["LoopDriver", "loop_callback"]

_log = logging.getLogger("kqactors.aio")

T = TypeVar("T")

#: while a future or a consume() waits, the inbox is drained at least this often (see the module docstring)
SAFETY_TICK_S = 0.01
#: another thread was pumping the inbox: look again after this long (the reader is paused meanwhile)
RETRY_S = 0.001
#: pump_nowait() calls in one drain before the rest is left to the next loop iteration
MAX_PUMPS_PER_DRAIN = 16

_get_ident = threading.get_ident


async def _await(awaitable: Awaitable[T]) -> T:
    return await awaitable


class LoopDriver:
    """Drives one client's app inbox from an asyncio event loop (see the module docstring).

    ``serve()`` is the client's own non-blocking serving of what was routed (the producer's ``poll(0)``; a
    consumer serves in ``consume()`` itself and passes a no-op). ``queues`` are the app queues whose ops
    should wake waiting coroutines when another thread routes them (the events queue, a group queue).
    ``active()`` says whether something still waits for ops (pending deliveries): the safety tick runs
    while it or a ``wait()`` is pending."""

    def __init__(self, loop: asyncio.AbstractEventLoop, runtime: Runtime, serve: Callable[[], Any],
                 queues: Iterable[AppQueue], *, active: Callable[[], bool] | None = None,
                 executor: concurrent.futures.Executor | None = None) -> None:
        self.loop = loop
        self.loop_thread = _get_ident()
        self._rt = runtime
        self._serve = serve
        self._active = active
        self._queues = list(queues)
        self._waiters: set[asyncio.Future[None]] = set()
        self._kick_pending = False
        self._ticker: asyncio.TimerHandle | None = None
        self._retry: asyncio.TimerHandle | None = None
        self._closed = False
        self._own_executor = executor is None
        self._executor = executor
        #: tasks running coroutine callbacks started on the loop thread (kept so they are not collected)
        self.tasks: set[asyncio.Task[Any]] = set()
        for queue in self._queues:
            queue.on_enqueue = self._on_enqueue
        self._fd = runtime.wakeup_fd()
        if self._fd is not None:
            loop.add_reader(self._fd, self.drain)
        self._reading = self._fd is not None

    # ---- pumping ---------------------------------------------------------------------------------------------
    def drain(self) -> None:
        """Route everything that has arrived, let the client serve it and wake the waiters. Never blocks."""
        if self._closed:
            return
        pump = self._rt.pump_nowait
        try:
            for _ in range(MAX_PUMPS_PER_DRAIN):
                state = pump()
                if state is None:
                    self._pause_reader()
                    break
                if not state:
                    break
            else:
                self.loop.call_soon(self.drain)  # a flood: let other callbacks run before the rest
        except ActorError:  # the runtime is closing or closed: nothing more will arrive
            self._wake_all()
            return
        try:
            self._serve()
        finally:
            self._wake_all()

    def kick(self) -> None:
        """Drain on the loop soon; callable from any thread."""
        if _get_ident() == self.loop_thread:
            self.loop.call_soon(self.drain)
            return
        if self._kick_pending or self._closed:
            return
        self._kick_pending = True
        try:
            self.loop.call_soon_threadsafe(self._kicked)
        except RuntimeError:  # the loop is closed
            self._kick_pending = False

    def _kicked(self) -> None:
        self._kick_pending = False
        self.drain()

    def _on_enqueue(self, _queue: AppQueue) -> None:
        if _get_ident() == self.loop_thread:
            if self._waiters:
                self._wake_all()
        else:
            self.kick()

    def _pause_reader(self) -> None:
        """Another thread is pumping: the descriptor may stay readable until it has used the socket, so stop
        watching it for RETRY_S instead of being called in a loop meanwhile."""
        if self._reading and self._fd is not None:
            self.loop.remove_reader(self._fd)
            self._reading = False
        if self._retry is None:
            self._retry = self.loop.call_later(RETRY_S, self._resume_reader)

    def _resume_reader(self) -> None:
        self._retry = None
        if self._closed:
            return
        if not self._reading and self._fd is not None:
            self.loop.add_reader(self._fd, self.drain)
            self._reading = True
        self.drain()

    # ---- waiting -----------------------------------------------------------------------------------------------
    def _wake_all(self) -> None:
        if self._waiters:
            waiters, self._waiters = self._waiters, set()
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    async def wait(self, timeout: float) -> None:
        """Return when ops were routed for this client (or the driver closed), or after ``timeout`` seconds."""
        if self._closed:
            return
        fut: asyncio.Future[None] = self.loop.create_future()
        self._waiters.add(fut)
        self.ensure_ticking()
        timer = None
        if timeout != float("inf"):
            timer = self.loop.call_later(max(0.0, timeout), _resolve, fut)
        try:
            await fut
        finally:
            self._waiters.discard(fut)
            if timer is not None:
                timer.cancel()

    def ensure_ticking(self) -> None:
        """Start the safety tick if it is not running (it stops by itself once nothing waits)."""
        if self._ticker is None and not self._closed:
            self._ticker = self.loop.call_later(SAFETY_TICK_S, self._tick)

    def _tick(self) -> None:
        self._ticker = None
        self.drain()
        if self._waiters or (self._active is not None and self._active()):
            self.ensure_ticking()

    # ---- the worker ------------------------------------------------------------------------------------------
    def executor(self) -> concurrent.futures.Executor:
        """The application's executor, or this client's own single worker thread (started on first use)."""
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="kqactors-aio")
        return self._executor

    async def run_blocking(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a call that may block (a request and its reply) on the worker; the loop drains afterwards,
        since the worker pumped the inbox meanwhile."""
        try:
            return await self.loop.run_in_executor(self.executor(), functools.partial(fn, *args, **kwargs))
        finally:
            if not self._closed:
                self.drain()

    # ---- callbacks ---------------------------------------------------------------------------------------------
    def start_task(self, awaitable: Awaitable[Any]) -> None:
        """Run a callback's coroutine as a task of the loop (on the loop thread, where nothing can wait for
        it); its exception goes to the loop's exception handler."""
        task = self.loop.create_task(_await(awaitable))
        self.tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.loop.call_exception_handler({"message": "kqactors.aio: a callback raised",
                                              "exception": task.exception(), "task": task})

    # ---- closing -----------------------------------------------------------------------------------------------
    def detach(self) -> None:
        """Stop watching the inbox (before the runtime closes its socket) and wake every waiter. The worker
        stays usable for the close itself."""
        if self._closed:
            return
        self._closed = True
        if self._reading and self._fd is not None:
            try:
                self.loop.remove_reader(self._fd)
            except (OSError, ValueError):
                pass
            self._reading = False
        for handle in (self._ticker, self._retry):
            if handle is not None:
                handle.cancel()
        self._ticker = self._retry = None
        for queue in self._queues:
            if queue.on_enqueue == self._on_enqueue:
                queue.on_enqueue = None
        self._wake_all()

    def abandon(self) -> None:
        """Detach from any thread (the client was garbage-collected unclosed): the loop stops watching the
        inbox and drops its references; the sync client's processes stop when it is closed, collected or at
        interpreter exit, as without asyncio."""
        if self._closed:
            return
        if _get_ident() == self.loop_thread:
            self.detach()
            return
        try:
            self.loop.call_soon_threadsafe(self.detach)
        except RuntimeError:  # the loop is closed: nothing watches the inbox any more
            pass

    @property
    def closed(self) -> bool:
        return self._closed

    async def shutdown_executor(self) -> None:
        """Stop this client's own worker thread (an application's executor is left alone)."""
        executor, self._executor = self._executor, None
        if executor is not None and self._own_executor:
            await self.loop.run_in_executor(None, functools.partial(executor.shutdown, wait=True))


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def loop_callback(driver_ref: Callable[[], LoopDriver | None], fn: Callable[..., Any],
                  replace_first: Any = None,
                  around: Callable[[Awaitable[Any]], Awaitable[Any]] | None = None) -> Callable[..., Any]:
    """A plain callable for the sync client that calls ``fn``, which may be a coroutine function.

    Called on the worker thread (a rebalance or commit served there, close), a coroutine runs on the loop
    and the worker waits for it, as confluent-kafka's asyncio clients do. Called on the loop thread (errors
    and statistics served while the loop pumps), nothing may block: the coroutine becomes a task.
    ``replace_first`` replaces the first argument (the sync consumer → the AIOConsumer); ``around(awaitable)``
    returns the coroutine the loop runs for the worker (the consumer marks its callbacks' calls re-entrant).
    A callback that raises makes the sync client's call raise, as a plain callback would."""

    def call(*args: Any) -> Any:
        if replace_first is not None and args:
            args = (replace_first, *args[1:])
        result = fn(*args)
        if not inspect.isawaitable(result):
            return result
        driver = driver_ref()
        if driver is None:
            _log.warning("kqactors.aio: a coroutine callback was dropped: its client is gone")
            return None
        if _get_ident() == driver.loop_thread:
            driver.start_task(result)
            return None
        coro = around(result) if around is not None else _await(result)
        return asyncio.run_coroutine_threadsafe(coro, driver.loop).result()  # type: ignore[arg-type]

    return call
