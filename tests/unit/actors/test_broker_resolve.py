"""A broker actor resolves host names off the host loop: a slow getaddrinfo for one broker must not stall the
other actors of the host (here another broker connection), and its answer still comes back to the actor.

Runs the actors on the in-process runtime with a local listening socket standing in for a broker (the TCP
connect completes, so a connection reaches APIVERSION_QUERY without a Kafka broker).
"""

from __future__ import annotations

import socket
import threading
import time

import pytest

from kqactors.actors.broker import transport
from kqactors.ops import client as ops
from kqactors.runtime.op import Op
from kqactors.runtime.runtime import Runtime

BROKER = "kqactors.actors.broker.actor:BrokerActor"
SLOW_S = 1.5


@pytest.fixture
def listener():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    yield sock.getsockname()[1]
    sock.close()


def test_a_slow_resolver_does_not_stall_other_connections(monkeypatch, listener):
    looked_up: list[str] = []
    released = threading.Event()

    def slow_lookup(host: str, port: int):
        looked_up.append(host)
        released.wait(SLOW_S)
        return [(socket.AF_INET, socket.SOCK_STREAM, 0, ("127.0.0.1", port))]

    monkeypatch.setattr(transport, "getaddrinfo", slow_lookup)
    states: dict[str, list[tuple[float, str]]] = {"broker/1": [], "broker/2": []}

    def record(op: Op) -> None:
        if op.type == ops.BROKER_STATE:
            states[op.payload["name"]].append((time.monotonic(), op.payload["state"]))

    with Runtime(transport="inproc") as rt:
        start = time.monotonic()
        rt.spawn("broker/1", BROKER, {"node_id": 1, "host": "slow.invalid", "port": listener, "owner": "app"})
        rt.spawn("broker/2", BROKER, {"node_id": 2, "host": "127.0.0.1", "port": listener, "owner": "app"})
        deadline = start + 10
        while time.monotonic() < deadline and not any(s == "APIVERSION_QUERY" for _, s in states["broker/2"]):
            rt.poll(0.02, record)
        fast_at = next(t for t, s in states["broker/2"] if s == "APIVERSION_QUERY")
        assert fast_at - start < SLOW_S / 2, "the numeric broker connected while the other one was resolving"
        assert [s for _, s in states["broker/1"]] == ["CONNECT"], "broker/1 is still waiting for its lookup"
        assert looked_up == ["slow.invalid"], "a numeric address needs no lookup"
        # the host loop answers requests meanwhile
        reply = rt.request("broker/2", Op(ops.STATS), timeout=2)
        assert reply.payload and time.monotonic() - start < SLOW_S
        released.set()
        while time.monotonic() < deadline and not any(s == "APIVERSION_QUERY" for _, s in states["broker/1"]):
            rt.poll(0.02, record)
        assert any(s == "APIVERSION_QUERY" for _, s in states["broker/1"]), "the lookup's answer came back"


def test_a_failed_lookup_is_a_resolve_error_and_retried(monkeypatch):
    def failing_lookup(host: str, port: int):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(transport, "getaddrinfo", failing_lookup)
    with Runtime(transport="inproc") as rt:
        rt.spawn("broker/1", BROKER, {"node_id": 1, "host": "nowhere.invalid", "port": 9092, "owner": "app",
                                      "config": {"reconnect.backoff.ms": 10}})
        downs: list[dict] = []
        deadline = time.monotonic() + 10
        while len(downs) < 2 and time.monotonic() < deadline:
            rt.poll(0.02, lambda op: downs.append(op.payload) if op.type == ops.BROKER_STATE
                    and op.payload["state"] == "DOWN" else None)
        assert len(downs) >= 2 and "resolve nowhere.invalid:9092 failed" in downs[0]["reason"]
