"""Runs in: a host process, started by the supervisor as ``python -m kqactors.runtime.host_process``.
Owns the host's poll loop: the zmq inbox plus actor-owned file descriptors, timers, and the watch on the
app process so a host never outlives its app.

Three watches, because each alone has a gap: PR_SET_PDEATHSIG (instant, Linux only), a lifeline pipe on
stdin whose write end only the app holds (EOF when the app dies, seen by a thread even while the loop is
busy inside an actor), and a parent-pid poll in the loop. An orphaned host removes the run dir and leaves
with ``os._exit``: the app is gone, nothing is left to flush, and an orderly interpreter exit could wait
on a thread or a zmq context.

The death signal comes once per thread of the dying app (Linux re-parents a child to each remaining thread
of its parent in turn and signals it every time), so only the first SIGTERM counts and the rest are
ignored: a later one must not kill the host halfway through removing the run dir.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import math
import os
import select
import signal
import stat
import sys
import threading
import time
from collections import Counter

import zmq

from .host import READY, SUPERVISOR_KEY, HostCore
from .op import SUPERVISOR, Op
from .transport_zmq import ZmqInbox, ZmqOutbox, ipc_path, new_context, remove_run_dir

log = logging.getLogger(__name__)

PARENT_CHECK_INTERVAL = 0.25  # seconds between parent-pid polls (the PDEATHSIG fallback)
PR_SET_PDEATHSIG = 1
PARENT_GONE_WAIT_S = 2.0  # after a SIGTERM, how long to wait for the app to finish dying
SETTLE_S = 1.0  # no new actor for this long: the start-up objects are frozen (see StartupFreeze)
TRIM_INTERVAL_S = 30.0  # at most this often, a host about to wait hands freed heap pages back (see below)


def _die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGTERM us when the thread that started us dies; then close the start-up race."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:
        os._exit(0)


def _leave_orphaned(run_dir: str) -> None:
    remove_run_dir(run_dir)  # the app cannot tidy up any more: whoever gets here first does
    os._exit(0)


def _watch_lifeline(run_dir: str, parent_pid: int) -> None:
    """Block on stdin (the app holds the only write end); EOF means the app closed it or died."""
    def wait_for_eof() -> None:
        try:
            while os.read(0, 512):
                pass
        except OSError:
            return
        # The kernel closes a dead process's files before it re-parents the children: wait for that. An
        # app that closed the pipe while alive is shutting us down in order, so this thread just waits.
        _parent_gone_within(parent_pid, math.inf)
        _leave_orphaned(run_dir)

    try:
        if not stat.S_ISFIFO(os.fstat(0).st_mode):
            return  # started by hand, without a lifeline
    except OSError:
        return
    threading.Thread(target=wait_for_eof, name="kqactors-lifeline", daemon=True).start()


class _ParentGone(BaseException):
    """Raised from the SIGTERM handler to unwind the loop, whatever it is doing."""


def _on_sigterm(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise _ParentGone()


def _parent_gone_within(parent_pid: int, seconds: float) -> bool:
    """Wait up to ``seconds`` for the app to be really gone (True) or not (False). After a SIGTERM or the
    lifeline's EOF it may take a moment before we are re-parented away from it (its threads die one by
    one); a SIGTERM from anyone else leaves the parent in place."""
    deadline = time.monotonic() + seconds
    while os.getppid() == parent_pid:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


class AllocatorTrim:
    """Hands the C allocator's free pages back to the system, at most once per ``interval`` and only when
    the loop is about to wait anyway. A long-running host passes ZeroMQ frames of every size through glibc's
    malloc; the free space between live blocks is never returned on its own, so a busy host's RSS crept up
    (0.5-2 MB a quarter hour in the soak) with its live memory flat. ``malloc_trim(0)`` releases every free
    page, mid-heap ones included; it takes well under a millisecond on a host's few-MB heaps. A no-op where
    the C library has no ``malloc_trim`` (not glibc)."""

    def __init__(self, interval: float = TRIM_INTERVAL_S, clock=time.monotonic) -> None:
        self.interval = interval
        self.clock = clock
        self.trims = 0
        try:
            self._trim = ctypes.CDLL(None).malloc_trim
        except (OSError, AttributeError):
            self._trim = None
        self._next = clock() + interval

    def before_wait(self) -> None:
        if self._trim is None or self.clock() < self._next:
            return
        self._trim(0)
        self.trims += 1
        self._next = self.clock() + self.interval


class StartupFreeze:
    """Moves what a host's start made (its modules, its actors' set-up) into the GC's permanent generation once
    spawning has settled: no actor spawned for ``settle`` s, checked when the loop is about to wait. A full
    collection then walks only what was made since. Without it, the full collection a steady flow sets off every
    few seconds walked the ~100k start-up objects of a main host, an 18 ms pause: the worst end-to-end
    latencies of bench_latency (all in one burst ~10 s into every run). Frozen objects are never collected,
    so a cycle that was garbage at the freeze stays (a few hundred KB, once per burst of spawns)."""

    def __init__(self, settle: float = SETTLE_S, clock=time.monotonic) -> None:
        self.settle = settle
        self.clock = clock
        self.freezes = 0
        self._seen = 0
        self._due: float | None = None

    def before_wait(self, spawns: int) -> None:
        if spawns != self._seen:
            self._seen = spawns
            self._due = self.clock() + self.settle
        elif self._due is not None and self.clock() >= self._due:
            self._due = None
            gc.freeze()
            self.freezes += 1


def _poll_all(ready: list, inbox: ZmqInbox, core: HostCore, key: str) -> None:
    """Handle what zmq_poll reported when actors registered file descriptors next to the inbox."""
    pollin, pollout = int(zmq.POLLIN), int(zmq.POLLOUT)
    for item, events in ready:
        if item is inbox.socket:
            try:
                batches = inbox.recv_batches()
            except Exception:  # noqa: BLE001 - a malformed message is dropped, never fatal
                log.exception("host %s: undecodable message dropped", key)
                continue
            for batch in batches:
                core.deliver(batch)
        else:
            core.fd_event(item, bool(events & pollin), bool(events & pollout))


def timer_wait(seconds: float) -> tuple[int, float]:
    """How the loop waits for a timer ``seconds`` away: (whole ms for libzmq, floored; a sub-millisecond
    wait done precisely). A longer wait ends a fraction of a ms early and the next turn waits the rest:
    rounding up, as before, made every host timer (linger.ms, backoffs, a toppar's 0.5 ms wake-up) fire up
    to a millisecond late."""
    if seconds <= 0:
        return 0, 0.0
    whole_ms = int(seconds * 1000)
    return whole_ms, (seconds if whole_ms == 0 else 0.0)


_SELECT_FD_LIMIT = 1024  # select()'s FD_SETSIZE


def _poll_within(poll_items: list, seconds: float) -> list:
    """zmq_poll for less than a millisecond, which it cannot wait (it counts whole ms): select() on the
    inbox's notification fd (ZMQ_FD) and the actors' fds, then a non-blocking zmq_poll to read the result.
    Only right after a zmq_poll that found nothing: that read ZMQ_EVENTS, so ZMQ_FD becomes readable on any
    change since. An fd beyond select()'s range falls back to a whole millisecond."""
    inbox_socket = poll_items[0][0]
    readable = [inbox_socket.getsockopt(zmq.FD)]
    writable = []
    pollin, pollout = int(zmq.POLLIN), int(zmq.POLLOUT)
    for fd, flags in poll_items[1:]:
        if fd >= _SELECT_FD_LIMIT:
            return zmq.zmq_poll(poll_items, 1)
        if flags & pollin:
            readable.append(fd)
        if flags & pollout:
            writable.append(fd)
    select.select(readable, writable, (), seconds)
    return zmq.zmq_poll(poll_items, 0)


def serve_forever(key: str, run_dir: str, parent_pid: int, restarted: bool = False) -> int:
    context = new_context()
    inbox = ZmqInbox(context, run_dir, key)
    outbox = ZmqOutbox(context, run_dir)
    core = HostCore(key, outbox.send, restarted=restarted)
    inbox_socket = inbox.socket
    pollin, pollout = int(zmq.POLLIN), int(zmq.POLLOUT)
    poll_items: list[tuple] = [(inbox_socket, pollin)]

    def watch_fd(fd: int, readable: bool, writable: bool) -> None:
        poll_items[:] = [item for item in poll_items if item[0] != fd]
        flags = (pollin if readable else 0) | (pollout if writable else 0)
        if flags:
            poll_items.append((fd, flags))

    core.fd_watcher = watch_fd
    core.forget_endpoint = outbox.reset  # a shared runtime's detached app (FORGET_ENDPOINT)
    core.connect_endpoint = outbox.connect  # and one that attaches (CONNECT_ENDPOINT)
    outbox.send(SUPERVISOR_KEY, [Op(READY, {"host": key, "pid": os.getpid()}, target=SUPERVISOR)])
    clock = time.monotonic
    next_parent_check = clock() + PARENT_CHECK_INTERVAL
    orphaned = False
    check_interval_ms = int(PARENT_CHECK_INTERVAL * 1000)
    deliver = core.deliver
    trim = AllocatorTrim()
    freeze = StartupFreeze()
    try:
        while not core.terminated:
            rest = 0.0  # a wait shorter than a millisecond, done precisely (libzmq counts whole ms)
            if core.has_work():
                timeout_ms = 0
            else:
                due = core.next_deadline()
                if due is not None and due < next_parent_check:
                    timeout_ms, rest = timer_wait(due - clock())
                else:  # a constant keeps RCVTIMEO unchanged; the parent check may come one interval late
                    timeout_ms = check_interval_ms
                if timeout_ms:
                    trim.before_wait()
                    freeze.before_wait(core.spawns)
            if len(poll_items) == 1:  # the inbox alone: one bounded recv, no zmq_poll
                try:
                    if rest and not inbox.wait_readable(rest):
                        batches = []
                    else:
                        batches = inbox.recv_within(timeout_ms)
                except zmq.Again:
                    batches = []
                except Exception:  # noqa: BLE001 - a malformed message is dropped, never fatal
                    log.exception("host %s: undecodable message dropped", key)
                    batches = []
                for batch in batches:
                    deliver(batch)
            else:
                ready = zmq.zmq_poll(poll_items, timeout_ms)
                if not ready and rest:
                    ready = _poll_within(poll_items, rest)
                _poll_all(ready, inbox, core, key)
            core.run()
            if clock() >= next_parent_check:
                next_parent_check = clock() + PARENT_CHECK_INTERVAL
                if os.getppid() != parent_pid:
                    orphaned = True
                    break
    except _ParentGone:
        orphaned = _parent_gone_within(parent_pid, PARENT_GONE_WAIT_S)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # leaving anyway; see the module docstring
        if orphaned:
            _leave_orphaned(run_dir)
        try:
            os.unlink(ipc_path(run_dir, key))
        except OSError:
            pass
        outbox.close()
        inbox.close()
        context.term()
    return 0


def _rss_kib() -> int:
    with open("/proc/self/status") as status:
        return int(status.read().split("VmRSS:")[1].split()[0])


def _object_census(top: int = 25) -> str:
    """The live objects the cyclic GC tracks, by type (those made since the start-up freeze: frozen ones are
    in no generation ``gc.get_objects`` walks), and the buffers that memoryviews keep alive, by the
    type of their owner: a received zmq frame stays allocated (in the I/O thread's malloc arena) as long as
    any slice of it does, which no Python-level statistic shows."""
    counts: Counter[str] = Counter()
    owners: dict[int, tuple[str, int]] = {}  # id(owner) -> (its type, its bytes): each owner counted once
    for obj in gc.get_objects():
        counts[type(obj).__qualname__] += 1
        if isinstance(obj, memoryview):
            try:
                owners[id(obj.obj)] = (type(obj.obj).__qualname__, memoryview(obj.obj).nbytes)
            except ValueError:  # a released view holds nothing
                pass
    held: Counter[str] = Counter()
    views: Counter[str] = Counter()
    for name, size in owners.values():
        views[name] += 1
        held[name] += size
    lines = ["\nobjects tracked by the GC, by type:"]
    lines += [f"{count:10d} {name}" for name, count in counts.most_common(top)]
    lines.append("buffers behind live memoryviews, by owner type (count, bytes):")
    lines += [f"{views[name]:10d} {held[name]:14d} {name}" for name in sorted(views)]
    return "\n".join(lines) + "\n"


def _report_memory_on_request(key: str) -> None:
    """Memory diagnosis of a long-running host, at each SIGUSR2, into files <dir>/<key>-<pid>-<n>.*:

    - KQACTORS_TRACEMALLOC=<dir>: trace every Python allocation from the start; ``.snap`` is a tracemalloc
      snapshot (compare two with ``Snapshot.compare_to``: what grows, and where it was allocated).
    - KQACTORS_MALLOC_REPORT=<dir>: no tracing; ``.malloc`` holds the Python allocator's arena statistics
      (``sys._debugmallocstats``), glibc's (``malloc_stats``), the RSS before and after ``malloc_trim(0)``
      and a census of live objects (``_object_census``): memory held by the allocators beyond the live blocks
      is fragmentation or retention, not a leak.

    Off by default (tracing costs memory and time on every allocation)."""
    traced = os.environ.get("KQACTORS_TRACEMALLOC")
    reported = os.environ.get("KQACTORS_MALLOC_REPORT")
    if not traced and not reported:
        return
    if traced:
        import tracemalloc

        tracemalloc.start(int(os.environ.get("KQACTORS_TRACEMALLOC_FRAMES", "8")))
    taken = 0

    def dump(signum: int, frame: object) -> None:
        nonlocal taken
        taken += 1
        if traced:
            tracemalloc.take_snapshot().dump(os.path.join(traced, f"{key}-{os.getpid()}-{taken}.snap"))
        if not reported:
            return
        libc = ctypes.CDLL(None)
        saved = os.dup(2)  # both statistics go to the C stderr
        try:
            with open(os.path.join(reported, f"{key}-{os.getpid()}-{taken}.malloc"), "wb") as out:
                os.dup2(out.fileno(), 2)
                before = _rss_kib()
                sys._debugmallocstats()
                libc.malloc_stats()
                libc.malloc_trim(0)
                os.write(2, f"\nrss_kib before malloc_trim {before} after {_rss_kib()}\n".encode())
                os.write(2, _object_census().encode())
        finally:
            os.dup2(saved, 2)
            os.close(saved)

    signal.signal(signal.SIGUSR2, dump)


class HostArgs:
    """A host's command line (process_control.py writes it)."""

    def __init__(self, key: str, run_dir: str, parent_pid: int, log_level: str = "WARNING",
                 restarted: bool = False) -> None:
        self.key = key
        self.run_dir = run_dir
        self.parent_pid = parent_pid
        self.log_level = log_level
        self.restarted = restarted


_VALUE_OPTIONS = {"--key": "key", "--run-dir": "run_dir", "--parent-pid": "parent_pid", "--log-level": "log_level"}


def parse_args(argv: list[str]) -> HostArgs:
    """The supervisor's own command line is read directly; anything else (``--help``, a missing or unknown
    option, a bad number) goes to argparse, which explains or refuses it. argparse and gettext are ~2.5 ms and
    0.3 MB of every host's start, for a command line a program writes."""
    values: dict[str, str] = {}
    restarted = False
    rest = list(argv)
    while rest:
        option = rest.pop(0)
        if option == "--restarted" and not restarted:
            restarted = True
        elif option in _VALUE_OPTIONS and rest and _VALUE_OPTIONS[option] not in values:
            values[_VALUE_OPTIONS[option]] = rest.pop(0)
        else:
            return _parse_with_argparse(argv)
    pid = values.get("parent_pid", "")
    if "key" not in values or "run_dir" not in values or not pid.isdigit() or pid != str(int(pid)):
        return _parse_with_argparse(argv)
    return HostArgs(values["key"], values["run_dir"], int(pid), values.get("log_level", "WARNING"), restarted)


def _parse_with_argparse(argv: list[str]) -> HostArgs:
    import argparse

    parser = argparse.ArgumentParser(description="kqactors actor host (started by the runtime supervisor)")
    parser.add_argument("--key", required=True)
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--parent-pid", type=int, required=True)
    parser.add_argument("--log-level", default="WARNING")
    parser.add_argument("--restarted", action="store_true", help="this key's host ran before and died")
    args = parser.parse_args(argv)
    return HostArgs(args.key, args.run_dir, args.parent_pid, args.log_level, args.restarted)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=args.log_level, format=f"%(asctime)s host {args.key} %(name)s: %(message)s")
    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the app, which closes us in order
    _die_with_parent(args.parent_pid)
    _report_memory_on_request(args.key)
    _watch_lifeline(args.run_dir, args.parent_pid)
    return serve_forever(args.key, args.run_dir, args.parent_pid, args.restarted)


if __name__ == "__main__":
    sys.exit(main())
