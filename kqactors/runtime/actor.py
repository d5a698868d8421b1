"""Runs in: host processes (and the in-process transport). Owns the Actor base class, the ``@on`` handler
table decorator, the ActorContext actors talk through, and factory loading by dotted path.

An actor is a mailbox plus a handler table. It never blocks on another actor: requests are asynchronous
and their replies (or a timeout error) come back as ops served on the actor's own mailbox.
"""

from __future__ import annotations

import importlib
import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgpack

from .op import APP, ErrorCode, Op, OpError
from .queue import OpQueue

if TYPE_CHECKING:
    from .host import HostCore

log = logging.getLogger(__name__)

NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]+(/[A-Za-z0-9_.\-]+)*$")
RESERVED_NAMES = {APP}


def check_name(name: str) -> None:
    """Actor names are path-like (``main``, ``broker/3``, ``toppar/orders/7``); ``app`` is reserved."""
    if not isinstance(name, str) or not NAME_RE.match(name) or name in RESERVED_NAMES:
        raise ValueError(f"invalid actor name {name!r}: use segments of [A-Za-z0-9_.-] joined by '/', "
                         f"not one of {sorted(RESERVED_NAMES)}")


def check_spec(factory: str, args: dict | None) -> dict:
    """Factories are importable paths and args plain data, so any host can (re)build the actor."""
    if not isinstance(factory, str) or ":" not in factory:
        raise ValueError(f"actor_factory must be an importable 'module:attribute' path, got {factory!r}")
    args = dict(args or {})
    try:
        msgpack.packb(args, use_bin_type=True)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"spawn args must be msgpack-able plain data: {exc}") from exc
    return args


def on(*op_types: str) -> Callable[[Callable], Callable]:
    """Mark a method as the handler for the given op types: ``@on("FETCH") def fetch(self, op): ...``."""
    if not op_types or not all(isinstance(t, str) and t for t in op_types):
        raise TypeError("@on needs one or more op type names")

    def mark(fn: Callable) -> Callable:
        fn._kq_op_types = getattr(fn, "_kq_op_types", ()) + op_types
        return fn

    return mark


class Actor:
    """Base class for actors. Subclasses declare handlers with ``@on`` and may override the hooks.

    ``op_version`` is the version barrier: ops carrying a non-zero version older than it are dropped before
    they reach a handler. Override ``current_version(op)`` if the actor owns several versioned targets.
    """

    _kq_table: dict[str, str] = {}
    op_version: int = 0

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        table: dict[str, str] = {}
        for klass in reversed(cls.__mro__):
            for attr, value in vars(klass).items():
                for op_type in getattr(value, "_kq_op_types", ()):
                    table[op_type] = attr
        cls._kq_table = table

    def __init__(self, ctx: ActorContext, **args: Any) -> None:
        self.ctx = ctx
        self.args = args
        self._handlers = {t: getattr(self, attr) for t, attr in self._kq_table.items()}

    def on_start(self) -> None:
        """Called once the actor is registered and addressable."""

    def on_stop(self) -> None:
        """Called when the host shuts down or the actor is stopped."""

    def current_version(self, op: Op) -> int:
        return self.op_version

    def handle(self, op: Op) -> None:
        handler = self._handlers.get(op.type)
        if handler is None:
            self.on_unhandled(op)
        else:
            handler(op)

    def on_unhandled(self, op: Op) -> None:
        if op.is_request:
            self.ctx.reply(op, Op(op.type, error=OpError(ErrorCode.UNHANDLED,
                                                         f"{self.ctx.name} has no handler for {op.type}")))
        else:
            log.warning("actor %s: no handler for op %s (dropped)", self.ctx.name, op.type)


class ActorContext:
    """What an actor may do: send, reply, request, set timers, own queues and file descriptors."""

    def __init__(self, core: HostCore, name: str, parent: str) -> None:
        self._core = core
        self.name = name
        self.parent = parent

    @property
    def host(self) -> str:
        return self._core.host_key

    def send(self, name: str, op: Op, *, qid: int = 0) -> None:
        """Send ``op`` to actor ``name`` (or to ``app``). Never blocks; delivery is batched per loop turn."""
        op.target = name
        op.qid = qid
        op.sender = self.name
        self._core.post(op)

    def continue_later(self, op: Op) -> None:
        """Enqueue ``op`` on this actor's mailbox after this host turn's outgoing ops have been sent. A handler
        that does a long job in steps posts its next step this way, so what one step produced is on its way
        before the next begins (an op sent to oneself would be served in the same turn, before the flush)."""
        op.target = self.name
        op.qid = 0
        op.sender = self.name
        self._core.after_flush(op)

    def reply(self, request: Op, reply: Op) -> None:
        """Answer ``request`` with ``reply``. Each request gets exactly one reply."""
        self._core.reply(request, reply, sender=self.name)

    def request(self, name: str, op: Op, on_reply: Callable[[Op], Any], timeout: float, *,
                version: int = 0) -> int:
        """Send a request; ``on_reply(reply_op)`` runs on this actor's mailbox when the reply arrives, or
        with an op whose ``error.code`` is TIMED_OUT / DEAD_ACTOR / UNKNOWN_ACTOR. With a ``version``, the
        reply is dropped unserved if this actor's version has moved past it (e.g. after a seek or a
        reconnect). Returns the request id."""
        return self._core.request(self.name, name, op, on_reply, timeout, version)

    def cancel_request(self, req_id: int) -> bool:
        """Stop waiting for the reply of one of this actor's requests (an answer that came another way): the
        reply is dropped if it still comes and the timeout never fires. False if it was already answered."""
        return self._core.cancel_request(self.name, req_id)

    def timer(self, interval: float, op: Op, *, repeat: bool = False) -> int:
        """Enqueue ``op`` (a copy for each tick) on this actor's mailbox after ``interval`` seconds."""
        return self._core.timer(self.name, interval, op, repeat)

    def cancel_timer(self, timer_id: int) -> bool:
        return self._core.timers.cancel(timer_id)

    def new_queue(self, serve: Callable[[Op], Any] | None = None) -> tuple[int, OpQueue]:
        """Create another queue of this actor, addressable as (name, qid). Forward it to ``mailbox`` to have
        its ops served in the mailbox's order with ``serve`` as their handler."""
        return self._core.new_queue(self.name, serve)

    @property
    def mailbox(self) -> OpQueue:
        return self._core.actors[self.name].queues[0]

    def register_callback(self, fn: Callable[[Op], Any]) -> int:
        """Register a callable for CB ops that come back to this process; returns its id."""
        return self._core.callbacks.register(fn)

    def register_fd(self, fd: int, on_readable: Callable[[], Any] | None = None,
                    on_writable: Callable[[], Any] | None = None) -> None:
        """Watch a raw file descriptor in the host's poll loop (e.g. a broker's TCP socket)."""
        self._core.register_fd(self.name, fd, on_readable, on_writable)

    def unregister_fd(self, fd: int) -> None:
        self._core.unregister_fd(fd)

    def spawn(self, name: str, factory: str, args: dict | None = None) -> str:
        """Create a child actor on this host, at once, with this actor as its logical parent. Its name is
        published to the other hosts and the app. Children share their host's fate: when the host dies
        they are not restarted by the supervisor; the (restarted) parent recreates what it needs.
        Returns the host key. Raises ValueError/TypeError for bad input, ActorError(SPAWN_FAILED)."""
        return self._core.spawn_child(self.name, name, factory, args)

    def stop(self, name: str) -> None:
        """Stop an actor running on this host (its on_stop runs) and unpublish its name."""
        self._core.stop_child(name)


def load_factory(path: str) -> Callable[..., Actor]:
    """Resolve ``"package.module:Attribute"``; a dotted path works under any start method."""
    if not isinstance(path, str) or ":" not in path:
        raise ValueError(f"actor factory must be 'module:attribute', got {path!r}")
    module_name, _, attr = path.partition(":")
    module = importlib.import_module(module_name)
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"actor factory {path!r} is not callable")
    return obj
