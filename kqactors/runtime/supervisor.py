"""Runs in: the app process. Owns placement (which host runs which named actor), spawning actors on hosts,
and the restart sequence after a host dies: tell the monitors (``on_down``: the app's ACTORS_DOWN notices,
the moment the death is known), fail requests pending on its actors, wait, restart the host, re-spawn its
actors from their specs, then tell each actor's logical parent with a CHILD_EXITED op.

Transport-neutral: process launching and control messaging are behind a ControlChannel (ZeroMQ +
subprocesses in process_control.py, in-process hosts in transport_inproc.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

from .actor import check_name, check_spec
from .host import APP_KEY, DIRECTORY, FORGET_ENDPOINT, HOST_DOWN, PRELOAD, SPAWN, STOP, child_exited_op
from .op import APP, HOST_CONTROL, TERMINATE, ActorError, ErrorCode, Op

log = logging.getLogger(__name__)

class ControlChannel(Protocol):
    def start_hosts(self, keys: list[str], timeout: float) -> None: ...
    def send(self, key: str, ops: list[Op]) -> None: ...
    def call(self, key: str, op: Op, timeout: float) -> Op: ...
    def forget(self, key: str) -> None: ...


class ActorSpec:
    """Everything needed to (re)create an actor: it must be plain data so any host can build it."""

    __slots__ = ("name", "factory", "args", "parent", "host", "dynamic")

    def __init__(self, name: str, factory: str, args: dict, parent: str, host: str, dynamic: bool = False) -> None:
        self.name = name
        self.factory = factory
        self.args = args
        self.parent = parent
        self.host = host
        self.dynamic = dynamic  # spawned by an actor (ctx.spawn): not restarted, its parent rebuilds it

    def spawn_op(self) -> Op:
        return Op(SPAWN, {"name": self.name, "factory": self.factory, "args": self.args, "parent": self.parent},
                  target=HOST_CONTROL)


class Supervisor:
    """Placement, spawning and restarts. Thread-safe: the app thread spawns while a watcher thread may be
    restarting a dead host."""

    def __init__(self, channel: ControlChannel, host_keys: list[str], restart_delay: float,
                 on_restarted: Callable[[str], None] | None = None,
                 on_down: Callable[[str, list[str], int, int | None], None] | None = None) -> None:
        self.channel = channel
        self.host_keys = list(host_keys)
        self.restart_delay = restart_delay
        self.specs: dict[str, ActorSpec] = {}
        self.down_hosts: set[str] = set()
        self.restarts: dict[str, int] = dict.fromkeys(host_keys, 0)
        #: hosts stopped for good (retire_host): their exit is not a death
        self.retired: set[str] = set()
        self.closing = threading.Event()
        self.on_restarted = on_restarted
        #: on_down(host, names, restarts, exitcode), called on the thread that learned of the death, under
        #: the supervisor's lock: before anything can be sent to the host's restarted actors
        self.on_down = on_down
        self._lock = threading.RLock()

    def host_of(self, name: str) -> str | None:
        spec = self.specs.get(name)
        return spec.host if spec is not None else None

    def spawn(self, name: str, factory: str, args: dict | None, parent: str, host: str, timeout: float,
              wait: bool = True) -> None:
        """Create actor ``name`` on ``host``. ``wait=False``: send the SPAWN and return, without its answer (a
        host that is still starting serves it first thing, before any op sent to the actor afterwards); a
        failure is then only logged by the host, and the actor's name stays placed."""
        check_name(name)
        if parent != APP:
            check_name(parent)
        args = check_spec(factory, args)
        if host not in self.host_keys:
            raise ValueError(f"unknown host {host!r}; hosts are {self.host_keys}")
        with self._lock:
            if name in self.specs:
                raise ValueError(f"an actor named {name!r} already exists (on {self.specs[name].host})")
            if host in self.down_hosts:
                raise ActorError(ErrorCode.DEAD_ACTOR, f"host {host} is restarting")
            spec = ActorSpec(name, factory, args, parent, host)
            # Publish first: the new actor's on_start may send to actors elsewhere whose answers must find
            # it. Hosts hold plain ops to a name they cannot resolve yet, so the order is not load-bearing.
            self._broadcast(Op(DIRECTORY, {"set": {name: host}}, target=HOST_CONTROL), exclude=host)
            if not wait:
                self.channel.send(host, [spec.spawn_op()])
                self.specs[name] = spec
                return
            try:
                reply = self.channel.call(host, spec.spawn_op(), timeout)
            except BaseException:
                self._broadcast(Op(DIRECTORY, {"remove": [name]}, target=HOST_CONTROL), exclude=host)
                raise
            if reply.error is not None:
                self._broadcast(Op(DIRECTORY, {"remove": [name]}, target=HOST_CONTROL), exclude=host)
                raise ActorError(ErrorCode.SPAWN_FAILED, f"{name} ({factory}): {reply.error.message}")
            self.specs[name] = spec

    def preload(self, key: str, modules: list[str]) -> None:
        """Ask host ``key`` to import ``modules`` (no reply: it imports while the app goes on)."""
        self.channel.send(key, [Op(PRELOAD, {"modules": modules}, target=HOST_CONTROL)])

    def start(self, timeout: float, wait: bool = True) -> None:
        """Start every host and tell each the host list (so actors' children can be published). ``wait=False``:
        launch them and return without waiting for READY, where the channel can (``launch_hosts``)."""
        launch = None if wait else getattr(self.channel, "launch_hosts", None)
        if launch is not None:
            launch(self.host_keys, timeout)
        else:
            self.channel.start_hosts(self.host_keys, timeout)
        for key in self.host_keys:
            self.channel.send(key, [self._directory_op()])

    def add_hosts(self, keys: list[str], timeout: float, wait: bool = True) -> None:
        """Start more hosts while the runtime runs (placement that follows the load): each gets the whole
        directory, the others the new host list. ``wait=False`` as for ``start``."""
        with self._lock:
            for key in keys:
                if key in self.host_keys:
                    raise ValueError(f"host {key!r} exists already")
            launch = None if wait else getattr(self.channel, "launch_hosts", None)
            if launch is not None:
                launch(list(keys), timeout)
            else:
                self.channel.start_hosts(list(keys), timeout)
            self.host_keys.extend(keys)
            for key in keys:
                self.restarts.setdefault(key, 0)
                self.channel.send(key, [self._directory_op()])
            self._broadcast(Op(DIRECTORY, {"hosts": list(self.host_keys)}, target=HOST_CONTROL))

    def retire_host(self, key: str) -> list[str]:
        """Stop host ``key`` for good (placement that follows the load, once it has moved the host's work away):
        the actors still there are stopped (their on_stop runs), the others forget the host and the process
        is told to TERMINATE; its exit is not a death (no restart). Returns the names stopped with it."""
        with self._lock:
            if key not in self.host_keys:
                raise ValueError(f"unknown host {key!r}; hosts are {self.host_keys}")
            if key == self.host_keys[0]:
                raise ValueError("the first host cannot be retired")
            if key in self.down_hosts:
                raise ActorError(ErrorCode.DEAD_ACTOR, f"host {key} is restarting")
            names = [n for n, spec in self.specs.items() if spec.host == key]
            for name in names:
                del self.specs[name]
            self.retired.add(key)
            self.down_hosts.add(key)  # its exit ends here (host_died), nothing is sent to it any more
            self.host_keys.remove(key)
            self.channel.send(key, [Op(TERMINATE, target=HOST_CONTROL)])
            update: dict[str, Any] = {"hosts": list(self.host_keys)}
            if names:
                update["remove"] = names
            self._broadcast(Op(DIRECTORY, update, target=HOST_CONTROL))
            self._broadcast(Op(FORGET_ENDPOINT, {"key": key}, target=HOST_CONTROL))
            return names

    def _directory_op(self) -> Op:
        return Op(DIRECTORY, {"hosts": self.host_keys, "set": self.directory()}, target=HOST_CONTROL)

    def child_spawned(self, payload: dict) -> None:
        """A host reports an actor spawned by an actor (it already told the other hosts)."""
        with self._lock:
            name = payload["name"]
            if name not in self.specs:
                self.specs[name] = ActorSpec(name, payload["factory"], payload.get("args") or {},
                                             payload.get("parent") or APP, payload["host"], dynamic=True)

    def child_stopped(self, payload: dict) -> None:
        with self._lock:
            spec = self.specs.get(payload["name"])
            if spec is not None and spec.host == payload.get("host"):
                del self.specs[spec.name]

    def stop(self, name: str) -> None:
        with self._lock:
            spec = self.specs.pop(name, None)
            if spec is None:
                raise ActorError(ErrorCode.UNKNOWN_ACTOR, f"no actor named {name!r}")
            if spec.host not in self.down_hosts:
                self.channel.send(spec.host, [Op(STOP, {"name": name}, target=HOST_CONTROL)])
            self._broadcast(Op(DIRECTORY, {"remove": [name]}, target=HOST_CONTROL), exclude=spec.host)

    def _live_hosts(self, exclude: str | None = None) -> list[str]:
        return [k for k in self.host_keys if k != exclude and k not in self.down_hosts]

    def _broadcast(self, op: Op, exclude: str | None = None) -> None:
        for key in self._live_hosts(exclude):
            self.channel.send(key, [op])

    def directory(self) -> dict[str, str]:
        return {name: spec.host for name, spec in self.specs.items()}

    def host_died(self, key: str, exitcode: int | None) -> None:
        """The restart sequence; runs on the watcher thread (or inline for the in-process transport)."""
        with self._lock:
            if key in self.retired:
                self.channel.forget(key)  # it left as told (retire_host)
                return
            if self.closing.is_set() or key in self.down_hosts:
                return
            log.warning("host %s died (exit code %s); restarting in %.2fs", key, exitcode, self.restart_delay)
            self.down_hosts.add(key)
            self.restarts[key] = self.restarts.get(key, 0) + 1
            self.channel.forget(key)
            lost = [n for n, spec in self.specs.items() if spec.host == key]
            if self.on_down is not None:
                try:
                    self.on_down(key, list(lost), self.restarts[key], exitcode)
                except Exception:  # noqa: BLE001 - a monitor must not stop the restart
                    log.exception("notifying the monitors of host %s failed", key)
            down = Op(HOST_DOWN, {"names": lost, "host": key}, target=HOST_CONTROL)
            self.channel.send(APP_KEY, [down])
            self._broadcast(down, exclude=key)
            children = [n for n in lost if self.specs[n].dynamic]
            for name in children:  # they share their host's fate; their restarted parents rebuild them
                del self.specs[name]
            if children:
                self._broadcast(Op(DIRECTORY, {"remove": children}, target=HOST_CONTROL), exclude=key)
            names = [n for n in lost if n not in children]
        if self.closing.wait(self.restart_delay):
            return
        with self._lock:
            if self.closing.is_set():
                return
            try:
                self.channel.start_hosts([key], timeout=30.0)
            except Exception as exc:  # noqa: BLE001 - report to parents; a later death retries
                log.error("restarting host %s failed: %s", key, exc)
                self._notify_parents(key, names, exitcode, restarted=False, errors={n: str(exc) for n in names})
                return
            self.channel.send(key, [self._directory_op()])
            # As for spawn: the others learn the names are back before the actors can talk to them.
            self._broadcast(Op(DIRECTORY, {"set": {n: key for n in names}}, target=HOST_CONTROL), exclude=key)
            errors: dict[str, Any] = {}
            for name in names:
                spec = self.specs[name]
                try:
                    reply = self.channel.call(key, spec.spawn_op(), timeout=30.0)
                    if reply.error is not None:
                        errors[name] = reply.error.message
                except ActorError as exc:
                    errors[name] = exc.message
            self.down_hosts.discard(key)
            if self.on_restarted is not None:
                self.on_restarted(key)
            self._notify_parents(key, names, exitcode, restarted=True, errors=errors)

    def _notify_parents(self, key: str, names: list[str], exitcode: int | None, restarted: bool,
                        errors: dict[str, Any]) -> None:
        for name in names:
            spec = self.specs[name]
            error = errors.get(name)
            op = child_exited_op(name, spec.parent, key, exitcode, restarted and error is None, error)
            parent_host = APP_KEY if spec.parent == APP else self.host_of(spec.parent)
            if parent_host is None or parent_host in self.down_hosts:
                log.warning("CHILD_EXITED for %s: parent %s unavailable", name, spec.parent)
                continue
            self.channel.send(parent_host, [op])
