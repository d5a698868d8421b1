"""Runs in: pytest. Hosts started while a runtime runs (placement that follows the load): the new host
serves spawns and ops sent before it was up, its actors talk to the old hosts' by name both ways, and its
death is restarted like any other's."""

from __future__ import annotations

import os

import pytest
from support.waiting import wait_until

from kqactors.runtime import Op, Runtime

from .conftest import ACTORS


@pytest.mark.parametrize("transport", ["inproc", "zmq"])
def test_a_host_added_later_runs_actors_that_reach_the_old_hosts(transport: str) -> None:
    with Runtime(hosts=1, transport=transport, restart_delay=0.05, wait_ready=False) as rt:
        rt.spawn("old/echo", f"{ACTORS}:EchoActor", {}, host=0, wait=False)
        keys = rt.add_hosts(1)  # not waited for: what follows waits in the new host's socket
        assert keys == ["h1"] and rt.host_keys == ["h0", "h1"]
        rt.spawn("new/relay", f"{ACTORS}:RelayActor", {}, host="h1", wait=False)
        answer = rt.request("new/relay", Op("RELAY", {"to": "old/echo", "type": "ECHO", "payload": [1]}), 30)
        assert answer.payload == {"payload": [1], "from": "old/echo", "error": None}
        rt.spawn("old/relay", f"{ACTORS}:RelayActor", {}, host=0)
        rt.spawn("new/echo", f"{ACTORS}:EchoActor", {}, host=1)
        answer = rt.request("old/relay", Op("RELAY", {"to": "new/echo", "type": "ECHO", "payload": [2]}), 30)
        assert answer.payload == {"payload": [2], "from": "new/echo", "error": None}
        assert rt.add_hosts(2) == ["h2", "h3"]
        with pytest.raises(ValueError):
            rt.add_hosts(0)
        if transport == "zmq":
            rt.kill_host("h1")
            wait_until(lambda: rt.host_restarts("h1") >= 1, 30, "h1 to be restarted")
            reply = wait_until(lambda: _echo(rt, "new/echo"), 30, "new/echo to answer after the restart")
            assert reply == {"x": 3}


def _echo(rt: Runtime, name: str) -> dict | None:
    try:
        return rt.request(name, Op("ECHO", {"x": 3}), timeout=2).payload
    except Exception:  # noqa: BLE001 - restarting: try again
        return None


def test_host_ready_after_close_answers_from_what_it_knew() -> None:
    """A producer's flusher may ask while the app is exiting: a closed runtime's sockets are not read again."""
    rt = Runtime(hosts=1, transport="zmq", wait_ready=False)
    (key,) = rt.add_hosts(1)
    wait_until(lambda: rt.host_ready(key), 30, "the added host to report READY")
    (late,) = rt.add_hosts(1)
    rt.close()
    assert rt.host_ready(key) is True
    assert rt.host_ready(late) in (True, False)  # no ZMQError from the closed inbox


def test_a_retired_host_exits_for_good_and_the_others_go_on() -> None:
    """retire_host: the process exits (its memory is freed) and is not restarted; actors left on it are stopped;
    the other hosts still reach each other; a later host gets a new key."""
    with Runtime(hosts=1, transport="zmq", restart_delay=0.05, wait_ready=False) as rt:
        rt.spawn("old/echo", f"{ACTORS}:EchoActor", {}, host=0)
        (key,) = rt.add_hosts(1)
        rt.spawn("left/echo", f"{ACTORS}:EchoActor", {}, host=key)
        assert rt.request("left/echo", Op("ECHO", {"x": 1}), 30).payload == {"x": 1}
        pid = rt.host_pid(key)
        assert pid is not None
        assert rt.retire_host(key) == ["left/echo"]
        wait_until(lambda: not os.path.exists(f"/proc/{pid}"), 30, f"host {key} (pid {pid}) to exit")
        # the supervisor's watcher thread forgets the pid once it has reaped the exit: a moment after /proc says so
        wait_until(lambda: rt.host_pid(key) is None, 30, f"the supervisor to forget host {key}")
        assert rt.host_restarts(key) == 0
        assert rt.host_of("left/echo") is None
        with pytest.raises(ValueError):
            rt.spawn("again/echo", f"{ACTORS}:EchoActor", {}, host=key)
        with pytest.raises(ValueError):
            rt.retire_host("h0")
        (later,) = rt.add_hosts(1)
        assert later == "h2" and rt.host_keys == ["h0", "h1", "h2"]
        rt.spawn("new/relay", f"{ACTORS}:RelayActor", {}, host=later)
        answer = rt.request("new/relay", Op("RELAY", {"to": "old/echo", "type": "ECHO", "payload": [5]}), 30)
        assert answer.payload == {"payload": [5], "from": "old/echo", "error": None}
        assert rt.host_restarts(key) == 0
