"""Runs in: every host process of a shared runtime (and in attached apps, for the name helpers). Owns client
namespaces: an app attached to a shared runtime (see shared.py) gets a prefix ``_ns<N>``; its actors run as
``_ns<N>/<name>`` on the shared hosts and its inbox is the endpoint ``_ns<N>/app``. An actor in a namespace
sees plain names: its ``ctx.name`` is unprefixed, every name it sends to, requests from, spawns or stops is
qualified with its prefix (``app`` becomes its namespace's app), and the ``sender`` of the ops it receives
is stripped of the prefix. So actor code is the same whether it runs in a private or a shared runtime, and
two clients' ``main`` never meet.

A shared *group* (shared.py) is a namespace ``_nsg<K>`` whose actors serve several attached apps (its
members) at once: each member keeps its own namespace for its inbox (``_ns<N>/app``), and the group's actors
address a member by that full name, which ``qualify`` leaves alone (a name in another namespace is never
prefixed again). The group's own ``app`` (``_nsg<K>/app``) is a relay in the runtime's server that hands what
the group's actors send "to the app" (errors, logs, statistics, restarts) to every member.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .actor import ActorContext
from .op import APP, Op

NS_MARK = "_ns"
GROUP_MARK = "_nsg"
MEMBER_LEFT = "MEMBER_LEFT"
"""server -> a group's member-aware actors: payload {"member": "<_ns<N>/app>"}, that member detached or died."""


def is_namespaced(name: str) -> bool:
    return name.startswith(NS_MARK) and "/" in name


def namespace_of(name: str) -> str | None:
    """``_ns7`` for ``_ns7/main``; None for a name outside any namespace."""
    if not name.startswith(NS_MARK):
        return None
    head, sep, _ = name.partition("/")
    return head if sep else None


def app_name(ns: str) -> str:
    """The name (and endpoint key) of a namespace's app."""
    return f"{ns}/{APP}"


def is_ns_app(name: str) -> bool:
    return name.startswith(NS_MARK) and name.endswith("/" + APP) and name.count("/") == 1


def is_group(ns: str | None) -> bool:
    """A shared group's namespace (``_nsg<K>``), as opposed to one attached app's (``_ns<N>``)."""
    return bool(ns) and ns.startswith(GROUP_MARK)


def qualify(ns: str, name: str) -> str:
    """``name`` in namespace ``ns``; a name already in a namespace (this one or another: a group's actor
    addressing a member's app) is left as it is."""
    if name == APP:
        return f"{ns}/{APP}"
    if name.startswith(NS_MARK) and "/" in name:
        return name
    return f"{ns}/{name}"


def strip(ns: str, name: str | None) -> str | None:
    if name and name.startswith(ns) and name[len(ns):len(ns) + 1] == "/":
        return name[len(ns) + 1:]
    return name


class NamespacedContext(ActorContext):
    """ActorContext of an actor in a namespace: plain names outside, qualified names inside the host."""

    def __init__(self, core: Any, name: str, parent: str) -> None:
        super().__init__(core, name, parent)
        self.ns = namespace_of(name) or ""
        self.full = name
        self.name = strip(self.ns, name) or name
        self.parent = strip(self.ns, parent) or parent  # the namespace's app reads as "app"

    def send(self, name: str, op: Op, *, qid: int = 0) -> None:
        op.target = qualify(self.ns, name)
        op.qid = qid
        op.sender = self.full
        self._core.post(op)

    def continue_later(self, op: Op) -> None:
        op.target = self.full
        op.qid = 0
        op.sender = self.full
        self._core.after_flush(op)

    def reply(self, request: Op, reply: Op) -> None:
        self._core.reply(request, reply, sender=self.full)

    def request(self, name: str, op: Op, on_reply: Callable[[Op], Any], timeout: float, *,
                version: int = 0) -> int:
        return self._core.request(self.full, qualify(self.ns, name), op, on_reply, timeout, version)

    def cancel_request(self, req_id: int) -> bool:
        return self._core.cancel_request(self.full, req_id)

    def timer(self, interval: float, op: Op, *, repeat: bool = False) -> int:
        return self._core.timer(self.full, interval, op, repeat)

    def new_queue(self, serve: Callable[[Op], Any] | None = None) -> tuple[int, Any]:
        return self._core.new_queue(self.full, serve)

    @property
    def mailbox(self) -> Any:
        return self._core.actors[self.full].queues[0]

    def register_fd(self, fd: int, on_readable: Callable[[], Any] | None = None,
                    on_writable: Callable[[], Any] | None = None) -> None:
        self._core.register_fd(self.full, fd, on_readable, on_writable)

    def spawn(self, name: str, factory: str, args: dict | None = None) -> str:
        return self._core.spawn_child(self.full, qualify(self.ns, name), factory, args)

    def stop(self, name: str) -> None:
        self._core.stop_child(qualify(self.ns, name))
