"""Start-up without waiting: Runtime(wait_ready=False) returns once the hosts are launched, spawn(wait=False)
without the host's answer; what the app sends meanwhile waits for the hosts and for the actor's SPAWN."""

from __future__ import annotations

import time

from kqactors.runtime import Op, Runtime
from kqactors.runtime.host import HostCore
from kqactors.runtime.op import APP


def test_an_op_from_the_app_waits_for_its_actors_spawn() -> None:
    """The app's first ops may overtake the SPAWN (another socket): held, then served once it is spawned; so
    are an actor's on another host (the supervisor published the name to it before sending the SPAWN)."""
    core = HostCore("h0", lambda key, ops: None)
    core.deliver([Op("ECHO", {"x": 1}, target="echo", sender=APP)])
    core.deliver([Op("ECHO", {"x": 2}, target="other", sender="main")])
    assert [op.payload for _due, op in core._unpublished["echo"]] == [{"x": 1}]  # noqa: SLF001
    assert [op.payload for _due, op in core._unpublished["other"]] == [{"x": 2}]  # noqa: SLF001
    core.spawn("echo", "support.sample_actors:EchoActor", {}, "app")
    assert "echo" not in core._unpublished  # noqa: SLF001
    assert core.has_work()  # the held op is in echo's mailbox
    core.run()


def test_runtime_without_waiting_serves_requests_once_the_hosts_run() -> None:
    started = time.monotonic()
    rt = Runtime(hosts=2, wait_ready=False)
    try:
        rt.spawn("echo", "support.sample_actors:EchoActor", {}, host=1, wait=False)
        launched = time.monotonic() - started
        reply = rt.request("echo", Op("ECHO", {"x": 1}), timeout=30)
        assert reply.payload == {"x": 1}
    finally:
        rt.close()
    # Launching is a fork/exec per host; a host's interpreter and imports take far longer than this.
    assert launched < 1.0
