"""Runs in: pytest. Name publication order: an actor that talks from on_start (before the other hosts could
have learnt its name) still gets answers sent to it by name, on both transports."""

from __future__ import annotations

import logging
import time

import pytest
from support.clock import FakeClock

from kqactors.runtime import ErrorCode, Op, Runtime
from kqactors.runtime.host import DIRECTORY, UNPUBLISHED_WAIT_S, HostCore
from kqactors.runtime.op import HOST_CONTROL

from .conftest import spawn, unique


def _wait_greeted(rt: Runtime, name: str, within: float) -> str | None:
    deadline = time.monotonic() + within
    while True:
        answered_by = rt.request(name, Op("GREETED"), timeout=5).payload
        if answered_by is not None or time.monotonic() >= deadline:
            return answered_by
        time.sleep(0.01)


@pytest.mark.parametrize("round_", range(3))
def test_answer_to_a_just_spawned_actor_is_not_dropped(rt: Runtime, round_: int,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    peer = spawn(rt, "GreeterActor", host=0)
    newcomer = unique("greeter")
    with caplog.at_level(logging.WARNING):
        rt.spawn(newcomer, "support.sample_actors:GreeterActor", {"peer": peer}, host=1)
        # Well under the hosts' wait for an unpublished name: the answer must not need a retry.
        assert _wait_greeted(rt, newcomer, within=1.0) == peer
    assert not [r for r in caplog.records if "dropped" in r.getMessage()]


def test_host_holds_plain_ops_until_the_name_is_published_and_drops_them_after_the_wait() -> None:
    clock = FakeClock()
    sent: list[tuple[str, str]] = []
    core = HostCore("h0", lambda key, ops: sent.extend((key, op.type) for op in ops), clock=clock)
    core.post(Op("EARLY", target="late/actor"))
    core.post(Op("LOST", target="never/published"))
    core.flush()
    assert sent == []
    core.deliver([Op(DIRECTORY, {"set": {"late/actor": "h1"}}, target=HOST_CONTROL)])
    core.flush()
    assert sent == [("h1", "EARLY")]
    clock.advance(UNPUBLISHED_WAIT_S + 0.01)
    core.run()
    core.deliver([Op(DIRECTORY, {"set": {"never/published": "h1"}}, target=HOST_CONTROL)])
    core.flush()
    assert sent == [("h1", "EARLY")]  # dropped at the end of the wait, not delivered late


def test_requests_to_unknown_names_still_fail_at_once() -> None:
    core = HostCore("h0", lambda key, ops: None)
    replies: list[Op] = []
    core.spawn("asker", "support.sample_actors:EchoActor", {}, "app")
    core.request("asker", "no/such", Op("ECHO"), replies.append, timeout=5)
    core.run()
    assert replies and replies[0].error is not None and replies[0].error.code == ErrorCode.UNKNOWN_ACTOR


def test_ops_to_an_actor_stopped_here_are_dropped_quietly(caplog: pytest.LogCaptureFixture) -> None:
    """A client closing stops actors while ops to them are still on their way (a toppar's last
    B_FETCH_STOP to its broker actor): those are dropped without a warning; a request still gets its error
    reply, and an op to a name that never ran here still warns (once the wait for its SPAWN is over)."""
    clock = FakeClock()
    core = HostCore("h0", lambda key, ops: None, clock=clock)
    core.spawn("broker/1", "support.sample_actors:EchoActor", {}, "app")
    core.stop_actor("broker/1")
    replies: list[Op] = []
    core.spawn("asker", "support.sample_actors:EchoActor", {}, "app")
    with caplog.at_level(logging.WARNING, logger="kqactors.runtime.host"):
        core.deliver([Op("B_FETCH_STOP", target="broker/1", sender="ctoppar/t/0")])
        core.request("asker", "broker/1", Op("ECHO"), replies.append, timeout=5)
        core.run()
        assert not [r for r in caplog.records if "dropped" in r.getMessage()]
        core.deliver([Op("B_FETCH_STOP", target="broker/2", sender="ctoppar/t/0")])
        core.run()
        assert not [r for r in caplog.records if "dropped" in r.getMessage()]
        clock.advance(UNPUBLISHED_WAIT_S + 0.01)
        core.run()
    assert [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()] == [
        "host h0: op B_FETCH_STOP to broker/2 dropped: no actor named 'broker/2'"]
    assert replies and replies[0].error is not None
    core.spawn("broker/1", "support.sample_actors:EchoActor", {}, "app")  # runs again: routed to it
    assert "broker/1" in core.actors


def test_continue_later_comes_after_this_turns_output_is_sent() -> None:
    """A job done in steps: each step's output leaves (one transmit per turn) before the next step runs,
    where an op sent to oneself would be served in the same turn and everything would leave at once."""
    batches: list[list[object]] = []
    core = HostCore("h0", lambda key, ops: batches.append([op.payload for op in ops]))
    core.deliver([Op(DIRECTORY, {"set": {"far/away": "h1"}}, target=HOST_CONTROL)])
    core.spawn("stepper", "support.sample_actors:StepperActor", {}, "app")
    core.deliver([Op("STEPS", {"to": "far/away", "count": 3}, target="stepper")])
    turns = 0
    while core.has_work() and turns < 10:
        core.run()
        turns += 1
    assert batches == [[0], [1], [2]]
    assert not core.has_work()


def test_ops_from_another_host_to_an_actor_whose_spawn_has_not_arrived_are_held() -> None:
    """The supervisor publishes a name before its SPAWN reaches the host, on another socket: an actor on a third
    host may address it first (a toppar joining ``main`` while main's host still starts). Its host holds the
    ops and serves them in order once the actor exists; they are dropped only after the wait."""
    clock = FakeClock()
    core = HostCore("h0", lambda key, ops: None, clock=clock)
    core.deliver([Op("REMEMBER", {"n": 1}, target="late", sender="toppar/t/0"),
                  Op("REMEMBER", {"n": 2}, target="late", sender="toppar/t/1")])
    core.run()
    core.spawn("late", "support.sample_actors:RecorderActor", {}, "app")
    core.run()
    assert core.actors["late"].actor.log == [["REMEMBER", {"n": 1}, 0, None], ["REMEMBER", {"n": 2}, 0, None]]
    core.deliver([Op("REMEMBER", {"n": 3}, target="never", sender="toppar/t/0")])
    core.run()
    clock.advance(UNPUBLISHED_WAIT_S + 0.01)
    core.run()
    core.spawn("never", "support.sample_actors:RecorderActor", {}, "app")
    core.run()
    assert core.actors["never"].actor.log == []  # dropped at the end of the wait, not delivered late


def test_a_restarted_host_does_not_hand_its_predecessors_mail_to_the_successors() -> None:
    """Ops other hosts sent to a dead host reach its restarted successor (ZeroMQ queues them across the
    reconnect). A fresh host holds an op to a name not spawned yet (its SPAWN may be on its way); a restarted
    one refuses it, so a Produce meant for a killed main's broker actor is not replayed to the one main spawns
    again (the toppar sends what the dead one held once more itself). Ops from the app are still held."""
    for restarted, delivered in ((False, ["XMIT", "JOIN"]), (True, ["JOIN"])):
        clock = FakeClock()
        core = HostCore("h0", lambda key, ops: None, clock=clock, restarted=restarted)
        core.deliver([Op("XMIT", target="broker/1", sender="toppar/t/0"),
                      Op("JOIN", target="broker/1", sender="app")])
        core.spawn("broker/1", "support.sample_actors:RecorderActor", {}, "app")
        core.run()
        assert [row[0] for row in core.actors["broker/1"].actor.log] == delivered, restarted
