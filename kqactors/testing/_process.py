"""Child-process plumbing shared by the broker fixtures.

Runs in: the test (or CLI) process that launches a broker. Owns the small, boring parts of running a
helper process safely: picking a free loopback port, making the child die with its parent
(``PR_SET_PDEATHSIG``), stopping it by pid (terminate, then kill), and reading the tail of its log.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import psutil

__all__ = [
    "free_loopback_port",
    "die_with_parent_preexec",
    "stop_process",
    "log_tail",
    "make_workdir",
    "sweep_orphan_workdirs",
]

_PR_SET_PDEATHSIG = 1


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the caller must cope with a lost race)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _load_libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name, use_errno=True)
    except OSError:
        return None


def die_with_parent_preexec() -> Callable[[], None] | None:
    """A ``preexec_fn`` asking Linux to SIGKILL the child when the launching thread's process dies.

    Linux ties the signal to the *thread* that forked, so it is only armed when launching from the main
    thread (a worker thread ending must not kill a broker that is still in use). Returns None then, or
    where prctl is unavailable; callers rely on ``stop()`` (and the mock child on its parent-pid watch).
    The parent pid is checked after prctl so a parent that died during fork is not missed.
    """
    if os.uname().sysname != "Linux" or threading.current_thread() is not threading.main_thread():
        return None
    libc = _load_libc()
    if libc is None:
        return None
    parent_pid = os.getpid()

    def _preexec() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent_pid:
            os._exit(1)

    return _preexec


def stop_process(proc: subprocess.Popen, grace_seconds: float = 5.0) -> int | None:
    """Stop ``proc`` by its pid: SIGTERM, wait up to ``grace_seconds``, then SIGKILL. Returns exit code."""
    if proc.poll() is not None:
        return proc.returncode
    try:
        proc.terminate()
        return proc.wait(timeout=grace_seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(timeout=grace_seconds)
    except ProcessLookupError:
        return proc.wait(timeout=grace_seconds)


def log_tail(path: Path | None, max_bytes: int = 4000) -> str:
    """The last ``max_bytes`` of a log file as text, or a note when there is none (for error messages)."""
    if path is None or not path.exists():
        return "(no log)"
    with open(path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        size = handle.tell()
        handle.seek(max(0, size - max_bytes))
        text = handle.read().decode("utf-8", "replace").strip()
    return text or "(log is empty)"


def make_workdir(kind: str) -> Path:
    """A private temp dir named after ``kind`` and our pid, after sweeping ones orphaned by dead pids."""
    sweep_orphan_workdirs(kind)
    return Path(tempfile.mkdtemp(prefix=f"kq-{kind}-{os.getpid()}-"))


def sweep_orphan_workdirs(kind: str) -> list[Path]:
    """Delete ``kq-<kind>-<pid>-*`` temp dirs whose pid is gone (their owner was killed before stop())."""
    pattern = re.compile(rf"kq-{re.escape(kind)}-(\d+)-")
    removed: list[Path] = []
    root = Path(tempfile.gettempdir())
    for candidate in root.glob(f"kq-{kind}-*"):
        match = pattern.match(candidate.name)
        if match and candidate.is_dir() and not psutil.pid_exists(int(match.group(1))):
            shutil.rmtree(candidate, ignore_errors=True)
            removed.append(candidate)
    return removed
