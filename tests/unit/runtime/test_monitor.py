"""Runtime.monitor(): the app's notification that actors went down with their host (ACTORS_DOWN)."""

from __future__ import annotations

import gc
import time

import pytest

from kqactors.runtime import Runtime
from kqactors.runtime.op import ACTORS_DOWN

ECHO = "support.sample_actors:EchoActor"


def test_monitor_gets_actors_down_before_the_restart_on_inproc() -> None:
    with Runtime(hosts=2, transport="inproc", restart_delay=0.2) as rt:
        monitor = rt.monitor()
        down_when_notified: list[bool] = []
        monitor.on_enqueue = lambda _q: down_when_notified.append("h1" in rt._plumbing.supervisor.down_hosts)
        rt.spawn("echo", ECHO, host=1)
        rt.spawn("other", ECHO, host=0)
        rt.kill_host("h1")
        deadline = time.monotonic() + 5
        while not len(monitor) and time.monotonic() < deadline:
            rt.sleep(0.02)
        op = monitor.pop()
        assert op is not None and op.type == ACTORS_DOWN
        assert op.payload["host"] == "h1" and op.payload["names"] == ["echo"] and op.payload["restarts"] == 1
        assert down_when_notified == [True]
        assert monitor.pop() is None


def test_a_dropped_monitor_queue_is_forgotten() -> None:
    with Runtime(hosts=1, transport="inproc", restart_delay=0.05) as rt:
        rt.monitor()  # nobody holds it
        gc.collect()
        assert len(rt._plumbing.monitors) == 0
        with pytest.raises(TypeError):
            rt.monitor(object())  # type: ignore[arg-type]
