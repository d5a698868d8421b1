"""Helpers of the shared-runtime tests: start and stop ``kqactors runtime --dir`` as a process, ask its state."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from kqactors.runtime.shared import runtime_status

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def start_runtime(directory: str, hosts: int = 1, *options: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "kqactors.cli.main", "runtime", "--dir", directory,
                             "--hosts", str(hosts), *options], env=env)
    deadline = time.monotonic() + 30
    while not os.path.exists(os.path.join(directory, "runtime.json")):
        assert proc.poll() is None, "the runtime exited at start"
        assert time.monotonic() < deadline, "the runtime did not start"
        time.sleep(0.05)
    return proc


def stop_runtime(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def groups(directory: str) -> dict:
    """The runtime's shared groups: namespace → {"members", "actors", "retired"}."""
    return runtime_status(directory)["groups"]
