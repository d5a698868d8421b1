"""Runs in: pytest. The parametrised runtime fixture: every semantic test runs on the in-process transport
(deterministic, hosts driven by the test's own thread) and on ZeroMQ with real host processes."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from kqactors.runtime import Runtime

ACTORS = "support.sample_actors"
_names = itertools.count()


@pytest.fixture(scope="package", params=["inproc", "zmq"])
def rt(request: pytest.FixtureRequest) -> Iterator[Runtime]:
    """One 2-host runtime per transport, shared by the semantic tests (they use unique actor names)."""
    with Runtime(hosts=2, transport=request.param, restart_delay=0.05) as runtime:
        yield runtime


def unique(prefix: str) -> str:
    return f"{prefix}/{next(_names)}"


def spawn(rt: Runtime, kind: str, host: int | None = None, **args) -> str:
    """Spawn a sample actor (``EchoActor``, ``RecorderActor``...) under a fresh name; returns the name."""
    name = unique(kind.lower())
    rt.spawn(name, f"{ACTORS}:{kind}", args, host=host)
    return name
