"""Runs in: pytest. Fork behaviour: a runtime created in the parent fails at once in a forked child with
ActorError(FORKED), never hangs; a runtime created in the child works; exiting the child is prompt; the
parent's runtime is unaffected."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from kqactors.runtime import ActorError, ErrorCode, Op, Runtime

pytestmark = [pytest.mark.fault, pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")]
ACTORS = "support.sample_actors"


def _wait_child(pid: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    raise AssertionError("forked child hung")


def _child_checks(rt: Runtime) -> int:
    """Returns 0 when every expectation holds in the child, else a code naming the first failure."""
    started = time.monotonic()
    for call in (lambda: rt.request("echo", Op("ECHO"), 5), lambda: rt.send("echo", Op("ECHO")),
                 lambda: rt.spawn("x", f"{ACTORS}:EchoActor"), lambda: rt.poll(1.0), lambda: rt.new_queue()):
        try:
            call()
            return 10
        except ActorError as exc:
            if exc.code != ErrorCode.FORKED or "forked child" not in exc.message:
                return 11
    if time.monotonic() - started > 1.0:
        return 12
    rt.close()  # a no-op in the child: the parent owns those processes
    with Runtime(hosts=1) as mine:
        mine.spawn("echo", f"{ACTORS}:EchoActor")
        if mine.request("echo", Op("ECHO", "child"), 10).payload != "child":
            return 13
    return 0


def test_forked_child_fails_fast_and_can_make_its_own_runtime() -> None:
    with Runtime(hosts=1) as rt:
        rt.spawn("echo", f"{ACTORS}:EchoActor")
        assert rt.request("echo", Op("ECHO", 1), 10).payload == 1
        pid = os.fork()
        if pid == 0:  # child: never return into pytest
            code = 99
            try:
                code = _child_checks(rt)
            finally:
                os._exit(code)
        assert _wait_child(pid, timeout=60) == 0
        assert rt.request("echo", Op("ECHO", 2), 10).payload == 2  # the parent's runtime still works


SCRIPT = textwrap.dedent("""
    import os, sys
    from kqactors.runtime import Runtime, Op, ActorError
    rt = Runtime(hosts=1)
    rt.spawn("echo", "support.sample_actors:EchoActor")
    pid = os.fork()
    if pid == 0:
        try:
            rt.request("echo", Op("ECHO"), 5)
        except ActorError as exc:
            print("child:", exc.code, flush=True)
        sys.exit(0)  # normal interpreter exit in the child: atexit and GC must not hang on zmq
    _, status = os.waitpid(pid, 0)
    print("parent:", rt.request("echo", Op("ECHO", "ok"), 5).payload, os.waitstatus_to_exitcode(status))
""")


def test_forked_child_exits_normally_without_hanging() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["child: FORKED", "parent: ok 0"]
