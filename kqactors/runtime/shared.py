"""Runs in: a shared-runtime process (``kqactors runtime --dir DIR``: RuntimeServer, SharedRuntime,
SharedSupervisor) and in the apps that attach to it (AttachedRuntime). Owns the shared runtime: one set of
actor hosts serving many client processes on one host, each in its own namespace (namespace.py).

DIR holds ``runtime.json`` (the server's pid and host keys), ``ctl.sock`` (a unix stream socket, one
length-prefixed msgpack request and answer at a time per connection: attach, spawn, stop, preload, detach,
status) and ``rt/`` (the hosts' and the attached apps' ipc inboxes). DIR is 0700, or 0770 with a
group (the sockets too, through the umask): the file system decides who may attach. An attached app binds
its own inbox ``rt/_ns<N>_app.sock``, asks the server to spawn its actors (the server's supervisor keeps their
specs and restarts them with their host), and then talks to its actors on the hosts directly, as a private
runtime's app does. The server watches each attached app's pid: when one dies, its actors are stopped and
nobody else notices. An attached app watches the server's pid: when the server dies, pending requests fail
with DEAD_ACTOR, the monitors get ACTORS_DOWN for every actor and sends raise DEAD_ACTOR (no hang); a new
client attaches once a runtime runs again.

Shared groups: an app that attaches with a group key (the client handle's fingerprint of the settings that
shape its actors' work, see kqactors/client/handle/sharing.py) joins the group of that key, a namespace
``_nsg<K>`` created by the first such app and stopped when its last member leaves. The members' actor names
(``main``, ``toppar/t/0``, the brokers) resolve to the group's actors: the first member's spawn creates one, the
others' find it (the server answers with its host). Each member keeps its own namespace for its inbox, so
replies and what a member-aware actor addresses to a member (a PRODUCE's sender) reach that member alone; what
the group's actors send "to the app" reaches every member through the group's relay inbox (``_nsg<K>/app``, read
by the server). An op relayed with a payload saying ``fatal`` retires the group: its members keep it, the next
app with that key starts a new one. The members' factories may be swapped for member-aware ones (``factories``); those actors get a
MEMBER_LEFT op when a member detaches or dies.
"""

from __future__ import annotations

import _thread
import contextlib
import grp
import itertools
import json
import logging
import os
import re
import select
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import msgpack
import zmq

from .host import CONNECT_ENDPOINT, FORGET_ENDPOINT, HOST_DOWN
from .namespace import GROUP_MARK, MEMBER_LEFT, NS_MARK, app_name, is_ns_app, namespace_of, qualify, strip
from .op import ACTORS_DOWN, APP, HOST_CONTROL, ActorError, ErrorCode, Op
from .runtime import Runtime, _Plumbing
from .supervisor import Supervisor
from .transport_zmq import ZmqInbox, ZmqOutbox, ipc_path, new_context

log = logging.getLogger(__name__)

RUNTIME_FILE = "runtime.json"
CTL_KEY = "ctl"
RUN_SUBDIR = "rt"
HOST_UP = "HOST_UP"  # server -> attached app: a host is back after a restart
CTL_TIMEOUT_S = 10.0
CTL_READ_TIMEOUT_S = 2.0  # the server's longest wait for the rest of a request it started reading
_PROPOSALS = itertools.count(1)  # an attaching app's namespace proposals: _ns<pid>x<n>
PID_CHECK_S = 0.25  # how often the server looks for attached apps that died
# Modules the server's hosts import at start, so a client's first spawns and first requests cost no import: the
# main host runs mains (a producer's, a consumer's and its group) and broker connections (their fetch part too),
# the toppar hosts the toppars (a host imports only its own: the broker connection's modules cost a toppar host
# ~9 MiB it never uses). With no toppar host, host 0 imports both. A private client's hosts load the request
# kinds' tables on first use (protocol/requests.py: a producer never pays for Fetch's); a runtime serves every
# kind of client, so it loads them before the first one comes (paid once per machine).
REQUEST_TABLES = tuple(f"kqactors.protocol.generated.{kind}" for kind in (
    "metadata", "produce", "fetch", "list_offsets", "find_coordinator", "join_group", "sync_group", "heartbeat",
    "leave_group", "offset_commit", "offset_fetch", "consumer_group_heartbeat", "consumer_protocol"))
MAIN_HOST_PRELOAD = ("kqactors.actors.main", "kqactors.actors.broker.actor", "kqactors.actors.log",
                     "kqactors.actors.consumer_main", "kqactors.actors.cgrp", "kqactors.actors.broker.source",
                     "kqactors.core.group.assignors.range", "kqactors.core.group.assignors.roundrobin",
                     *REQUEST_TABLES)
TOPPAR_HOST_PRELOAD = ("kqactors.actors.toppar", "kqactors.actors.shared_toppar", "kqactors.actors.ctoppar",
                       "kqactors.actors.log")
DEFAULT_PRELOAD = MAIN_HOST_PRELOAD + TOPPAR_HOST_PRELOAD[:3]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _ctl_path(directory: str) -> str:
    return ipc_path(directory, CTL_KEY)


def _write_frame(sock: socket.socket, message: Any) -> None:
    """One control message: its length (4 bytes, big-endian) and its msgpack body."""
    body = msgpack.packb(message, use_bin_type=True)
    sock.sendall(len(body).to_bytes(4, "big") + body)


def _read_frame(sock: socket.socket) -> bytes | None:
    """One control message's body; None when the peer closed the connection between messages. Raises
    TimeoutError (the socket's timeout) or ValueError (the peer closed it mid-message)."""
    head = _read_exactly(sock, 4)
    if head is None:
        return None
    body = _read_exactly(sock, int.from_bytes(head, "big"))
    if body is None:
        raise ValueError("the control connection closed mid-message")
    return body


def _read_exactly(sock: socket.socket, size: int) -> bytes | None:
    data = sock.recv(size)
    if not data:
        return None
    while len(data) < size:
        more = sock.recv(size - len(data))
        if not more:
            raise ValueError("the control connection closed mid-message")
        data += more
    return data


def read_runtime_info(directory: str) -> dict:
    """The shared runtime at ``directory`` (its pid, host keys); ActorError(TERMINATED) if none runs there."""
    try:
        with open(os.path.join(directory, RUNTIME_FILE)) as f:
            info = json.load(f)
    except (OSError, ValueError) as exc:
        raise ActorError(ErrorCode.TERMINATED, f"no shared runtime at {directory}: {exc}") from None
    if not _pid_alive(int(info.get("pid", 0))):
        raise ActorError(ErrorCode.TERMINATED, f"the shared runtime at {directory} is not running")
    return info


# ---- the server side ---------------------------------------------------------------------------------------
class SharedSupervisor(Supervisor):
    """The Supervisor of a shared runtime: a namespace's app is a parent endpoint too (CHILD_EXITED goes to
    its inbox), and each namespace hears of its own actors' host deaths (HOST_DOWN) and restarts (HOST_UP)."""

    def __init__(self, channel: Any, host_keys: list[str], restart_delay: float,
                 on_restarted: Callable[[str], None] | None = None,
                 on_down: Callable[[str, list[str], int, int | None], None] | None = None) -> None:
        super().__init__(channel, host_keys, restart_delay, on_restarted=self._host_up, on_down=self._host_down)
        self._app_on_down = on_down
        self.namespaces: set[str] = set()
        #: member namespace -> its group's namespace (kept by the server): a member hears of its group's actors'
        #: deaths directly, on the same socket as of the restart (HOST_UP), so it never sees them out of order
        self.member_group: dict[str, str] = {}

    def host_of(self, name: str) -> str | None:
        if is_ns_app(name):
            return name  # an attached app's endpoint key is its name
        return super().host_of(name)

    def _host_down(self, key: str, names: list[str], restarts: int, exitcode: int | None) -> None:
        if self._app_on_down is not None:
            self._app_on_down(key, names, restarts, exitcode)
        for ns in list(self.namespaces):
            group = self.member_group.get(ns)
            mine = [n for n in names if namespace_of(n) in (ns, group)]
            if mine:
                self.channel.send(app_name(ns), [Op(HOST_DOWN, {"names": mine, "host": key, "restarts": restarts,
                                                                "exitcode": exitcode}, target=HOST_CONTROL)])

    def _host_up(self, key: str) -> None:
        for ns in list(self.namespaces):
            self.channel.send(app_name(ns), [Op(HOST_UP, {"host": key}, target=HOST_CONTROL)])

    def drop_namespace(self, ns: str) -> int:
        """Stop every actor of namespace ``ns`` (newest first: children, then toppars, main last)."""
        self.namespaces.discard(ns)
        with self._lock:
            names = [n for n in self.specs if namespace_of(n) == ns]
        for name in reversed(names):
            with contextlib.suppress(ActorError):
                self.stop(name)
        return len(names)


class SharedRuntime(Runtime):
    supervisor_factory = SharedSupervisor


class _Group:
    """A shared group: its namespace, its members' namespaces, the actors that want MEMBER_LEFT, and the relay
    inbox that hands what its actors send to "app" to every member."""

    def __init__(self, key: str, ns: str, relay: ZmqInbox) -> None:
        self.key = key
        self.ns = ns
        self.relay = relay
        self.members: set[str] = set()
        self.listeners: set[str] = set()
        self.relayed = 0
        self.empty_since: float | None = None  # monotonic time its last member left (``group_linger``)
        #: op types whose latest relayed payload per ``payload["topic"]`` a member gets at its attach (the members
        #: name them: the runtime knows no op's meaning), and those payloads
        self.replay_types: set[str] = set()
        self.replayed: dict[tuple[str, Any], Any] = {}


class RuntimeServer:
    """``kqactors runtime --dir DIR``: the shared runtime's process. ``hosts`` toppar hosts besides main's."""

    def __init__(self, directory: str, hosts: int = 1, group: str | None = None, log_level: str = "WARNING",
                 preload: Iterable[str] | None = None, group_linger: float = 0.0) -> None:
        self.directory = os.path.abspath(directory)
        self.hosts = int(hosts)
        self.group = group
        self.log_level = log_level
        self.preload = None if preload is None else list(preload)  # None: MAIN_/TOPPAR_HOST_PRELOAD
        if group_linger < 0:
            raise ValueError("group_linger must be >= 0")
        #: seconds a shared group outlives its last member (its connections stay up for the next client)
        self.group_linger = float(group_linger)
        self.rt: SharedRuntime | None = None
        self.clients: dict[str, int] = {}  # namespace -> pid of the attached app
        self.groups: dict[str, _Group] = {}  # group key -> group
        self.member_group: dict[str, _Group] = {}  # member namespace -> its group
        self._group_numbers = itertools.count(1)
        self._poller: zmq.Poller | None = None
        self._relays: dict[Any, _Group] = {}  # relay socket -> group
        self.stopping = threading.Event()
        self._ns_numbers = itertools.count(1)
        self._context: zmq.Context | None = None
        self._ctl: socket.socket | None = None
        self._connections: dict[int, socket.socket] = {}  # fd -> an app's control connection
        self._after_reply: list[Callable[[], Any]] = []  # work for after the answer to a request has left

    def start(self) -> None:
        d = self.directory
        os.makedirs(d, exist_ok=True)
        info_path = os.path.join(d, RUNTIME_FILE)
        if os.path.exists(info_path):
            try:
                read_runtime_info(d)
            except ActorError:
                os.unlink(info_path)  # a runtime that died: take its place
            else:
                raise RuntimeError(f"a shared runtime already runs at {d}")
        mode = 0o700
        if self.group:
            gid = grp.getgrnam(self.group).gr_gid
            os.chown(d, -1, gid)
            mode = 0o770
        os.chmod(d, mode)
        os.umask(0o007 if self.group else 0o077)  # sockets made from now on (hosts' too) get the dir's mode
        run_dir = os.path.join(d, RUN_SUBDIR)
        os.makedirs(run_dir, exist_ok=True)
        os.chmod(run_dir, mode)
        self.rt = SharedRuntime(hosts=self.hosts + 1, run_dir=run_dir, log_level=self.log_level)
        if self.preload is not None:
            if self.preload:
                self.rt.preload(self.preload, range(self.hosts + 1))
        elif self.hosts:
            self.rt.preload(MAIN_HOST_PRELOAD, [0])
            self.rt.preload(TOPPAR_HOST_PRELOAD, range(1, self.hosts + 1))
        else:
            self.rt.preload(DEFAULT_PRELOAD, [0])
        self._context = new_context()
        self._ctl = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        ctl_path = _ctl_path(d)
        with contextlib.suppress(OSError):
            os.unlink(ctl_path)  # a dead runtime's
        self._ctl.bind(ctl_path)
        self._ctl.listen(64)
        tmp = info_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"pid": os.getpid(), "hosts": self.rt.host_keys, "toppar_hosts": self.hosts,
                       "run_dir": run_dir}, f)
        os.replace(tmp, info_path)

    def serve_forever(self) -> None:
        """Serve attach/spawn/stop requests and watch attached apps until ``stopping`` is set (SIGTERM)."""
        assert self.rt is not None and self._ctl is not None
        poller = self._poller = zmq.Poller()
        listener = self._ctl.fileno()
        poller.register(listener, zmq.POLLIN)
        next_check = time.monotonic() + PID_CHECK_S
        while not self.stopping.is_set():
            for sock, _ in poller.poll(20):
                if sock == listener:
                    conn, _ = self._ctl.accept()
                    conn.settimeout(CTL_READ_TIMEOUT_S)  # a client that stalls mid-request cannot stall the server
                    self._connections[conn.fileno()] = conn
                    poller.register(conn.fileno(), zmq.POLLIN)
                elif isinstance(sock, int) and sock in self._connections:
                    self._serve_connection(poller, self._connections[sock])
                elif sock in self._relays:
                    self._relay(self._relays[sock])
            self.rt.poll(0)  # route the hosts' notices (children spawned, host deaths)
            now = time.monotonic()
            if now >= next_check:
                next_check = now + PID_CHECK_S
                for ns, pid in list(self.clients.items()):
                    if not _pid_alive(pid):
                        self._detach(ns, f"its app (pid {pid}) died")
                for group in list(self._relays.values()):
                    if group.empty_since is not None and now - group.empty_since >= self.group_linger:
                        self._stop_group(group)

    def _serve_connection(self, poller: zmq.Poller, conn: socket.socket) -> None:
        """One request of an app's control connection and its answer; a closed or broken connection is dropped."""
        try:
            request = _read_frame(conn)
            if request is not None:
                _write_frame(conn, self._serve(msgpack.unpackb(request, raw=False)))
        except (OSError, ValueError) as exc:
            log.info("a control connection failed: %s", exc)
            request = None
        if request is None:
            poller.unregister(conn.fileno())
            self._connections.pop(conn.fileno(), None)
            conn.close()
        while self._after_reply:
            self._after_reply.pop(0)()

    def _serve(self, request: dict) -> dict:
        rt = self.rt
        assert rt is not None
        kind = request.get("op")
        try:
            if kind == "attach":
                ns = str(request.get("ns") or "")
                # the app's own proposal (bound already): its pid's, and not taken by a dead process of that pid
                if not re.fullmatch(rf"{NS_MARK}{int(request['pid'])}x\d{{1,9}}", ns) or ns in self.clients:
                    ns = f"_ns{next(self._ns_numbers)}"
                self.clients[ns] = int(request["pid"])
                rt._plumbing.supervisor.namespaces.add(ns)
                reply = {"ns": ns, "hosts": rt.host_keys, "run_dir": rt.run_dir, "pid": os.getpid()}
                key = request.get("group")
                if key:
                    group = self.groups.get(str(key)) or self._new_group(str(key))
                    group.members.add(ns)
                    group.empty_since = None
                    group.replay_types.update(str(kind) for kind in request.get("replay") or ())
                    self.member_group[ns] = group
                    rt._plumbing.supervisor.member_group[ns] = group.ns
                    reply["group"] = group.ns
                    # the group's actors and their hosts: the member's spawn of one of them (its main at least,
                    # in a group that lingered or has other members) needs no request of its own
                    reply["actors"] = {name: spec.host for name, spec in rt._plumbing.supervisor.specs.items()
                                       if namespace_of(name) == group.ns}
                    # what the group's actors told every member so far (a topic's partition count): the new member
                    # knows it from the start instead of asking
                    reply["replay"] = [[kind, payload] for (kind, _), payload in group.replayed.items()]
                self._after_reply.append(lambda: self._preconnect(app_name(ns)))
                log.info("attached pid %s as %s%s", request["pid"], ns, f" in {reply['group']}" if key else "")
                return reply
            if kind == "status":
                return {"clients": dict(self.clients), "hosts": rt.host_keys,
                        "pids": {k: rt.host_pid(k) for k in rt.host_keys},
                        "groups": {g.ns: {"members": sorted(g.members), "retired": self.groups.get(g.key) is not g,
                                          "actors": sorted(n for n in rt._plumbing.supervisor.specs
                                                           if namespace_of(n) == g.ns)}
                                   for g in self._relays.values()}}
            ns = str(request.get("ns"))
            if ns not in self.clients:
                return {"error": ErrorCode.TERMINATED, "message": f"{ns} is not attached (runtime restarted?)"}
            group = self.member_group.get(ns)
            if kind == "spawn" and group is not None and namespace_of(str(request["name"])) == group.ns:
                return self._spawn_shared(group, request)
            if kind == "spawn":
                name, parent = str(request["name"]), str(request.get("parent") or app_name(ns))
                if namespace_of(name) != ns or namespace_of(parent) != ns:
                    return {"error": ErrorCode.SPAWN_FAILED, "message": f"{name} is outside namespace {ns}"}
                host = rt.spawn(name, request["factory"], request.get("args") or {}, host=request["host"],
                                parent=parent, timeout=float(request.get("timeout", 30.0)),
                                wait=bool(request.get("wait", True)))
                return {"host": host}
            if kind == "stop":
                name = str(request["name"])
                if namespace_of(name) == ns:  # a group's actors live as long as the group
                    rt.stop(name)
                return {}
            if kind == "preload":
                rt.preload(request.get("modules") or (), request.get("hosts") or ())
                return {}
            if kind == "detach":
                self._detach(ns, "it detached")
                return {}
            return {"error": ErrorCode.BAD_OP, "message": f"unknown request {kind!r}"}
        except ActorError as exc:
            return {"error": exc.code, "message": exc.message}
        except (ValueError, TypeError, KeyError) as exc:
            return {"error": ErrorCode.BAD_OP, "message": f"{type(exc).__name__}: {exc}"}

    def _preconnect(self, key: str) -> None:
        """Connect to a new app's inbox now (relayed events, host deaths go there): the app binds it right after
        this reply, and the socket retries its connection every few ms until then."""
        p = self.rt._plumbing if self.rt is not None else None
        if p is None or p.outbox is None:
            return
        with p.send_lock:
            p.outbox.connect(key)

    def _detach(self, ns: str, why: str) -> None:
        self.clients.pop(ns, None)
        assert self.rt is not None
        stopped = self.rt._plumbing.supervisor.drop_namespace(ns)
        log.info("%s detached (%s): %d actors stopped", ns, why, stopped)
        group = self.member_group.pop(ns, None)
        self.rt._plumbing.supervisor.member_group.pop(ns, None)
        if group is not None:
            self._leave_group(group, ns)
        p = self.rt._plumbing
        with p.send_lock:
            if p.outbox is not None:
                p.outbox.reset(app_name(ns))
        # the hosts drop their sockets to its inbox too (each would retry connecting to the gone path for ever)
        with contextlib.suppress(ActorError, zmq.ZMQError):
            p.supervisor._broadcast(Op(FORGET_ENDPOINT, {"key": app_name(ns)}, target=HOST_CONTROL))
        with contextlib.suppress(OSError):
            os.unlink(ipc_path(self.rt.run_dir or "", app_name(ns)))

    # ---- shared groups ---------------------------------------------------------------------------------
    def _new_group(self, key: str) -> _Group:
        rt = self.rt
        assert rt is not None and rt.run_dir is not None and rt._plumbing.context is not None
        ns = f"{GROUP_MARK}{next(self._group_numbers)}"
        group = _Group(key, ns, ZmqInbox(rt._plumbing.context, rt.run_dir, app_name(ns)))
        self.groups[key] = group
        self._relays[group.relay.socket] = group
        if self._poller is not None:
            self._poller.register(group.relay.socket, zmq.POLLIN)
        log.info("shared group %s created", ns)
        return group

    def _spawn_shared(self, group: _Group, request: dict) -> dict:
        """A member's spawn of a group actor: the existing one's host if another member spawned it, else it is
        spawned with the group's relay as its parent (CHILD_EXITED reaches every member)."""
        rt = self.rt
        assert rt is not None
        name = str(request["name"])
        if request.get("member_notices"):
            group.listeners.add(name)
        spec = rt._plumbing.supervisor.specs.get(name)
        if spec is not None:
            return {"host": spec.host, "shared": True}
        host = rt.spawn(name, request["factory"], request.get("args") or {}, host=request["host"],
                        parent=app_name(group.ns), timeout=float(request.get("timeout", 30.0)),
                        wait=bool(request.get("wait", True)))
        return {"host": host}

    def _leave_group(self, group: _Group, ns: str) -> None:
        """A member detached or died: its member-aware actors forget it; the last one out stops the group."""
        group.members.discard(ns)
        rt = self.rt
        assert rt is not None
        if group.members or (self.group_linger > 0 and self.groups.get(group.key) is group):
            for name in list(group.listeners):
                with contextlib.suppress(ActorError):
                    rt.send(name, Op(MEMBER_LEFT, {"member": app_name(ns)}))
            if not group.members:
                group.empty_since = time.monotonic()  # kept for the next client: see serve_forever
            return
        self._stop_group(group)

    def _stop_group(self, group: _Group) -> None:
        rt = self.rt
        assert rt is not None
        stopped = rt._plumbing.supervisor.drop_namespace(group.ns)
        if self.groups.get(group.key) is group:
            del self.groups[group.key]
        self._relays.pop(group.relay.socket, None)
        if self._poller is not None:
            self._poller.unregister(group.relay.socket)
        group.relay.close()
        with contextlib.suppress(OSError):
            os.unlink(ipc_path(rt.run_dir or "", app_name(group.ns)))
        log.info("shared group %s stopped: %d actors stopped", group.ns, stopped)

    def _relay(self, group: _Group) -> None:
        """What the group's actors sent to "app" (errors, logs, statistics, topic partition counts, children
        spawned, restarts): to every member's inbox."""
        rt = self.rt
        assert rt is not None
        for ops in group.relay.recv_batches():
            group.relayed += len(ops)
            if group.replay_types:
                for op in ops:
                    if op.type in group.replay_types and isinstance(op.payload, dict):
                        group.replayed[(op.type, op.payload.get("topic"))] = op.payload
            if self.groups.get(group.key) is group and any(
                    isinstance(op.payload, dict) and op.payload.get("fatal") for op in ops):
                # A fatal error (a fenced producer id): the group ends with its members; a client that attaches
                # with the same settings from now on starts a fresh group, as a new client would.
                del self.groups[group.key]
                log.info("shared group %s retired after a fatal error", group.ns)
            for member in list(group.members):
                with contextlib.suppress(ActorError, zmq.ZMQError):
                    rt._transmit(app_name(member), ops)

    def close(self) -> None:
        for group in list(self.groups.values()):
            group.relay.close()
        self.groups.clear()
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()
        if self._ctl is not None:
            self._ctl.close()
        if self._context is not None:
            self._context.term()
        if self.rt is not None:
            self.rt.close()
        for name in (RUNTIME_FILE, CTL_KEY + ".sock"):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self.directory, name))

    def run(self) -> int:
        """Start, serve until SIGTERM/SIGINT, close."""
        previous = {sig: signal.signal(sig, lambda *_: self.stopping.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            self.start()
            self.serve_forever()
        finally:
            self.close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return 0


# ---- the attached app's side -------------------------------------------------------------------------------
class RemoteControl:
    """The attached app's control connection to the server: one request at a time, bounded by a timeout. A plain
    unix stream socket: connecting is one system call, where a ZeroMQ socket's first request waited for its
    connection's handshake (several hops between the two processes' I/O threads: most of an attach)."""

    def __init__(self, directory: str) -> None:
        self._address = _ctl_path(directory)
        self._lock = threading.Lock()
        self._socket: socket.socket | None = self._connect()

    def _connect(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(self._address)
        except OSError as exc:
            sock.close()
            raise ActorError(ErrorCode.TERMINATED, f"no shared runtime answers at {self._address}: {exc}") from None
        return sock

    def call(self, request: dict, timeout: float = CTL_TIMEOUT_S,
             meanwhile: Callable[[], Any] | None = None) -> dict:
        """Send ``request`` and wait for the server's answer; ``meanwhile()`` runs between the two (work of the
        caller's that does not need the answer, done while the server serves the request)."""
        with self._lock:
            if self._socket is None:
                raise ActorError(ErrorCode.CLOSED, "detached from the shared runtime")
            sock = self._socket
            deadline = time.monotonic() + timeout
            try:
                _write_frame(sock, request)
                if meanwhile is not None:
                    meanwhile()
                sock.settimeout(max(deadline - time.monotonic(), 0.001))
                frame = _read_frame(sock)
            except (OSError, ValueError) as exc:
                # no answer in time (or a broken connection): one that comes later must not answer the next call
                sock.close()
                self._socket = None
                with contextlib.suppress(ActorError):
                    self._socket = self._connect()
                if isinstance(exc, TimeoutError):
                    raise ActorError(ErrorCode.TIMED_OUT, f"the shared runtime did not answer {request.get('op')}"
                                     ) from None
                raise ActorError(ErrorCode.TERMINATED, f"the shared runtime's control connection failed: {exc}"
                                 ) from None
            if frame is None:
                sock.close()
                self._socket = None
                raise ActorError(ErrorCode.TERMINATED, "the shared runtime closed the control connection")
            reply = msgpack.unpackb(frame, raw=False)
        if reply.get("error"):
            raise ActorError(reply["error"], reply.get("message", ""))
        return reply

    def close(self) -> None:
        with self._lock:
            if self._socket is not None:
                self._socket.close()
                self._socket = None


class RemoteSupervisor:
    """What Runtime needs of a Supervisor, with the server's supervisor doing the spawning."""

    def __init__(self, control: RemoteControl, ns: str, host_keys: list[str],
                 member_factories: Iterable[str] = (), group_actors: dict[str, str] | None = None) -> None:
        self.control = control
        self.ns = ns
        self.member_factories = frozenset(member_factories)  # group actors that want MEMBER_LEFT
        #: the group's actors when this app attached (full name -> host): they live as long as the group, which
        #: lives while this app is a member, so spawning one of them asks the server nothing
        self.group_actors = dict(group_actors or {})
        self.host_keys = list(host_keys)
        self.specs: dict[str, Any] = {}
        self.down_hosts: set[str] = set()
        self.restarts: dict[str, int] = dict.fromkeys(host_keys, 0)
        self.closing = threading.Event()
        self._lock = threading.Lock()

    def host_of(self, name: str) -> str | None:
        spec = self.specs.get(name)
        return spec.host if spec is not None else None

    def spawn(self, name: str, factory: str, args: dict | None, parent: str, host: str, timeout: float,
              wait: bool = True) -> None:
        """The runtime server spawns it and answers. ``wait=False`` as the Supervisor's: the server answers once it
        has sent the host the SPAWN, not once the host has made the actor (ops sent to it meanwhile wait on the
        host; a failure is only logged there)."""
        if name in self.specs:
            raise ValueError(f"an actor named {name!r} already exists (on {self.specs[name].host})")
        if host in self.down_hosts:
            raise ActorError(ErrorCode.DEAD_ACTOR, f"host {host} is restarting")
        known = self.group_actors.get(name)
        if known is not None:  # the server would answer with its host (``_spawn_shared``)
            with self._lock:
                self.specs[name] = _Spec(name, known, parent)
            return
        reply = self.control.call({"op": "spawn", "ns": self.ns, "name": name, "factory": factory,
                                   "args": args or {}, "host": host, "parent": parent, "timeout": timeout,
                                   "wait": wait, "member_notices": factory in self.member_factories}, timeout + 1.0)
        host = str(reply.get("host") or host)  # a group actor another member spawned runs where it runs
        with self._lock:
            self.specs[name] = _Spec(name, host, parent)

    def preload(self, key: str, modules: list[str]) -> None:
        self.control.call({"op": "preload", "ns": self.ns, "modules": list(modules), "hosts": [key]})

    def stop(self, name: str) -> None:
        with self._lock:
            if self.specs.pop(name, None) is None:
                raise ActorError(ErrorCode.UNKNOWN_ACTOR, f"no actor named {name!r}")
        self.control.call({"op": "stop", "ns": self.ns, "name": name})

    def child_spawned(self, payload: dict) -> None:
        with self._lock:
            self.specs.setdefault(payload["name"], _Spec(payload["name"], payload["host"], payload.get("parent")))

    def child_stopped(self, payload: dict) -> None:
        with self._lock:
            spec = self.specs.get(payload["name"])
            if spec is not None and spec.host == payload.get("host"):
                del self.specs[spec.name]


class _Spec:
    __slots__ = ("name", "host", "parent")

    def __init__(self, name: str, host: str, parent: str | None) -> None:
        self.name = name
        self.host = host
        self.parent = parent


class _AttachedPlumbing(_Plumbing):
    def __init__(self) -> None:
        super().__init__("zmq")
        self.inbox_path: str | None = None
        self.ns: str | None = None  # the namespace the server gave this app, once it answered the attach

    def close(self, timeout: float = 5.0) -> None:
        self.closing = True
        with self.close_lock:
            if self.closed:
                return
            self.closed = True
            if self.forked or os.getpid() != self.pid:
                return
            receiving = self.recv_lock.acquire(timeout=2.0)
            try:
                if self.supervisor is not None:
                    self.supervisor.closing.set()
                if isinstance(self.control, RemoteControl):
                    if self.ns is not None:  # None: the attach itself failed, there is nothing to detach
                        with contextlib.suppress(ActorError, zmq.ZMQError):
                            self.control.call({"op": "detach", "ns": self.ns}, timeout=min(timeout, 2.0))
                    self.control.close()
                with self.send_lock:
                    if self.outbox is not None:
                        self.outbox.close()
                    if self.inbox is not None:
                        self.inbox.close()
                if self.context is not None:
                    self.context.term()
                if self.inbox_path:
                    with contextlib.suppress(OSError):
                        os.unlink(self.inbox_path)
            finally:
                if receiving:
                    self.recv_lock.release()


class AttachedRuntime(Runtime):
    """A Runtime whose hosts belong to the shared runtime at ``directory``: same API, plain actor names
    (qualified with this app's namespace on the way out, stripped on the way in); attaching costs one
    round trip to the server and a socket bind.

    ``group``: join the shared group of that key (its actors serve every app that attaches with the same key;
    this app's actor names resolve to the group's, its inbox stays its own). ``factories``: in a group, the
    factory spawned instead of a given one (a member-aware actor, told of members that leave). ``replay``: op
    types the group's actors send to every member whose latest payload per topic this app gets at its attach
    (``replayed``)."""

    def __init__(self, directory: str, *, timeout: float = CTL_TIMEOUT_S, group: str | None = None,
                 factories: dict[str, str] | None = None, replay: Iterable[str] = ()) -> None:
        started = time.perf_counter()
        directory = os.path.abspath(directory)
        info = read_runtime_info(directory)
        p = _AttachedPlumbing()
        self._init_state(p, list(info["hosts"]))
        self.directory = directory
        self.server_pid = int(info["pid"])
        self._qualified: dict[str, str] = {}
        self.lost = False
        #: called (on the watcher thread) once the server is gone, after the monitors were told
        self.on_lost: Callable[[], Any] | None = None
        self._attached = threading.Event()  # the attach is over (done or failed): the watcher may act
        known_run_dir = info.get("run_dir")
        # This app's namespace, proposed: made of its pid, so no live app has it, and its inbox is bound while the
        # server serves the attach (the server gives another one if a dead process of this pid still holds it)
        proposal = f"{NS_MARK}{os.getpid()}x{next(_PROPOSALS)}"

        def meanwhile() -> None:  # while the server serves the attach: what does not need its answer
            if known_run_dir:
                self._connect_hosts()
                self._bind_inbox(str(known_run_dir), proposal)
            # A daemon thread of the low-level kind: threading's Thread.start() waits until the new thread runs,
            # which on a busy machine is milliseconds of an attach
            _thread.start_new_thread(self._watch_server, ())

        try:
            p.context = new_context()
            control = RemoteControl(directory)
            p.control = control
            request: dict[str, Any] = {"op": "attach", "pid": os.getpid(), "ns": proposal}
            if group:
                request["group"] = group
                replay = list(replay)
                if replay:
                    request["replay"] = replay
            if known_run_dir:
                p.outbox = ZmqOutbox(p.context, str(known_run_dir))
            reply = control.call(request, timeout, meanwhile=meanwhile)
            self.ns = p.ns = ns = str(reply["ns"])
            #: the shared group this app is a member of (its actors' namespace), or None
            self.group: str | None = str(reply["group"]) if reply.get("group") else None
            self._actor_ns = self.group or ns
            self._factories = dict(factories or {}) if self.group else {}
            self._app = app_name(ns)
            self.server_pid = int(reply["pid"])
            #: (op type, payload) of what the group's actors told its members before this app attached, for the op
            #: types named in ``replay`` (the latest per topic)
            self.replayed: list[tuple[str, Any]] = [(str(kind), payload) for kind, payload in reply.get("replay") or ()]
            self._shared_run_dir = run_dir = str(reply["run_dir"])
            if p.outbox is None or run_dir != known_run_dir:
                if p.outbox is not None:
                    p.outbox.close()
                p.outbox = ZmqOutbox(p.context, run_dir)
                self._connect_hosts()
            if p.inbox is None or ns != proposal or run_dir != known_run_dir:  # not the one bound meanwhile
                if p.inbox is not None:
                    p.inbox.close()
                    with contextlib.suppress(OSError):
                        os.unlink(p.inbox_path or "")
                    for key in self.host_keys:  # they were told to connect to it: they would retry for ever
                        p.outbox.send(key, [Op(FORGET_ENDPOINT, {"key": app_name(proposal)}, target=HOST_CONTROL)])
                self._bind_inbox(run_dir, ns)
            p.supervisor = RemoteSupervisor(control, ns, self.host_keys, self._factories.values(),
                                            reply.get("actors"))
        except BaseException:
            p.close(timeout=1.0)
            self._attached.set()
            raise
        self._attached.set()
        self.attach_seconds = time.perf_counter() - started

    def _bind_inbox(self, run_dir: str, ns: str) -> None:
        """Bind this app's inbox and have every host connect to it now, not when its first reply to this app is
        ready (CONNECT_ENDPOINT)."""
        p = self._plumbing
        assert p.context is not None and p.outbox is not None
        p.inbox = ZmqInbox(p.context, run_dir, app_name(ns))
        p.inbox_path = ipc_path(run_dir, app_name(ns))
        for key in self.host_keys:
            p.outbox.send(key, [Op(CONNECT_ENDPOINT, {"key": app_name(ns)}, target=HOST_CONTROL)])

    def _connect_hosts(self) -> None:
        """A socket to every host of the runtime, made while the attach request is served: ZeroMQ's connection
        handshake (a few hops between this process's and the host's I/O threads) is over before the first op
        (a metadata request, the first produce) is sent, instead of that op waiting for it."""
        outbox = self._plumbing.outbox
        assert outbox is not None
        for key in self.host_keys:
            outbox.connect(key)

    @property
    def run_dir(self) -> str | None:
        return self._shared_run_dir

    def _q(self, name: str) -> str:
        full = self._qualified.get(name)
        if full is None:
            full = self._qualified[name] = app_name(self.ns) if name == APP else qualify(self._actor_ns, name)
        return full

    def _strip(self, name: str | None) -> str | None:
        """A full name as this app knows it: its group's actors and its own namespace's, unprefixed."""
        name = strip(self.ns, name)
        return strip(self.group, name) if self.group else name

    # -- the Runtime API, in plain names ---------------------------------------------------------------------
    def spawn(self, name: str, actor_factory: str, args: dict | None = None, *, host: int | str | None = None,
              parent: str = APP, timeout: float = 30.0, wait: bool = True) -> str:
        return super().spawn(self._q(name), self._factories.get(actor_factory, actor_factory), args, host=host,
                             parent=self._q(parent), timeout=timeout, wait=wait)

    def stop(self, name: str) -> None:
        super().stop(self._q(name))

    def host_of(self, name: str) -> str | None:
        return super().host_of(self._q(name))

    def preload(self, modules: Iterable[str], hosts: Iterable[int | str]) -> None:
        pass  # the server's hosts imported the client modules at start

    def send(self, name: str, op: Op, *, qid: int = 0) -> None:
        super().send(self._q(name), op, qid=qid)

    def send_many(self, items: Iterable[tuple[str, Op]]) -> None:
        q = self._q
        super().send_many([(q(name), op) for name, op in items])

    def request_async(self, name: str, op: Op, reply_queue: Any, timeout: float) -> int:
        return super().request_async(self._q(name), op, reply_queue, timeout)

    def kill_host(self, key: str) -> None:
        raise ActorError(ErrorCode.BAD_OP, "an attached client cannot kill the shared runtime's hosts")

    # -- what comes in ------------------------------------------------------------------------------------------
    def _route(self, op: Op) -> None:
        if op.sender:
            op.sender = self._strip(op.sender)
        if op.target == HOST_CONTROL:
            if op.type == HOST_DOWN:
                self._remote_down(op.payload or {})
                return
            if op.type == HOST_UP:
                self._plumbing.supervisor.down_hosts.discard((op.payload or {}).get("host"))
                return
        elif op.type == "CHILD_EXITED" and isinstance(op.payload, dict):
            op.payload["name"] = self._strip(op.payload.get("name"))
        super()._route(op)

    def _remote_down(self, payload: dict) -> None:
        """A host of the shared runtime died (or the runtime itself: host "*"): fail what waits on its actors,
        tell the monitors with plain names."""
        sup = self._plumbing.supervisor
        key = str(payload.get("host", ""))
        if key == "*":
            sup.down_hosts.update(self.host_keys)
        else:
            sup.down_hosts.add(key)
            sup.restarts[key] = int(payload.get("restarts") or sup.restarts.get(key, 0) + 1)
        names = list(payload.get("names") or ())
        self._host_down({"names": names, "host": key if key != "*" else ""})
        if key == "*":
            with self._plumbing.send_lock:
                if self._plumbing.outbox is not None:
                    for host in self.host_keys:
                        self._plumbing.outbox.reset(host)
        notice = {"host": key, "names": [self._strip(n) for n in names],
                  "restarts": int(payload.get("restarts") or 1), "exitcode": payload.get("exitcode")}
        for queue in list(self._plumbing.monitors):
            queue.enqueue(Op(ACTORS_DOWN, dict(notice), target=APP, qid=queue.qid))

    def _watch_server(self) -> None:
        """The watcher thread (started while the attach is served): once the server's process is gone, fail
        what waits on its hosts and tell the monitors."""
        p = self._plumbing
        while True:
            pid = self.server_pid
            if not self._wait_for_exit(pid):
                return  # the client closed
            self._attached.wait()
            if p.closing:
                return
            if self.server_pid == pid:
                break
            # runtime.json named a server that stopped; the attach was answered by the one that replaced it

        self.lost = True
        log.error("the shared runtime at %s (pid %d) stopped", self.directory, self.server_pid)
        self._remote_down({"host": "*", "names": list(p.supervisor.specs), "restarts": 1, "exitcode": None})
        if self.on_lost is not None:
            try:
                self.on_lost()
            except Exception:  # noqa: BLE001 - the watcher must finish waking the waiters
                log.exception("the shared runtime's loss handler failed")
        with self._cond:
            self._cond.notify_all()

    def _wait_for_exit(self, pid: int) -> bool:
        """Wait until process ``pid`` exits (True) or this client closes (False)."""
        p = self._plumbing
        try:
            fd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            fd = None
        try:
            while not p.closing:
                if fd is not None:
                    if select.select([fd], [], [], 0.25)[0]:
                        return True
                else:
                    time.sleep(0.25)
                    if not _pid_alive(pid):
                        return True
        finally:
            if fd is not None:
                os.close(fd)
        return False

    def _route_key(self, name: str) -> str:
        if self.lost:
            raise ActorError(ErrorCode.DEAD_ACTOR, f"the shared runtime at {self.directory} stopped; create the "
                                                   "client again once it runs")
        return super()._route_key(name)


def runtime_status(directory: str, timeout: float = CTL_TIMEOUT_S) -> dict:
    """The running shared runtime's state: attached apps (namespace → pid), hosts and their pids, and its groups
    (namespace → members, actors, whether it is retired). ActorError(TERMINATED) if none runs there."""
    directory = os.path.abspath(directory)
    read_runtime_info(directory)
    control = RemoteControl(directory)
    try:
        return control.call({"op": "status"}, timeout)
    finally:
        control.close()


def attach(directory: str, timeout: float = CTL_TIMEOUT_S) -> AttachedRuntime:
    return AttachedRuntime(directory, timeout=timeout)
