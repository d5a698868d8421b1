"""Runs in: the app process. Owns Runtime, the public entry of the actor runtime: it starts the host
processes (through the supervisor), places named actors on them, and gives the app its mailbox: send,
blocking and asynchronous requests, reply queues the app polls, callbacks, monitors (ACTORS_DOWN notices
when a host dies) and an orderly close().

Only the app blocks. Fork-safe: a Runtime used from a forked child raises ActorError(FORKED) at once.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
import weakref
import zlib
from collections.abc import Callable, Iterable
from typing import Any

import zmq

from .host import ACTOR_SPAWNED, ACTOR_STOPPED, APP_KEY, HOST_DOWN
from .op import ACTORS_DOWN, APP, HOST_CONTROL, REPLY, ActorError, ErrorCode, Op, OpError
from .process_control import ZmqControl
from .queue import CallbackRegistry, OpQueue
from .supervisor import Supervisor
from .transport_inproc import InprocNetwork
from .transport_zmq import ZmqInbox, ZmqOutbox, make_run_dir, new_context, remove_run_dir

log = logging.getLogger(__name__)

TRANSPORTS = ("zmq", "inproc")
PUMP_SLICE = 0.1  # seconds one pump may block before the waiting loop re-checks (closing, deadlines)
# A blocking request first polls for its reply without sleeping, for up to this long. Only the requesting
# app thread spins (hosts never do): it skips the wake-up of a sleeping thread on an idle core, about a third
# of a round trip on a quiet machine, for at most this much CPU per request; the app makes blocking requests
# only for metadata, offsets and group calls, never per message.
REQUEST_SPIN_S = 0.001
RECV_WAIT_S = 2.0  # close() waits this long at most for a receive in progress (one lasts PUMP_SLICE at most)


def _mark_forked_in_child() -> None:
    # Do not touch sockets here: the child owns copies of the parent's zmq state, which it must not use.
    for plumbing in list(_live_plumbing):
        plumbing.forked = True


_live_plumbing: weakref.WeakSet = weakref.WeakSet()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_mark_forked_in_child)


class AppQueue(OpQueue):
    """A queue in the app, addressable by actors as ("app", qid). Its ``version`` is the reply barrier:
    bump it and replies to requests made under an older version are dropped when served."""

    def __init__(self, qid: int, waiter: Callable, callbacks: CallbackRegistry,
                 serve: Callable[[Op], Any] | None = None) -> None:
        super().__init__(serve, name=f"app/{qid}", callbacks=callbacks, waiter=waiter,
                         barrier=lambda op: self.version)
        self.qid = qid
        self.version = 1

    def _has_ops(self) -> bool:
        return bool(self._heap) if self._fwd is None else bool(self.destination()._heap)

    def bump_version(self) -> int:
        self.version += 1
        return self.version

    def poll(self, timeout: float = 0.0) -> Op | None:
        """Return the next op (outdated ones skipped), waiting up to ``timeout`` seconds; None if none."""
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            dest = self if self._fwd is None else self.destination()
            if not dest._heap:
                self.waiter(self._has_ops, deadline)
                dest = self.destination()
                if not dest._heap:
                    return None
            op = dest.pop()
            if op is None:
                continue
            if op.version and dest.is_outdated(op):
                dest.dropped_outdated += 1
                continue
            return op


class _AppPending:
    __slots__ = ("target", "queue", "op_type", "version")

    def __init__(self, target: str, queue: AppQueue, op_type: str, version: int) -> None:
        self.target = target
        self.queue = queue
        self.op_type = op_type
        self.version = version

    def error_op(self, req_id: int, code: str, message: str) -> Op:
        """The one reply a request gets when no real reply can come (timeout, dead host, close)."""
        return Op(self.op_type, flags=REPLY, req_id=req_id, target=APP, qid=self.queue.qid,
                  version=self.version, error=OpError(code, message))


class _Plumbing:
    """Processes, sockets and files of one Runtime; closable from a weakref finalizer or atexit."""

    def __init__(self, transport: str) -> None:
        self.pid = os.getpid()
        self.transport = transport
        self.forked = False
        self.closing = False  # set first by Runtime.close so waiting threads stop pumping
        self.closed = False
        self.context: zmq.Context | None = None
        self.run_dir: str | None = None
        self.inbox: ZmqInbox | None = None
        self.outbox: ZmqOutbox | None = None
        self.control: ZmqControl | InprocNetwork | None = None
        self.supervisor: Supervisor | None = None
        # The monitors' queues (Runtime.monitor). Weak: a queue's waiter is its Runtime, which must stay
        # collectable while the supervisor (held here) runs.
        self.monitors: weakref.WeakSet[AppQueue] = weakref.WeakSet()
        self.send_lock = threading.Lock()
        # Held by the thread that receives on the inbox (the app's pump), so close() never closes a socket
        # another thread is inside: zmq sockets are not thread-safe, and closing one under a blocked
        # receive made the context's teardown abort or hang at interpreter exit.
        self.recv_lock = threading.Lock()
        self.close_lock = threading.Lock()
        _live_plumbing.add(self)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the hosts and close every socket and file. Also runs from the Runtime's finalizer at
        interpreter exit, while the app's daemon threads may still be pumping: ``closing`` stops new
        receives, and the sockets close only once the receive in progress (at most PUMP_SLICE) is over."""
        self.closing = True
        with self.close_lock:
            if self.closed:
                return
            self.closed = True
            if self.forked or os.getpid() != self.pid:
                return  # the parent owns these processes and sockets
            receiving = self.recv_lock.acquire(timeout=RECV_WAIT_S)
            if self.supervisor is not None:
                self.supervisor.closing.set()
            if isinstance(self.control, ZmqControl):
                self.control.close(timeout)
            elif isinstance(self.control, InprocNetwork):
                self.control.close()
            try:
                with self.send_lock:
                    if self.outbox is not None:
                        self.outbox.close()
                    if self.inbox is not None:
                        self.inbox.close()
                if self.context is not None:
                    # every socket of the context is closed by now (linger 0): term() returns at once
                    self.context.term()
            finally:
                if receiving:
                    self.recv_lock.release()
                if self.run_dir is not None:
                    remove_run_dir(self.run_dir)


class Runtime:
    """The actor runtime as seen from the app.

    >>> with Runtime(hosts=2) as rt:
    ...     rt.spawn("echo", "kqactors.runtime.testing_actors:EchoActor")
    ...     rt.request("echo", Op("ECHO", {"x": 1}), timeout=5).payload
    """

    #: the Supervisor class (a shared runtime plugs in its own, see shared.py)
    supervisor_factory: Callable[..., Supervisor] = Supervisor
    #: the app's name as actors see it (an attached app's is its namespace's, see shared.py)
    _app: str = APP

    def __init__(self, hosts: int = 1, *, transport: str = "zmq", restart_delay: float = 0.5,
                 start_timeout: float = 30.0, log_level: str = "WARNING", run_dir: str | None = None,
                 wait_ready: bool = True) -> None:
        """``wait_ready=False``: return once the host processes are launched, not when they are READY (a
        client's constructor returns in milliseconds); what is sent to them meanwhile waits for them.
        ``run_dir``: a shared runtime's directory (shared.py), made by its caller."""
        if transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {TRANSPORTS}, got {transport!r}")
        if not isinstance(hosts, int) or hosts < 1:
            raise ValueError(f"hosts must be a positive int, got {hosts!r}")
        if restart_delay < 0:
            raise ValueError("restart_delay must be >= 0")
        p = _Plumbing(transport)
        self._init_state(p, [f"h{i}" for i in range(hosts)])
        try:
            if transport == "zmq":
                p.context = new_context()
                if run_dir is None:
                    p.run_dir = make_run_dir()
                else:  # a shared runtime's (shared.py): made by its caller with the permissions it wants
                    p.run_dir = run_dir
                p.inbox = ZmqInbox(p.context, p.run_dir, APP_KEY)
                p.outbox = ZmqOutbox(p.context, p.run_dir)
                p.control = ZmqControl(p.context, p.run_dir, self._host_died_hook(p), log_level)
            else:
                p.control = InprocNetwork(self._host_died_hook(p))
            p.supervisor = self.supervisor_factory(p.control, self.host_keys, restart_delay,
                                                   on_down=self._down_hook(p))
            p.supervisor.start(start_timeout, wait=wait_ready)
        except BaseException:
            p.close(timeout=1.0)
            raise

    def _init_state(self, p: _Plumbing, host_keys: list[str]) -> None:
        """The app-side state every Runtime has (also an attached one's, see shared.py)."""
        self._plumbing = p
        self._callbacks = CallbackRegistry()
        self._qids = itertools.count(1)
        self._req_ids = itertools.count(1)
        self._queues: weakref.WeakValueDictionary[int, AppQueue] = weakref.WeakValueDictionary()
        self._pending: dict[int, _AppPending] = {}
        self._deadlines: list[tuple[float, int]] = []
        self._pending_lock = threading.Lock()
        self._cond = threading.Condition()
        self._pumping = False
        self._waiting = 0  # threads blocked in _cond.wait while another one pumps
        self._thread_state = threading.local()
        self.host_keys = host_keys
        self.events = AppQueue(0, self._wait_until, self._callbacks)
        self._queues[0] = self.events
        self._finalizer = weakref.finalize(self, p.close)

    @staticmethod
    def _host_died_hook(p: _Plumbing) -> Callable[[str, int | None], None]:
        def hook(key: str, exitcode: int | None) -> None:
            if p.supervisor is not None:
                p.supervisor.host_died(key, exitcode)
        return hook

    @staticmethod
    def _down_hook(p: _Plumbing) -> Callable[[str, list[str], int, int | None], None]:
        def hook(key: str, names: list[str], restarts: int, exitcode: int | None) -> None:
            payload = {"host": key, "names": names, "restarts": restarts, "exitcode": exitcode}
            for queue in list(p.monitors):
                queue.enqueue(Op(ACTORS_DOWN, dict(payload), target=APP, qid=queue.qid))
        return hook

    # -- lifecycle --------------------------------------------------------------------------------
    def _check_usable(self) -> None:
        p = self._plumbing
        if p.forked or os.getpid() != p.pid:
            raise ActorError(ErrorCode.FORKED,
                             f"this runtime was created in process {p.pid} and cannot be used in forked child "
                             f"{os.getpid()}; create a new client in the child process")
        if p.closing or p.closed:
            raise ActorError(ErrorCode.CLOSED, "the runtime is closed")

    @property
    def closed(self) -> bool:
        return self._plumbing.closed

    def close(self, timeout: float = 5.0) -> None:
        """Stop every host (TERMINATE, then kill after ``timeout``), fail pending requests, remove files."""
        p = self._plumbing
        if p.closed:
            return
        p.closing = True
        with self._cond:  # let a thread that is pumping finish its slice before the sockets close
            deadline = time.monotonic() + 1.0
            while self._pumping and time.monotonic() < deadline:
                self._cond.wait(0.05)
        p.close(timeout)
        with self._pending_lock:
            pending, self._pending = self._pending, {}
            self._deadlines.clear()
        for req_id, entry in pending.items():
            entry.queue.enqueue(entry.error_op(req_id, ErrorCode.TERMINATED, "the runtime was closed"))
        with self._cond:
            self._cond.notify_all()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def run_dir(self) -> str | None:
        return self._plumbing.run_dir

    # -- placement ------------------------------------------------------------------------------------
    def spawn(self, name: str, actor_factory: str, args: dict | None = None, *, host: int | str | None = None,
              parent: str = APP, timeout: float = 30.0, wait: bool = True) -> str:
        """Create actor ``name`` from the importable ``"module:Factory"`` with plain-data ``args`` on a
        host (index or key; default: the host with fewest actors). Returns the host key. ``wait=False``: do
        not wait for the host's answer (ops sent to the actor next are served after it was created; a
        failure is only logged by the host)."""
        self._check_usable()
        sup = self._plumbing.supervisor
        if host is None:
            counts = {k: 0 for k in self.host_keys}
            for spec in sup.specs.values():
                counts[spec.host] += 1
            key = min(self.host_keys, key=lambda k: counts[k])
        else:
            key = self._host_key(host)
        sup.spawn(name, actor_factory, args, parent, key, timeout, wait)
        return key

    def add_hosts(self, count: int = 1, *, wait: bool = False, timeout: float = 30.0) -> list[str]:
        """Start ``count`` more host processes (keys h<N>, N after the last) and return their keys: placement
        that follows the load starts hosts when it needs them. ``wait=False`` (default) returns once they are
        launched; ops and spawns sent meanwhile wait in their sockets, as with ``Runtime(wait_ready=False)``."""
        self._check_usable()
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValueError(f"count must be a positive int, got {count!r}")
        sup = self._plumbing.supervisor
        with sup._lock:  # noqa: SLF001 - one numbering for concurrent callers
            start = len(self.host_keys)
            keys = [f"h{start + i}" for i in range(count)]
            sup.add_hosts(keys, timeout, wait)
            self.host_keys.extend(keys)
        return keys

    def retire_host(self, key: str) -> list[str]:
        """Stop host ``key`` (not the first) for good: placement that follows the load gives back a host once it
        has moved its work away. Actors still on it are stopped; its process exits (TERMINATE) and is not
        restarted. Its key keeps its index in ``host_keys`` (no other host's index changes) but can no longer
        be spawned on. Returns the names of the actors stopped with it."""
        self._check_usable()
        return self._plumbing.supervisor.retire_host(self._host_key(key))

    def preload(self, modules: Iterable[str], hosts: Iterable[int | str]) -> None:
        """Have ``hosts`` (indexes or keys) import ``modules`` (names, or the "module:Factory" paths given to
        spawn) in the background, all at once. Actors spawned there later start without paying the import
        one host after the other, and nothing waits for it now; a module that fails to import fails the
        spawn that needs it, as it would have anyway."""
        self._check_usable()
        names = [str(module) for module in modules]
        keys = [self._host_key(host) for host in hosts]
        for key in keys:
            self._plumbing.supervisor.preload(key, names)

    def _host_key(self, host: int | str) -> str:
        if isinstance(host, int) and not isinstance(host, bool):
            if not 0 <= host < len(self.host_keys):
                raise ValueError(f"host index {host} out of range (0..{len(self.host_keys) - 1})")
            return self.host_keys[host]
        if host not in self.host_keys:
            raise ValueError(f"unknown host {host!r}; hosts are {self.host_keys}")
        return host

    def stop(self, name: str) -> None:
        """Stop actor ``name`` (its on_stop runs) and forget it; it is not restarted."""
        self._check_usable()
        self._plumbing.supervisor.stop(name)

    def host_of(self, name: str) -> str | None:
        return self._plumbing.supervisor.host_of(name)

    def host_pid(self, key: str) -> int | None:
        """The OS pid of host ``key`` (None for the in-process transport or while it is down)."""
        control = self._plumbing.control
        return control.pid(key) if isinstance(control, ZmqControl) else None

    def host_ready(self, key: str) -> bool:
        """True once host ``key`` runs (it reported READY); never blocks. Always True in-process."""
        control = self._plumbing.control
        return control.is_ready(key) if isinstance(control, ZmqControl) else True

    def host_restarts(self, key: str) -> int:
        return self._plumbing.supervisor.restarts.get(key, 0)

    def kill_host(self, key: str) -> None:
        """Fault injection: kill -9 a host (simulated on the in-process transport)."""
        self._check_usable()
        self._plumbing.control.kill(key)

    # -- sending ----------------------------------------------------------------------------------------
    def _route_key(self, name: str) -> str:
        sup = self._plumbing.supervisor
        key = sup.host_of(name)
        if key is None:
            raise ActorError(ErrorCode.UNKNOWN_ACTOR, f"no actor named {name!r}")
        if key in sup.down_hosts:
            raise ActorError(ErrorCode.DEAD_ACTOR, f"{name} is restarting (host {key} died)")
        return key

    def _transmit(self, key: str, ops: list[Op]) -> None:
        p = self._plumbing
        with p.send_lock:
            if p.closed:
                raise ActorError(ErrorCode.CLOSED, "the runtime is closed")
            if p.outbox is not None:
                p.outbox.send(key, ops)
            else:
                p.control.transmit(key, ops)

    def send(self, name: str, op: Op, *, qid: int = 0) -> None:
        """Fire-and-forget ``op`` to actor ``name``."""
        self._check_usable()
        op.target = name
        op.qid = qid
        op.sender = self._app
        self._transmit(self._route_key(name), [op])

    def send_many(self, items: Iterable[tuple[str, Op]]) -> None:
        """Send many ops with one zmq message per destination host (the batching path)."""
        self._check_usable()
        by_host: dict[str, list[Op]] = {}
        for name, op in items:
            op.target = name
            op.sender = self._app
            by_host.setdefault(self._route_key(name), []).append(op)
        for key, ops in by_host.items():
            self._transmit(key, ops)

    def new_queue(self, serve: Callable[[Op], Any] | None = None) -> AppQueue:
        """A reply/event queue in the app; actors address it as ("app", queue.qid)."""
        self._check_usable()
        queue = AppQueue(next(self._qids), self._wait_until, self._callbacks, serve)
        self._queues[queue.qid] = queue
        return queue

    def monitor(self, queue: AppQueue | None = None) -> AppQueue:
        """Monitor every actor, as an Erlang process monitors another: when a host dies, an ACTORS_DOWN op
        (payload: host, names, restarts, exitcode) lands on ``queue`` (default: a new one, returned). The
        supervisor enqueues it itself the moment it learns of the death, before the restart and before
        anything can reach the restarted actors, without the transport: a thread that never pumps (a
        producer's flusher) sees it too, with ``queue.pop()``. Set ``queue.on_enqueue`` to be woken. The
        runtime keeps only a weak reference: a queue nobody holds stops being notified."""
        self._check_usable()
        if queue is None:
            queue = self.new_queue()
        elif not isinstance(queue, AppQueue):
            raise TypeError("queue must come from Runtime.new_queue() (or be Runtime.events)")
        self._plumbing.monitors.add(queue)
        return queue

    def register_callback(self, fn: Callable[[Op], Any]) -> int:
        """Register ``fn`` for CB ops sent to the app; actors put the returned id in ``Op.cb_id``."""
        return self._callbacks.register(fn)

    def request_async(self, name: str, op: Op, reply_queue: AppQueue, timeout: float) -> int:
        """Send a request whose one reply (or TIMED_OUT / DEAD_ACTOR error op) lands on ``reply_queue``."""
        self._check_usable()
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0, got {timeout}")
        if not isinstance(reply_queue, AppQueue):
            raise TypeError("reply_queue must come from Runtime.new_queue()")
        key = self._route_key(name)
        req_id = next(self._req_ids)
        op.target = name
        op.sender = self._app
        op.flags &= ~REPLY
        op.req_id = req_id
        op.reply_to = (self._app, reply_queue.qid, reply_queue.version)
        deadline = time.monotonic() + timeout
        with self._pending_lock:
            self._pending[req_id] = _AppPending(name, reply_queue, op.type, reply_queue.version)
            heapq.heappush(self._deadlines, (deadline, req_id))
        try:
            self._transmit(key, [op])
        except BaseException:
            with self._pending_lock:
                self._pending.pop(req_id, None)
            raise
        return req_id

    def request(self, name: str, op: Op, timeout: float = 10.0) -> Op:
        """Send a request and block for its reply. Raises ActorError if the reply carries an error
        (TIMED_OUT, DEAD_ACTOR, POISON, UNHANDLED... or the actor's own)."""
        queue = getattr(self._thread_state, "queue", None)
        if queue is None:  # one reusable reply queue per app thread (a blocked thread has one request)
            queue = self._thread_state.queue = AppQueue(-1, self._wait_until, self._callbacks)
        req_id = self.request_async(name, op, queue, timeout)
        if self._plumbing.inbox is not None:
            self._spin_for(queue)
        while True:
            reply = queue.poll(timeout + 5.0)  # the request's own deadline produces TIMED_OUT first
            if reply is None:
                with self._pending_lock:
                    self._pending.pop(req_id, None)
                if self._plumbing.closing:
                    raise ActorError(ErrorCode.TERMINATED, "the runtime was closed while waiting for a reply")
                raise ActorError(ErrorCode.TIMED_OUT, f"no reply from {name} within {timeout}s")
            if reply.req_id == req_id:
                break
        if reply.error is not None:
            raise reply.error.to_exception(reply)
        return reply

    def poll(self, timeout: float = 0.0, handler: Callable[[Op], Any] | None = None) -> int:
        """Serve the events queue (CHILD_EXITED, POISON, CB ops, ops sent to ("app", 0))."""
        self._check_usable()
        return self.events.serve(handler, timeout=timeout)

    def sleep(self, seconds: float) -> None:
        """Wait while routing incoming ops (on the in-process transport, this is when hosts run)."""
        self._check_usable()
        self._wait_until(lambda: False, time.monotonic() + seconds)

    # -- event loops ------------------------------------------------------------------------------------
    def wakeup_fd(self) -> int | None:
        """For an event loop (kqactors.aio): the file descriptor of the app's inbox (ZeroMQ's ZMQ_FD of its
        PULL socket), or None on the in-process transport. ZeroMQ signals it edge-style: it becomes readable
        when ops may have arrived and stays so until the socket is next used, so the watcher calls
        ``pump_nowait()`` until that no longer returns True. Watch it only: never read or close it."""
        self._check_usable()
        inbox = self._plumbing.inbox
        return None if inbox is None else int(inbox.socket.getsockopt(zmq.FD))

    def pump_nowait(self, limit: int = 256) -> bool | None:
        """Route up to ``limit`` batches that have already arrived, without blocking (the event loop's pump;
        see ``wakeup_fd``). True: ops were routed and more may wait (call again); False: the inbox was empty;
        None: another thread is pumping (it routes what arrives; try again shortly)."""
        self._check_usable()
        cond = self._cond
        with cond:
            if self._pumping:
                return None
            self._pumping = True
        try:
            p = self._plumbing
            if self._deadlines and self._deadlines[0][0] <= time.monotonic():
                self._expire_pending()
            route = self._route
            if p.inbox is not None:
                batches = p.inbox.recv_within(0, limit)
                for batch in batches:
                    for op in batch:
                        route(op)
                return bool(batches)
            ops = p.control.recv(0.0)
            for op in ops:
                route(op)
            return bool(ops)
        finally:
            with cond:
                self._pumping = False
                if self._waiting:
                    cond.notify_all()

    # -- the app's pump -------------------------------------------------------------------------------
    def _spin_for(self, queue: AppQueue) -> None:
        """Pump without blocking until ``queue`` has an op or REQUEST_SPIN_S passes (see there)."""
        clock = time.perf_counter
        give_up = clock() + REQUEST_SPIN_S
        ready = queue._has_ops
        wait = self._wait_until
        while not ready() and clock() < give_up:
            wait(ready, 0.0)  # a deadline in the past: one non-blocking pump, or none if another thread pumps
            os.sched_yield()  # lets the app's other threads take the GIL meanwhile

    def _wait_until(self, ready: Callable[[], bool], deadline: float) -> None:
        """Block until ``ready()`` or ``deadline``; one waiting thread at a time pumps the transport."""
        p = self._plumbing
        if p.forked or p.closing:
            self._check_usable()
        cond = self._cond
        first = True
        with cond:
            while not ready() and not p.closing:
                remaining = deadline - time.monotonic()
                if remaining <= 0 and not first:
                    return
                first = False
                if self._pumping:
                    if remaining <= 0:
                        return
                    self._waiting += 1
                    try:
                        cond.wait(remaining)
                    finally:
                        self._waiting -= 1
                    continue
                self._pumping = True
                cond.release()
                try:
                    self._pump(remaining if remaining > 0 else 0.0)
                finally:
                    # Cleared before the lock is taken back: a KeyboardInterrupt raised meanwhile must not
                    # leave the pump marked busy, or no other thread would ever pump again.
                    self._pumping = False
                    cond.acquire()
                    if self._waiting:
                        cond.notify_all()

    def _pump(self, timeout: float) -> None:
        """Receive and route what arrives within ``timeout`` (sliced, so close() never waits long)."""
        p = self._plumbing
        if timeout > PUMP_SLICE:
            timeout = PUMP_SLICE
        deadlines = self._deadlines
        if deadlines:
            now = time.monotonic()
            if deadlines[0][0] <= now:
                self._expire_pending()
            if deadlines and deadlines[0][0] - now < timeout:
                timeout = max(0.0, deadlines[0][0] - now)
        inbox = p.inbox
        if inbox is not None:
            # One batch per pump: the waiter re-checks its condition between batches. The timeout is
            # usually PUMP_SLICE, so the socket's RCVTIMEO rarely changes.
            # Whole milliseconds in libzmq's own wait, the sub-millisecond rest in a precise one: a wait
            # rounded up to the millisecond returned up to 1 ms after the caller's deadline (a consume()
            # that got a message kept it that much longer).
            timeout_ms = int(timeout * 1000)
            with p.recv_lock:
                if p.closing:
                    return
                if timeout_ms == 0 and timeout > 0 and not inbox.wait_readable(timeout):
                    batches = []
                else:
                    batches = inbox.recv_within(timeout_ms, 1)
            for batch in batches:
                self._route_all(batch)
        else:
            for op in p.control.recv(timeout):
                self._route(op)
        if deadlines and deadlines[0][0] <= time.monotonic():
            self._expire_pending()

    def _route_all(self, ops: list[Op]) -> None:
        """Route every op of a received batch. A KeyboardInterrupt (Ctrl+C reaches the app's main thread,
        which may be the one pumping) is raised once all of them are routed: an op dropped here would be a
        lost delivery report, fetched batch or reply."""
        route = self._route
        index, count = 0, len(ops)
        interrupted: KeyboardInterrupt | None = None
        while index < count:
            try:
                while index < count:
                    route(ops[index])
                    index += 1
            except KeyboardInterrupt as exc:
                interrupted = exc
                if index < count and self._was_routed(ops[index]):
                    index += 1
        if interrupted is not None:
            raise interrupted

    def _was_routed(self, op: Op) -> bool:
        """After an interrupt inside ``_route(op)``: did the op get where it was going? (Slow; only then.)"""
        if op.flags & REPLY and op.req_id:
            with self._pending_lock:
                return op.req_id not in self._pending
        if op.target == HOST_CONTROL:
            return False  # the supervisor's bookkeeping takes a repeated notice
        queue = (self._queues.get(op.qid) or self.events).destination()
        return any(item[2] is op for item in list(queue._heap))

    def _route(self, op: Op) -> None:
        if op.flags & REPLY and op.req_id:
            with self._pending_lock:
                entry = self._pending.pop(op.req_id, None)
            if entry is not None:  # else: late or duplicate, already answered (exactly once)
                entry.queue.enqueue(op)
            return
        if op.target == HOST_CONTROL:
            if op.type == HOST_DOWN:
                self._host_down(op.payload)
            elif op.type == ACTOR_SPAWNED:
                self._plumbing.supervisor.child_spawned(op.payload)
            elif op.type == ACTOR_STOPPED:
                self._plumbing.supervisor.child_stopped(op.payload)
            return
        queue = self._queues.get(op.qid) or self.events
        queue.enqueue(op)

    def _host_down(self, payload: dict) -> None:
        names = set(payload.get("names") or ())
        p = self._plumbing
        if p.outbox is not None:
            with p.send_lock:
                p.outbox.reset(payload.get("host", ""))
        with self._pending_lock:
            dead = [(rid, e) for rid, e in self._pending.items() if e.target in names]
            for rid, _ in dead:
                del self._pending[rid]
        for rid, entry in dead:
            entry.queue.enqueue(entry.error_op(rid, ErrorCode.DEAD_ACTOR, f"the host of {entry.target} died"))

    def _expire_pending(self) -> None:
        if not self._deadlines:
            return
        now = time.monotonic()
        expired = []
        with self._pending_lock:
            while self._deadlines and self._deadlines[0][0] <= now:
                _, req_id = heapq.heappop(self._deadlines)
                entry = self._pending.pop(req_id, None)
                if entry is not None:
                    expired.append((req_id, entry))
        for req_id, entry in expired:
            entry.queue.enqueue(entry.error_op(req_id, ErrorCode.TIMED_OUT, f"no reply from {entry.target} in time"))


def stable_host_index(name: str, hosts: int) -> int:
    """A placement helper for callers that want name-hashed placement (same name, same host)."""
    return zlib.crc32(name.encode()) % hosts
