"""Runs in: pytest. Runtime failures: kill -9 of a host mid-stream (restart, CHILD_EXITED, pending requests
answered with an error), kill -9 of the app (hosts gone within 5 s, run dir removed), and close() /
interpreter exit leaving no process, socket or ipc file behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest
from support.waiting import wait_until

from kqactors.runtime import CHILD_EXITED, ActorError, ErrorCode, Op, Runtime

pytestmark = pytest.mark.fault
ACTORS = "support.sample_actors"


def wait_event(rt: Runtime, predicate, timeout: float = 15.0) -> Op:
    found: list[Op] = []
    deadline = time.monotonic() + timeout
    while not found and time.monotonic() < deadline:
        rt.poll(0.2, lambda op: found.append(op) if predicate(op) else None)
    assert found, "event not received"
    return found[0]


@pytest.mark.parametrize("transport", ["inproc", "zmq"])
def test_host_killed_mid_stream_is_restarted(transport: str) -> None:
    with Runtime(hosts=2, transport=transport, restart_delay=0.1) as rt:
        rt.spawn("sink", f"{ACTORS}:SinkActor", host=1)
        rt.spawn("echo", f"{ACTORS}:EchoActor", host=1)
        rt.spawn("relay", f"{ACTORS}:RelayActor", host=0)
        rt.spawn("parent", f"{ACTORS}:RecorderActor", host=0)
        rt.spawn("child", f"{ACTORS}:EchoActor", host=1, parent="parent")
        rt.spawn("spawner", f"{ACTORS}:SpawnerActor", host=1)
        kid = rt.request("spawner", Op("SPAWN_CHILD", {"name": "spawner/kid", "factory": f"{ACTORS}:EchoActor"}),
                         10).payload
        assert kid == {"host": "h1"}
        old_pid = rt.request("echo", Op("WHO"), 10).payload["pid"]
        for _ in range(20):
            rt.send("sink", Op("DATA", 100, [b"m" * 100 * 100]))
        pending = rt.new_queue()
        rt.request_async("echo", Op("IGNORE"), pending, timeout=60)  # never answered by the actor
        relayed = rt.new_queue()
        rt.request_async("relay", Op("RELAY", {"to": "echo", "type": "IGNORE", "timeout": 60}), relayed, 60)
        rt.sleep(0.2)
        started = time.monotonic()
        rt.kill_host("h1")
        # the app's pending request and the actor-side one both get DEAD_ACTOR, long before their timeouts
        reply = pending.poll(15)
        assert reply is not None and reply.error.code == ErrorCode.DEAD_ACTOR
        relayed_reply = relayed.poll(15)
        assert relayed_reply is not None and relayed_reply.payload["error"] == ErrorCode.DEAD_ACTOR
        exited = wait_event(rt, lambda op: op.type == CHILD_EXITED and op.payload["name"] == "echo")
        assert exited.payload["restarted"] and exited.payload["host"] == "h1"
        assert time.monotonic() - started < 15
        assert rt.host_restarts("h1") == 1
        # the restarted actors work again, with fresh state, in a new process (zmq)
        who = rt.request("echo", Op("WHO"), 10).payload
        assert who["host"] == "h1"
        if transport == "zmq":
            assert who["pid"] != old_pid and rt.host_pid("h1") == who["pid"]
        assert rt.request("sink", Op("COUNT"), 10).payload["messages"] == 0
        # children spawned by an actor share their host's fate: gone, for the restarted parent to rebuild
        assert rt.host_of("spawner/kid") is None
        with pytest.raises(ActorError) as info:
            rt.request("spawner/kid", Op("ECHO"), 5)
        assert info.value.code == ErrorCode.UNKNOWN_ACTOR
        assert rt.request("spawner", Op("SPAWN_CHILD", {"name": "spawner/kid", "factory": f"{ACTORS}:EchoActor"}),
                          10).payload == {"host": "h1"}
        # a parent that is an actor gets CHILD_EXITED too
        deadline = time.monotonic() + 10
        log: list = []
        while not any(e[0] == CHILD_EXITED for e in log) and time.monotonic() < deadline:
            log += rt.request("parent", Op("LOG"), 10).payload
            rt.sleep(0.05)
        assert [e[1]["name"] for e in log if e[0] == CHILD_EXITED] == ["child"]
        # the surviving host was untouched
        assert rt.request("relay", Op("RELAY", {"to": "echo", "type": "ECHO", "payload": 1}), 10).payload[
            "payload"] == 1


def test_send_to_a_restarting_host_fails_fast() -> None:
    with Runtime(hosts=1, restart_delay=1.0) as rt:
        rt.spawn("echo", f"{ACTORS}:EchoActor")
        rt.kill_host("h0")
        # The supervisor counts a restart when it marks the host down (the restart itself is a second away).
        wait_until(lambda: rt.host_restarts("h0") >= 1, 5, "the supervisor to see host h0 die")
        with pytest.raises(ActorError) as info:
            rt.request("echo", Op("ECHO"), 5)
        assert info.value.code == ErrorCode.DEAD_ACTOR
        wait_event(rt, lambda op: op.type == CHILD_EXITED)
        assert rt.request("echo", Op("ECHO", 2), 10).payload == 2


def test_a_stray_sigterm_to_a_host_leaves_the_run_dir_alone() -> None:
    """Only a host whose app is gone removes the run dir. A SIGTERM from someone else (twice here: the
    second must not kill the host halfway) ends just that host, which is restarted."""
    with Runtime(hosts=1, restart_delay=0.1) as rt:
        rt.spawn("echo", f"{ACTORS}:EchoActor")
        pid = rt.host_pid("h0")
        os.kill(pid, signal.SIGTERM)
        time.sleep(0.05)
        os.kill(pid, signal.SIGTERM)
        exited = wait_event(rt, lambda op: op.type == CHILD_EXITED and op.payload["name"] == "echo")
        assert exited.payload["restarted"] and exited.payload["exitcode"] == 0
        assert os.path.isdir(rt.run_dir) and "app.sock" in os.listdir(rt.run_dir)
        assert rt.request("echo", Op("ECHO", 1), 10).payload == 1


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def test_close_leaves_nothing_behind() -> None:
    before = _children()
    rt = Runtime(hosts=2)
    rt.spawn("echo", f"{ACTORS}:EchoActor")
    assert rt.request("echo", Op("ECHO", 1), 10).payload == 1
    pids = {rt.host_pid(k) for k in rt.host_keys}
    run_dir = rt.run_dir
    assert run_dir and os.path.isdir(run_dir) and (os.stat(run_dir).st_mode & 0o777) == 0o700
    assert any(name.endswith(".sock") for name in os.listdir(run_dir))
    queue = rt.new_queue()
    rt.request_async("echo", Op("IGNORE"), queue, timeout=60)
    rt.close()
    assert not os.path.exists(run_dir)
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                   for pid in pids)
    assert _children() <= before
    assert queue._heap and queue.pop().error.code == ErrorCode.TERMINATED  # pending requests answered
    with pytest.raises(ActorError) as info:
        rt.send("echo", Op("ECHO"))
    assert info.value.code == ErrorCode.CLOSED
    rt.close()  # idempotent


SCRIPT = textwrap.dedent("""
    import sys, time
    from kqactors.runtime import Runtime, Op
    rt = Runtime(hosts=2)
    rt.spawn("echo", "support.sample_actors:EchoActor")
    rt.request("echo", Op("ECHO"), 10)
    if sys.argv[1] == "wedge":  # both hosts stuck, deaf to SIGTERM: only the stdin lifeline can tell them
        rt.spawn("echo1", "support.sample_actors:EchoActor", host=1)
        rt.send("echo", Op("WEDGE", 60))
        rt.send("echo1", Op("WEDGE", 60))
        time.sleep(0.5)
    if sys.argv[1] == "threads":  # the death signal comes again as each of the app's threads dies
        import threading
        for _ in range(50):
            threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
    print(rt.run_dir, *[rt.host_pid(k) for k in rt.host_keys], flush=True)
    if sys.argv[1] != "exit":
        time.sleep(60)
""")


def _run_app(mode: str) -> tuple[subprocess.Popen, str, list[int]]:
    app = subprocess.Popen([sys.executable, "-c", SCRIPT, mode], stdout=subprocess.PIPE, text=True)
    line = app.stdout.readline().split()
    assert line, "app script failed to start"
    return app, line[0], [int(p) for p in line[1:]]


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _run_dir_entries(run_dir: str) -> list[str] | None:
    """The run dir's entries, or None once it is gone (a host may remove it while we look)."""
    try:
        return os.listdir(run_dir)
    except FileNotFoundError:
        return None


def _leftovers(pids: list[int], run_dir: str, within: float) -> str:
    """What outlived the app after ``within`` seconds ('' when nothing did)."""
    deadline = time.monotonic() + within
    while True:
        alive = [p for p in pids if _alive(p)]
        left = _run_dir_entries(run_dir)
        if not alive and left is None:
            return ""
        if time.monotonic() >= deadline:
            return f"live hosts {alive}, run dir entries {left}"
        time.sleep(0.05)


@pytest.mark.parametrize("mode", ["hang", "threads"])
def test_kill_9_of_the_app_leaves_no_orphans(mode: str) -> None:
    app, run_dir, pids = _run_app(mode)
    assert pids and all(psutil.pid_exists(p) for p in pids)
    os.kill(app.pid, signal.SIGKILL)
    app.wait(5)
    assert _leftovers(pids, run_dir, within=5.0) == ""


def test_kill_9_of_the_app_frees_hosts_stuck_in_an_actor() -> None:
    app, run_dir, pids = _run_app("wedge")
    os.kill(app.pid, signal.SIGKILL)
    app.wait(5)
    assert _leftovers(pids, run_dir, within=5.0) == ""


def test_interpreter_exit_without_close_cleans_up() -> None:
    app, run_dir, pids = _run_app("exit")
    assert app.wait(20) == 0
    assert _leftovers(pids, run_dir, within=5.0) == ""


def test_close_from_another_thread_wakes_a_blocked_request() -> None:
    import threading

    rt = Runtime(hosts=1)
    rt.spawn("echo", f"{ACTORS}:EchoActor")
    outcome: list[str] = []

    def blocked() -> None:
        try:
            rt.request("echo", Op("IGNORE"), timeout=30)
        except ActorError as exc:
            outcome.append(exc.code)

    thread = threading.Thread(target=blocked)
    thread.start()
    time.sleep(0.3)
    started = time.monotonic()
    rt.close()
    thread.join(10)
    assert not thread.is_alive() and outcome == [ErrorCode.TERMINATED]
    assert time.monotonic() - started < 5


def test_threads_share_one_runtime() -> None:
    import threading

    with Runtime(hosts=2) as rt:
        rt.spawn("a", f"{ACTORS}:EchoActor", host=0)
        rt.spawn("b", f"{ACTORS}:EchoActor", host=1)
        errors: list[BaseException] = []

        def worker(index: int) -> None:
            try:
                for i in range(100):
                    name = "a" if (i + index) % 2 else "b"
                    assert rt.request(name, Op("ECHO", [index, i]), 10).payload == [index, i]
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors


def test_a_dropped_runtime_closes_itself() -> None:
    import gc

    rt = Runtime(hosts=1)
    rt.spawn("echo", f"{ACTORS}:EchoActor")
    rt.request("echo", Op("ECHO"), 10)
    pid, run_dir = rt.host_pid("h0"), rt.run_dir
    del rt
    gc.collect()
    assert _leftovers([pid], run_dir, within=5.0) == ""
