"""Runs in: the app process. Owns the host processes: launching them, the watcher thread that notices a
death at once (pidfd, else polling), and the supervisor's control socket pair (PULL ``sup`` + PUSH).

Start method: each host is a fresh interpreter (``python -m kqactors.runtime.host_process``) launched with
subprocess, i.e. the "spawn" model without multiprocessing: it is safe in apps that run threads (no fork
of a threaded process), never re-imports the app's ``__main__`` and starts no resource-tracker process.
Hosts are launched from the long-lived watcher thread because Linux's PR_SET_PDEATHSIG fires when the
*thread* that started the child exits.
"""

from __future__ import annotations

import logging
import os
import queue
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

import zmq

import kqactors

from .host import READY, SUPERVISOR_KEY
from .host_launch import host_interpreter
from .op import REPLY, SUPERVISOR, TERMINATE, ActorError, ErrorCode, Op
from .transport_zmq import ZmqInbox, ZmqOutbox

log = logging.getLogger(__name__)

POLL_FALLBACK_INTERVAL = 0.1


def _package_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(kqactors.__file__)))


def _close_lifeline(proc: subprocess.Popen) -> None:
    if proc.stdin is not None:
        try:
            proc.stdin.close()
        except OSError:
            pass


class ZmqControl:
    """The ControlChannel over ZeroMQ and real processes."""

    def __init__(self, context: zmq.Context, run_dir: str, on_death: Callable[[str, int | None], None],
                 log_level: str = "WARNING") -> None:
        self._run_dir = run_dir
        self._log_level = log_level
        self._on_death = on_death
        self.inbox = ZmqInbox(context, run_dir, SUPERVISOR_KEY)
        self.outbox = ZmqOutbox(context, run_dir)
        self.procs: dict[str, subprocess.Popen] = {}
        self._launched: set[str] = set()  # keys started once: a second launch is a restart (--restarted)
        self.ready: set[str] = set()  # hosts seen READY (launch_hosts does not wait for it)
        self._pidfds: dict[int, str] = {}
        self._req_id = 0
        self._io_lock = threading.Lock()
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._wake_r, self._wake_w = os.pipe()
        self._stopping = False
        self.closing = False
        self._thread = threading.Thread(target=self._watch, name="kqactors-supervisor", daemon=True)
        self._thread.start()

    # -- launching (on the watcher thread) -------------------------------------------------------------
    def _launch(self, key: str) -> subprocess.Popen:
        options, env = host_interpreter(_package_root(), os.environ)  # -S when safe: host_launch.py
        cmd = [sys.executable, *options, "-m", "kqactors.runtime.host_process", "--key", key, "--run-dir", self._run_dir,
               "--parent-pid", str(os.getpid()), "--log-level", self._log_level]
        if key in self._launched:
            cmd.append("--restarted")
        self._launched.add(key)
        # stdin is the host's lifeline: only this process holds the write end, so the host sees EOF the
        # moment the app dies, however it dies.
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, close_fds=True, env=env)
        self.procs[key] = proc
        try:
            self._pidfds[os.pidfd_open(proc.pid)] = key
        except (AttributeError, OSError):
            pass  # no pidfd: the watcher polls instead
        return proc

    def _watch(self) -> None:
        use_pidfd = hasattr(os, "pidfd_open")
        while not self._stopping:
            timeout = None if use_pidfd else POLL_FALLBACK_INTERVAL
            try:
                ready, _, _ = select.select([self._wake_r, *self._pidfds], [], [], timeout)
            except (OSError, ValueError):
                ready = []
            if self._wake_r in ready:
                os.read(self._wake_r, 512)
            while True:
                try:
                    keys, future = self._commands.get_nowait()
                except queue.Empty:
                    break
                try:
                    future.set_result([self._launch(k) for k in keys])
                except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
                    future.set_exception(exc)
            for fd in [fd for fd in ready if fd in self._pidfds]:
                key = self._pidfds.pop(fd)
                os.close(fd)
                self._reap(key)
            if not use_pidfd:
                for key, proc in list(self.procs.items()):
                    if proc.poll() is not None:
                        self._reap(key)

    def _reap(self, key: str) -> None:
        proc = self.procs.get(key)
        if proc is None:
            return
        try:
            exitcode = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return
        if self.closing or self._stopping:
            return
        del self.procs[key]
        _close_lifeline(proc)
        threading.Thread(target=self._on_death, args=(key, exitcode), name=f"kqactors-restart-{key}",
                         daemon=True).start()

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    # -- ControlChannel ----------------------------------------------------------------------------
    def launch_hosts(self, keys: list[str], timeout: float) -> list[subprocess.Popen]:
        """Launch the host processes and return at once, without waiting for them to be READY: ops sent to
        them meanwhile wait in their PUSH sockets (connected before the host binds) and are served in order
        once the host runs. A host that fails at start-up is then a death like any other (restarted)."""
        future: Future = Future()
        self._commands.put((list(keys), future))
        self._wake()
        return future.result(timeout)

    def start_hosts(self, keys: list[str], timeout: float) -> None:
        procs = self.launch_hosts(keys, timeout)
        deadline = time.monotonic() + timeout
        waiting = set(keys)
        with self._io_lock:
            while waiting:
                for op in self._recv_until(deadline, procs):
                    if op.type == READY and op.payload.get("host") in waiting:
                        waiting.discard(op.payload["host"])

    def _recv_until(self, deadline: float, procs: list[subprocess.Popen]) -> list[Op]:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ActorError(ErrorCode.SPAWN_FAILED, "timed out waiting for host processes to start")
        if not self.inbox.poll(int(min(remaining, 0.2) * 1000) + 1):
            dead = [p for p in procs if p.poll() is not None]
            if dead:
                raise ActorError(ErrorCode.SPAWN_FAILED,
                                 f"host process {dead[0].pid} exited with code {dead[0].returncode} at start-up")
            return []
        ops = [op for batch in self.inbox.recv_batches() for op in batch]
        self.ready.update(op.payload.get("host") for op in ops if op.type == READY)
        return ops

    def is_ready(self, key: str) -> bool:
        """Has host ``key`` reported READY? Never blocks: reads what the supervisor's inbox holds now (only READY
        notices wait there between calls; a call in progress on another thread reads them itself)."""
        if key in self.ready:
            return True
        if self._io_lock.acquire(blocking=False):
            try:
                if not self._stopping:  # closed (or closing) sockets: what was read before is all there is
                    self.ready.update(op.payload.get("host") for batch in self.inbox.recv_batches()
                                      for op in batch if op.type == READY)
            finally:
                self._io_lock.release()
        return key in self.ready

    def send(self, key: str, ops: list[Op]) -> None:
        with self._io_lock:
            self.outbox.send(key, ops)

    def call(self, key: str, op: Op, timeout: float) -> Op:
        with self._io_lock:
            self._req_id += 1
            op.req_id = self._req_id
            op.reply_to = (SUPERVISOR, 0, 0)
            self.outbox.send(key, [op])
            deadline = time.monotonic() + timeout
            proc = self.procs.get(key)
            while True:
                try:
                    ops = self._recv_until(deadline, [proc] if proc is not None else [])
                except ActorError as exc:
                    raise ActorError(ErrorCode.DEAD_ACTOR if "exited" in exc.message else ErrorCode.TIMED_OUT,
                                     f"no answer from host {key} to {op.type}: {exc.message}") from None
                for reply in ops:
                    if reply.flags & REPLY and reply.req_id == op.req_id:
                        return reply

    def forget(self, key: str) -> None:
        with self._io_lock:
            self.outbox.reset(key)

    # -- testing and shutdown ----------------------------------------------------------------------
    def pid(self, key: str) -> int | None:
        proc = self.procs.get(key)
        return proc.pid if proc is not None and proc.poll() is None else None

    def kill(self, key: str) -> None:
        pid = self.pid(key)
        if pid is None:
            raise ActorError(ErrorCode.DEAD_ACTOR, f"host {key} is not running")
        os.kill(pid, signal.SIGKILL)

    def close(self, timeout: float) -> None:
        """TERMINATE every host, wait, then kill stragglers; stop the watcher; close the sockets."""
        self.closing = True
        procs = dict(self.procs)
        with self._io_lock:
            try:
                self.ready.update(op.payload.get("host") for batch in self.inbox.recv_batches() for op in batch
                                  if op.type == READY)
            except zmq.ZMQError:
                pass
            for key, proc in procs.items():
                if key not in self.ready and proc.poll() is None:
                    proc.kill()  # still starting (interpreter, imports): it holds nothing, and would hear
                    continue     # TERMINATE only once its imports are done
                if proc.poll() is None:
                    try:
                        self.outbox.send(key, [Op(TERMINATE, target="@host")])
                    except zmq.ZMQError:
                        pass
        deadline = time.monotonic() + timeout
        for proc in procs.values():
            try:
                proc.wait(timeout=max(0.05, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
        for proc in procs.values():
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                log.error("host process %d did not die", proc.pid)
            _close_lifeline(proc)
        self._stopping = True
        self._wake()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)
        for fd in list(self._pidfds):
            os.close(fd)
        self._pidfds.clear()
        os.close(self._wake_r)
        os.close(self._wake_w)
        with self._io_lock:
            self.outbox.close()
            self.inbox.close()
