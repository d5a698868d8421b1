"""Runs in: every host process (and, for deterministic tests, inside the app via the in-process transport).
Owns HostCore: the actors placed on one host, their mailboxes, the name directory, pending requests,
timers, poison handling and the per-destination outgoing batches. Knows no sockets: a transport feeds it
with deliver() and drains it with flush().
"""

from __future__ import annotations

import importlib
import itertools
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from .actor import Actor, ActorContext, check_name, check_spec, load_factory
from .namespace import NamespacedContext, app_name, is_ns_app, namespace_of, qualify, strip
from .op import (
    APP,
    CHILD_EXITED,
    HOST_CONTROL,
    POISON,
    REPLY,
    SUPERVISOR,
    TERMINATE,
    ActorError,
    ErrorCode,
    Op,
    OpError,
    error_reply,
)
from .queue import CallbackRegistry, OpQueue
from .timers import TimerHeap

log = logging.getLogger(__name__)

# Control op types (target HOST_CONTROL); replies go to the supervisor.
SPAWN = "SPAWN"
STOP = "STOP"
DIRECTORY = "DIRECTORY"
HOST_DOWN = "HOST_DOWN"
READY = "READY"
PRELOAD = "PRELOAD"  # import modules now, so actors spawned later start without the import
ACTOR_SPAWNED = "ACTOR_SPAWNED"  # host -> app: an actor spawned a child here
ACTOR_STOPPED = "ACTOR_STOPPED"  # host -> app: an actor stopped a local actor
# supervisor -> hosts: drop the socket to an endpoint whose process is gone for good (an app that detached from a
# shared runtime); a PUSH socket to a missing ipc path would retry its connection every few ms for ever
FORGET_ENDPOINT = "FORGET_ENDPOINT"
# an app that attached to a shared runtime -> hosts: connect to its inbox now (payload {"key": "_ns<N>/app"}), so
# the first reply it waits for does not wait for ZeroMQ's connection handshake too
CONNECT_ENDPOINT = "CONNECT_ENDPOINT"

# Endpoint keys of the two app-side sockets.
APP_KEY = "app"
SUPERVISOR_KEY = "sup"

OPS_PER_TURN = 256  # ops one actor may serve before the others get a turn
# Names of actors stopped on a host, remembered (newest last) so that ops still on their way to them, expected
# while a client closes or a partition is unassigned, are dropped without a warning.
STOPPED_NAMES_KEPT = 1024
# A plain op to a name this host has not heard of yet waits this long for the name's publication: the
# DIRECTORY update and the first op from (or reply to) the new actor travel on different sockets.
UNPUBLISHED_WAIT_S = 2.0


class ActorSlot:
    __slots__ = ("name", "parent", "actor", "queues", "next_qid", "scheduled", "fds", "ns")

    def __init__(self, name: str, parent: str) -> None:
        self.name = name
        self.parent = parent
        self.actor: Actor | None = None
        self.queues: dict[int, OpQueue] = {}
        self.next_qid = 1
        self.scheduled = False
        self.fds: set[int] = set()
        self.ns = namespace_of(name)  # a shared runtime's client namespace (namespace.py), or None


class _Pending:
    __slots__ = ("actor", "target", "op_type", "on_reply", "timer_id", "version")

    def __init__(self, actor: str, target: str, op_type: str, on_reply: Callable[[Op], Any],
                 version: int) -> None:
        self.actor = actor
        self.target = target
        self.op_type = op_type
        self.on_reply = on_reply
        self.timer_id = 0
        self.version = version  # the reply (or its error) is dropped if the actor's version moved past it


class HostCore:
    """All actors of one host. ``transmit(endpoint_key, ops)`` sends one batch to another process."""

    def __init__(self, host_key: str, transmit: Callable[[str, list[Op]], None],
                 clock: Callable[[], float] = time.monotonic, restarted: bool = False) -> None:
        self.host_key = host_key
        # a restarted host's inbox also gets what other hosts sent its dead predecessor (ZeroMQ keeps it across
        # the reconnect): such ops must not reach the successors of the actors they were meant for
        self.restarted = restarted
        self._transmit = transmit
        self.clock = clock
        self.actors: dict[str, ActorSlot] = {}
        #: actors spawned here so far (the loop freezes the start-up objects once spawning has settled)
        self.spawns = 0
        self.directory: dict[str, str] = {APP: APP_KEY, SUPERVISOR: SUPERVISOR_KEY}
        self.host_keys: list[str] = []  # every host of the runtime, learned from the supervisor
        self.down: set[str] = set()
        self._stopped: dict[str, None] = {}  # ordered set, see STOPPED_NAMES_KEPT
        self.timers = TimerHeap(clock)
        self.callbacks = CallbackRegistry()
        self.terminated = False
        self.fds: dict[int, tuple[str, Callable | None, Callable | None]] = {}
        self.fd_watcher: Callable[[int, bool, bool], None] | None = None  # transport updates its poller
        self.forget_endpoint: Callable[[str], None] | None = None  # transport drops an endpoint's socket
        self.connect_endpoint: Callable[[str], Any] | None = None  # transport connects to an endpoint ahead
        self._pending: dict[int, _Pending] = {}
        self._req_ids = itertools.count(1)
        self._ready: deque[ActorSlot] = deque()
        self._out: dict[str, list[Op]] = {}
        self._after_flush: list[Op] = []  # see after_flush()
        self._unpublished: dict[str, list[tuple[float, Op]]] = {}  # name -> ops waiting for its DIRECTORY

    # -- the loop's three steps ------------------------------------------------------------------------
    def deliver(self, ops: list[Op]) -> None:
        """Ops that arrived from another process."""
        down = self.down
        for op in ops:
            if down and op.sender in down:
                # It sends, so it runs again (its host was restarted, same key): the supervisor's DIRECTORY
                # update saying so may still be on its way on another socket.
                down.discard(op.sender)
            self._route_in(op)

    def has_work(self) -> bool:
        return bool(self._ready) or bool(self._out)

    def next_deadline(self) -> float | None:
        return self.timers.next_due()

    def run(self) -> int:
        """Fire due timers, serve ready mailboxes (fairly), flush outgoing batches. Returns ops served."""
        timers = self.timers
        if timers._heap and timers._heap[0][0] <= self.clock():
            timers.run_due()
        served = 0
        ready = self._ready
        actors = self.actors
        for _ in range(len(ready)):
            slot = ready.popleft()
            slot.scheduled = False
            if actors.get(slot.name) is not slot:
                continue
            queues = slot.queues
            if len(queues) == 1:  # the common case: just the mailbox
                mailbox = queues[0]
                served += mailbox.serve(max_ops=OPS_PER_TURN)
                if len(mailbox):
                    self._schedule(slot)
                continue
            for q in list(queues.values()):
                if q.forwarded_to is None and len(q):
                    served += q.serve(max_ops=OPS_PER_TURN)
            if any(len(q) for q in queues.values() if q.forwarded_to is None):
                self._schedule(slot)
        if self._out:
            self.flush()
        if self._after_flush:
            later, self._after_flush = self._after_flush, []
            for op in later:
                self._route_in(op)
        return served

    def flush(self) -> None:
        out, self._out = self._out, {}
        for key, ops in out.items():
            try:
                self._transmit(key, ops)
            except Exception:  # noqa: BLE001 - e.g. one unencodable op: isolate it, send the others
                for op in ops:
                    try:
                        self._transmit(key, [op])
                    except Exception as exc:  # noqa: BLE001
                        log.error("host %s: cannot send %s to %s: %s", self.host_key, op.type, op.target, exc)
                        if op.is_request:
                            self._route_in(error_reply(op, ErrorCode.BAD_OP, str(exc)))
        if self._out:
            self.flush()

    # -- routing ---------------------------------------------------------------------------------------
    def after_flush(self, op: Op) -> None:
        """Deliver ``op`` to its (local) target once this turn's outgoing batches are sent: a long job split
        into steps lets each step's output leave before the next step starts."""
        self._after_flush.append(op)

    def post(self, op: Op) -> None:
        """Route an op produced here: local actors get it directly, others via the batch for their host."""
        target = op.target
        if target in self.actors:
            self._route_in(op)
            return
        if target in self.down:
            self._undeliverable(op, ErrorCode.DEAD_ACTOR, f"{target} is restarting")
            return
        key = self.directory.get(target)
        if key is None:
            if is_ns_app(target):  # an attached app of a shared runtime: its inbox is named after it
                self._out.setdefault(target, []).append(op)
                return
            if op.is_request:  # a request fails fast; its sender decides whether to retry
                self._undeliverable(op, ErrorCode.UNKNOWN_ACTOR, f"no actor named {target!r}")
            else:
                self._wait_for_publication(op)
            return
        batch = self._out.get(key)
        if batch is None:
            self._out[key] = [op]
        else:
            batch.append(op)

    def _wait_for_publication(self, op: Op) -> None:
        """Hold a plain op (or reply) to an unknown name until a DIRECTORY update or a local spawn names
        it, or drop it after UNPUBLISHED_WAIT_S."""
        waiting = self._unpublished.get(op.target)
        if waiting is None:
            waiting = self._unpublished[op.target] = []
            self.timers.schedule(UNPUBLISHED_WAIT_S, lambda name=op.target: self._expire_unpublished(name))
        waiting.append((self.clock() + UNPUBLISHED_WAIT_S, op))

    def _expire_unpublished(self, name: str) -> None:
        waiting = self._unpublished.get(name)
        if not waiting:
            return
        now = self.clock()
        while waiting and waiting[0][0] <= now:
            _, op = waiting.pop(0)
            # Quiet when the name ran here and stopped (a client closing): no one was going to publish it.
            self._undeliverable(op, ErrorCode.UNKNOWN_ACTOR, f"no actor named {name!r}",
                                expected=name in self._stopped)
        if waiting:
            self.timers.schedule(max(waiting[0][0] - now, 0.001), lambda: self._expire_unpublished(name))
        else:
            del self._unpublished[name]

    def _release_unpublished(self, name: str) -> None:
        waiting = self._unpublished.pop(name, None)
        for _, op in waiting or ():
            self.post(op)

    def _undeliverable(self, op: Op, code: str, message: str, expected: bool = False) -> None:
        """A request gets its error reply; a plain op is dropped, with a warning unless ``expected``."""
        if op.is_request:
            self.post(error_reply(op, code, message))
        elif not op.flags & REPLY:
            log.log(logging.DEBUG if expected else logging.WARNING, "host %s: op %s to %s dropped: %s",
                    self.host_key, op.type, op.target, message)

    def _route_in(self, op: Op) -> None:
        target = op.target
        if target == HOST_CONTROL:
            self._control(op)
            return
        slot = self.actors.get(target)
        if op.flags & REPLY and op.req_id:
            pending = self._take_pending(target, op.req_id)
            if pending is None:
                return  # a late or duplicate reply: the request was already answered (exactly once)
            if slot is None:
                return
            op.serve = pending.on_reply
            if slot.ns is not None and op.sender:
                op.sender = strip(slot.ns, op.sender)
            slot.queues[0].enqueue(op)
            return
        if slot is None:
            if target in self._stopped:
                self._undeliverable(op, ErrorCode.DEAD_ACTOR, f"{target} has stopped", expected=True)
            elif self.restarted and op.sender != APP and not is_ns_app(op.sender or ""):
                # Most likely sent to the dead predecessor of ``target`` (a toppar's Produce to a broker actor of
                # a killed main): replayed to the actor main spawns again it would be sent twice (the toppar
                # retries what the dead one held). The sender learns it was not delivered, as before a restart.
                # An app's op (a private or an attached one's) is new: its SPAWN may be on its way (below).
                self._undeliverable(op, ErrorCode.UNKNOWN_ACTOR, f"no actor named {target!r} on restarted "
                                                                 f"{self.host_key}")
            else:
                # Its SPAWN may still be on its way: the supervisor publishes a name to the other hosts before
                # it sends the SPAWN (on its own socket, unordered with the app's and the other hosts'), and
                # a client does not wait for the answer. An actor elsewhere may already address it (a toppar
                # joining main while main's host still starts): dropping that op lost the join for good.
                self._wait_for_publication(op)
            return
        if slot.ns is not None and op.sender:
            op.sender = strip(slot.ns, op.sender)  # an actor in a namespace sees plain names (namespace.py)
        queue = slot.queues.get(op.qid)
        if queue is None:
            self._undeliverable(op, ErrorCode.UNKNOWN_ACTOR, f"{target} has no queue {op.qid}")
            return
        queue.enqueue(op)

    def _schedule(self, slot: ActorSlot) -> None:
        if not slot.scheduled:
            slot.scheduled = True
            self._ready.append(slot)

    # -- requests, replies, timers ---------------------------------------------------------------------
    def request(self, actor: str, target: str, op: Op, on_reply: Callable[[Op], Any], timeout: float,
                version: int = 0) -> int:
        if timeout <= 0:
            raise ValueError(f"request timeout must be > 0, got {timeout}")
        if not callable(on_reply):
            raise TypeError("on_reply must be callable")
        req_id = next(self._req_ids)
        op.target = target
        op.sender = actor
        op.reply_to = (actor, 0, version)
        op.req_id = req_id
        op.flags &= ~REPLY
        pending = _Pending(actor, target, op.type, on_reply, version)
        self._pending[req_id] = pending
        pending.timer_id = self.timers.schedule(timeout, lambda: self._fail_pending(
            req_id, ErrorCode.TIMED_OUT, f"no reply from {target} within {timeout}s"))
        self.post(op)
        return req_id

    def cancel_request(self, actor: str, req_id: int) -> bool:
        """Forget a pending request of ``actor``: its reply, if one still comes, is dropped, and its timeout
        will not fire. False if it was already answered (or is not this actor's)."""
        return self._take_pending(actor, req_id) is not None

    def _take_pending(self, actor: str, req_id: int) -> _Pending | None:
        """Remove ``actor``'s pending request ``req_id`` and its timeout: the one way a request ends."""
        pending = self._pending.get(req_id)
        if pending is None or pending.actor != actor:
            return None
        del self._pending[req_id]
        self.timers.cancel(pending.timer_id)
        return pending

    def _fail_pending(self, req_id: int, code: str, message: str) -> None:
        pending = self._pending.get(req_id)
        if pending is None:
            return
        self._route_in(Op(pending.op_type, flags=REPLY, error=OpError(code, message), target=pending.actor,
                          req_id=req_id, sender=pending.target, version=pending.version))

    def reply(self, request: Op, reply: Op, *, sender: str | None = None) -> None:
        if request.reply_to is None or request.flags & REPLY:
            raise ValueError(f"op {request.type} is not a request; nothing to reply to")
        if request.replied:
            raise ValueError(f"request {request.type} #{request.req_id} was already answered")
        request.replied = True
        name, qid, version = request.reply_to
        reply.flags |= REPLY
        reply.target = name
        reply.qid = qid
        reply.req_id = request.req_id
        reply.sender = sender
        if not reply.version:
            reply.version = version
        self.post(reply)

    def timer(self, actor: str, interval: float, op: Op, repeat: bool) -> int:
        op.target = actor

        def fire() -> None:
            slot = self.actors.get(actor)
            if slot is not None:
                slot.queues[0].enqueue(op.copy() if repeat else op)

        return self.timers.schedule(interval, fire, repeat=repeat)

    def new_queue(self, actor: str, serve: Callable[[Op], Any] | None) -> tuple[int, OpQueue]:
        slot = self.actors[actor]
        qid = slot.next_qid
        slot.next_qid += 1
        queue = self._make_queue(slot, serve)
        slot.queues[qid] = queue
        return qid, queue

    def _make_queue(self, slot: ActorSlot, serve: Callable[[Op], Any] | None) -> OpQueue:
        return OpQueue(serve, name=slot.name, callbacks=self.callbacks,
                       barrier=lambda op: slot.actor.current_version(op) if slot.actor is not None else 0,
                       on_poison=lambda op, exc: self._poison(slot, op, exc),
                       on_enqueue=lambda _q: self._schedule(slot))

    def _poison(self, slot: ActorSlot, op: Op, exc: BaseException) -> None:
        text = f"{type(exc).__name__}: {exc}"
        log.error("actor %s: handler for %s raised twice, returned as poison: %s", slot.name, op.type, text)
        if op.is_request and not op.replied:
            op.replied = True
            self.post(error_reply(op, ErrorCode.POISON, text))
        elif op.sender and not op.flags & REPLY and op.type != POISON:
            sender = op.sender if slot.ns is None else qualify(slot.ns, op.sender)
            self.post(Op(POISON, {"type": op.type, "target": slot.name, "error": text},
                         error=OpError(ErrorCode.POISON, text), target=sender, sender=slot.name))

    # -- file descriptors ------------------------------------------------------------------------------
    def register_fd(self, actor: str, fd: int, on_readable: Callable | None, on_writable: Callable | None) -> None:
        if not isinstance(fd, int) or fd < 0:
            raise ValueError(f"not a file descriptor: {fd!r}")
        self.fds[fd] = (actor, on_readable, on_writable)
        self.actors[actor].fds.add(fd)
        if self.fd_watcher is not None:
            self.fd_watcher(fd, on_readable is not None, on_writable is not None)

    def unregister_fd(self, fd: int) -> None:
        entry = self.fds.pop(fd, None)
        if entry is None:
            return
        slot = self.actors.get(entry[0])
        if slot is not None:
            slot.fds.discard(fd)
        if self.fd_watcher is not None:
            self.fd_watcher(fd, False, False)

    def fd_event(self, fd: int, readable: bool, writable: bool) -> None:
        entry = self.fds.get(fd)
        if entry is None:
            return
        actor, on_readable, on_writable = entry
        try:
            if readable and on_readable is not None:
                on_readable()
            if writable and on_writable is not None and fd in self.fds:
                on_writable()
        except Exception:  # noqa: BLE001 - never take the host down; the actor must re-register
            log.exception("actor %s: fd %d callback raised; fd unregistered", actor, fd)
            self.unregister_fd(fd)

    # -- control ops -----------------------------------------------------------------------------------
    def _control(self, op: Op) -> None:
        try:
            self._control_op(op)
        except Exception:  # noqa: BLE001 - a malformed control op must not take the host down
            log.exception("host %s: control op %s failed", self.host_key, op.type)

    def _control_op(self, op: Op) -> None:
        payload = op.payload or {}
        if op.type == SPAWN:
            error = self.spawn(payload["name"], payload["factory"], payload.get("args") or {},
                               payload.get("parent") or APP)
            if op.reply_to is not None:
                self.reply(op, Op(SPAWN, {"name": payload["name"], "host": self.host_key},
                                  error=OpError(ErrorCode.SPAWN_FAILED, error) if error else None))
        elif op.type == DIRECTORY:
            if payload.get("hosts"):
                self.host_keys = list(payload["hosts"])
            for name, key in (payload.get("set") or {}).items():
                self.directory[name] = key
                self.down.discard(name)
                if self._unpublished:
                    self._release_unpublished(name)
            for name in payload.get("remove") or ():
                self.directory.pop(name, None)
        elif op.type == HOST_DOWN:
            self.mark_down(payload.get("names") or ())
        elif op.type == STOP:
            self.stop_actor(payload["name"])
        elif op.type == PRELOAD:
            self.preload(payload.get("modules") or ())
        elif op.type == FORGET_ENDPOINT:
            key = str(payload.get("key") or "")
            self._out.pop(key, None)
            if self.forget_endpoint is not None and is_ns_app(key):
                self.forget_endpoint(key)
        elif op.type == CONNECT_ENDPOINT:
            key = str(payload.get("key") or "")
            if self.connect_endpoint is not None and is_ns_app(key):  # an attached app's inbox, nothing else
                self.connect_endpoint(key)
        elif op.type == TERMINATE:
            self.terminate()
        else:
            log.warning("host %s: unknown control op %s", self.host_key, op.type)

    def preload(self, modules: Any) -> None:
        """Import ``modules`` (names or "module:Factory" paths) ahead of the spawns that need them. A failure
        is only logged: the spawn that needs the module reports it to whoever asked for that actor."""
        for module in modules:
            try:
                importlib.import_module(str(module).partition(":")[0])
            except Exception:  # noqa: BLE001 - see the docstring
                log.warning("host %s: preloading %s failed", self.host_key, module, exc_info=True)

    def mark_down(self, names: Any) -> None:
        """Names whose host died: fail requests pending on them now rather than at their timeouts."""
        names = set(names)
        self.down.update(names - set(self.actors))
        for req_id, pending in list(self._pending.items()):
            if pending.target in names:
                self._fail_pending(req_id, ErrorCode.DEAD_ACTOR, f"the host of {pending.target} died")

    def spawn(self, name: str, factory: str, args: dict, parent: str) -> str | None:
        """Create an actor here; returns an error text instead of raising (the host must survive)."""
        if name in self.actors:
            return f"an actor named {name!r} already runs on {self.host_key}"
        self._stopped.pop(name, None)
        slot = ActorSlot(name, parent)
        slot.queues[0] = self._make_queue(slot, None)
        self.actors[name] = slot
        self.directory[name] = self.host_key
        try:
            context = ActorContext(self, name, parent) if slot.ns is None else NamespacedContext(self, name, parent)
            actor = load_factory(factory)(context, **args)
            if not isinstance(actor, Actor):
                raise TypeError(f"{factory} returned {type(actor).__name__}, not an Actor")
            slot.actor = actor
            slot.queues[0].serve_handler = actor.handle
            if self._unpublished:
                self._release_unpublished(name)
            actor.on_start()
        except Exception as exc:  # noqa: BLE001
            log.exception("host %s: spawning %s with %s failed", self.host_key, name, factory)
            self._forget(slot)
            return f"{type(exc).__name__}: {exc}"
        self.spawns += 1
        return None

    def _post_to_endpoint(self, key: str, op: Op) -> None:
        self._out.setdefault(key, []).append(op)

    def spawn_child(self, parent: str, name: str, factory: str, args: dict | None) -> str:
        """ctx.spawn: create ``name`` here now, then publish it to the other hosts and the app."""
        check_name(name)
        args = check_spec(factory, args)
        if name in self.actors or self.directory.get(name) not in (None, self.host_key):
            raise ValueError(f"an actor named {name!r} already exists (on {self.directory.get(name)})")
        # Announce before on_start runs, so every op the child sends travels behind its publication.
        others = [key for key in self.host_keys if key != self.host_key]
        announce = Op(DIRECTORY, {"set": {name: self.host_key}}, target=HOST_CONTROL)
        for key in others:
            self._post_to_endpoint(key, announce)
        error = self.spawn(name, factory, args, parent)
        if error:
            retract = Op(DIRECTORY, {"remove": [name]}, target=HOST_CONTROL)
            for key in others:
                self._post_to_endpoint(key, retract)
            raise ActorError(ErrorCode.SPAWN_FAILED, f"{name} ({factory}): {error}")
        spawned = Op(ACTOR_SPAWNED, {"name": name, "factory": factory, "args": args, "parent": parent,
                                     "host": self.host_key}, target=HOST_CONTROL)
        self._post_to_endpoint(APP_KEY, spawned)
        ns = namespace_of(name)
        if ns is not None:  # the attached app that owns the namespace learns its actors' children too
            self._post_to_endpoint(app_name(ns), spawned)
        return self.host_key

    def stop_child(self, name: str) -> None:
        """ctx.stop: stop a local actor and unpublish its name."""
        if name not in self.actors:
            raise ValueError(f"no actor named {name!r} runs on host {self.host_key}")
        self.stop_actor(name)
        gone = Op(DIRECTORY, {"remove": [name]}, target=HOST_CONTROL)
        for key in self.host_keys:
            if key != self.host_key:
                self._post_to_endpoint(key, gone)
        stopped = Op(ACTOR_STOPPED, {"name": name, "host": self.host_key}, target=HOST_CONTROL)
        self._post_to_endpoint(APP_KEY, stopped)
        ns = namespace_of(name)
        if ns is not None:
            self._post_to_endpoint(app_name(ns), stopped)

    def stop_actor(self, name: str) -> None:
        slot = self.actors.get(name)
        if slot is None:
            return
        try:
            if slot.actor is not None:
                slot.actor.on_stop()
        except Exception:  # noqa: BLE001
            log.exception("actor %s: on_stop raised", name)
        self._forget(slot)
        stopped = self._stopped
        stopped[name] = None
        if len(stopped) > STOPPED_NAMES_KEPT:
            del stopped[next(iter(stopped))]

    def _forget(self, slot: ActorSlot) -> None:
        # Requests still waiting in the actor's queues get their one reply: an error, never silence.
        for queue in slot.queues.values():
            for op in queue.purge():
                if op.is_request:
                    self.post(error_reply(op, ErrorCode.DEAD_ACTOR, f"{slot.name} stopped before serving it"))
        for fd in list(slot.fds):
            self.unregister_fd(fd)
        self.actors.pop(slot.name, None)
        self.directory.pop(slot.name, None)
        for req_id, pending in list(self._pending.items()):
            if pending.actor == slot.name:
                self.timers.cancel(pending.timer_id)
                del self._pending[req_id]

    def terminate(self) -> None:
        for name in reversed(list(self.actors)):
            self.stop_actor(name)
        self.terminated = True


def child_exited_op(name: str, parent: str, host: str, exitcode: int | None, restarted: bool,
                    error: str | None = None) -> Op:
    """The op a logical parent receives when one of its children's host died."""
    return Op(CHILD_EXITED, {"name": name, "host": host, "exitcode": exitcode, "restarted": restarted,
                             "error": error}, target=parent, sender=SUPERVISOR)
