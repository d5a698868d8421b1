"""Runtime.preload: hosts import modules in the background, before any actor needs them. On ZeroMQ only:
in-process hosts share the test's own module table, so there is nothing to observe there."""

from __future__ import annotations

import pytest
from support.waiting import wait_until

from kqactors.runtime import ActorError, ErrorCode, Op, Runtime

from .conftest import ACTORS

UNUSED_MODULES = ["wave", "colorsys"]  # stdlib modules nothing in a host imports by itself


def _loaded(rt: Runtime, echo: str) -> dict[str, bool]:
    return rt.request(echo, Op("LOADED", UNUSED_MODULES), timeout=10).payload


def test_preload_imports_on_the_named_hosts_only() -> None:
    with Runtime(hosts=2) as rt:
        rt.spawn("echo0", f"{ACTORS}:EchoActor", host=0)
        rt.spawn("echo1", f"{ACTORS}:EchoActor", host=1)
        assert _loaded(rt, "echo1") == {"wave": False, "colorsys": False}
        rt.preload(["wave", "colorsys:rgb_to_hsv"], [1])  # a "module:Factory" path names its module
        wait_until(lambda: _loaded(rt, "echo1") == {"wave": True, "colorsys": True}, 10,
                   "host h1 to import the preloaded modules")
        assert _loaded(rt, "echo0") == {"wave": False, "colorsys": False}


def test_a_module_that_fails_to_preload_fails_only_the_spawn_that_needs_it() -> None:
    with Runtime(hosts=1) as rt:
        rt.preload(["kqactors_no_such_module"], ["h0"])
        rt.spawn("echo", f"{ACTORS}:EchoActor", host=0)  # the host lives on
        assert rt.request("echo", Op("ECHO", 1), timeout=10).payload == 1
        with pytest.raises(ActorError) as raised:
            rt.spawn("ghost", "kqactors_no_such_module:Actor", host=0)
        assert raised.value.code == ErrorCode.SPAWN_FAILED
        with pytest.raises(ValueError, match="unknown host"):
            rt.preload(["wave"], ["h7"])
        with pytest.raises(ValueError, match="out of range"):
            rt.preload(["wave"], [3])
