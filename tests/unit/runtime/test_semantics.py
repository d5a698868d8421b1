"""Runs in: pytest. Runtime semantics on both transports (in-process and ZeroMQ host processes): replies
exactly once, timeouts, actor-to-actor requests, poison, priority, version barriers, forwarding, timers,
callbacks and spawn errors."""

from __future__ import annotations

import time

import pytest

from kqactors.runtime import CB, ActorError, ErrorCode, Op, Runtime

from .conftest import spawn


def test_request_reply_with_frames_on_each_host(rt: Runtime) -> None:
    for host in (0, 1):
        name = spawn(rt, "EchoActor", host=host)
        reply = rt.request(name, Op("ECHO", {"n": host}, [b"abc", b"x" * 70_000]), timeout=10)
        assert reply.payload == {"n": host}
        assert [bytes(f) for f in reply.frames] == [b"abc", b"x" * 70_000]
        assert reply.sender == name
        assert rt.request(name, Op("WHO"), 10).payload["host"] == rt.host_keys[host]


def test_every_request_gets_exactly_one_reply(rt: Runtime) -> None:
    name = spawn(rt, "EchoActor")
    queue = rt.new_queue()
    sent = {rt.request_async(name, Op("ECHO", i), queue, timeout=10) for i in range(50)}
    got = []
    while len(got) < 50:
        op = queue.poll(10)
        assert op is not None, f"only {len(got)} replies"
        got.append(op)
    assert {op.req_id for op in got} == sent and sorted(op.payload for op in got) == list(range(50))
    assert queue.poll(0.2) is None


def test_timeout_then_late_reply_is_dropped(rt: Runtime) -> None:
    name = spawn(rt, "EchoActor")
    queue = rt.new_queue()
    rt.request_async(name, Op("DELAY", 0.4), queue, timeout=0.1)
    first = queue.poll(5)
    assert first is not None and first.error is not None and first.error.code == ErrorCode.TIMED_OUT
    assert queue.poll(0.8) is None  # the real reply came at 0.4 s and was dropped: one reply only


def test_a_cancelled_request_gets_neither_its_reply_nor_its_timeout(rt: Runtime) -> None:
    """cancel_request: for a request answered another way (a producer toppar's XMIT gets an XMIT_RESULT op),
    so that its pending entry and timer go at once instead of living until the timeout."""
    relay, echo = spawn(rt, "RelayActor"), spawn(rt, "EchoActor")
    answer = rt.request(relay, Op("RELAY_CANCEL", {"to": echo, "type": "DELAY", "payload": 0.1, "timeout": 0.2}), 10)
    assert answer.payload == {"cancelled": True, "again": False}
    rt.sleep(0.6)  # the reply (after 0.1 s) and the timeout (0.2 s) are both past
    assert rt.request(relay, Op("SERVED"), 10).payload == []


def test_blocking_request_times_out(rt: Runtime) -> None:
    name = spawn(rt, "EchoActor")
    started = time.monotonic()
    with pytest.raises(ActorError) as info:
        rt.request(name, Op("IGNORE"), timeout=0.2)
    assert info.value.code == ErrorCode.TIMED_OUT
    assert 0.15 < time.monotonic() - started < 3


def test_actor_to_actor_requests(rt: Runtime) -> None:
    relay = spawn(rt, "RelayActor", host=1)
    for host in (0, 1):
        echo = spawn(rt, "EchoActor", host=host)
        answer = rt.request(relay, Op("RELAY", {"to": echo, "type": "ECHO", "payload": [host]}), 10).payload
        assert answer == {"payload": [host], "from": echo, "error": None}
        late = rt.request(relay, Op("RELAY", {"to": echo, "type": "IGNORE", "timeout": 0.1}), 10).payload
        assert late["error"] == ErrorCode.TIMED_OUT
    missing = rt.request(relay, Op("RELAY", {"to": "no/such", "type": "ECHO"}), 10).payload
    assert missing["error"] == ErrorCode.UNKNOWN_ACTOR


def test_unknown_actor_and_unhandled_op(rt: Runtime) -> None:
    with pytest.raises(ActorError) as info:
        rt.request("no/such/actor", Op("ECHO"), 1)
    assert info.value.code == ErrorCode.UNKNOWN_ACTOR
    with pytest.raises(ActorError):
        rt.send("no/such/actor", Op("ECHO"))
    name = spawn(rt, "EchoActor")
    with pytest.raises(ActorError) as info:
        rt.request(name, Op("NOT_A_TYPE"), 5)
    assert info.value.code == ErrorCode.UNHANDLED


def test_poison_request_is_answered_and_actor_survives(rt: Runtime) -> None:
    name = spawn(rt, "CrashActor")
    with pytest.raises(ActorError) as info:
        rt.request(name, Op("CRASH", 7), 5)
    assert info.value.code == ErrorCode.POISON and "ValueError: boom on 7" in info.value.message
    assert rt.request(name, Op("FLAKY"), 5).payload == 2  # failed once, the retry succeeded
    assert rt.request(name, Op("ECHO", "alive"), 5).payload == "alive"


def test_poison_send_goes_back_to_its_sender(rt: Runtime) -> None:
    crash = spawn(rt, "CrashActor", host=0)
    rt.send(crash, Op("CRASH", "from app"))
    got: list[Op] = []
    deadline = time.monotonic() + 10
    while not got and time.monotonic() < deadline:
        rt.poll(1.0, lambda op: got.append(op) if op.type == "POISON" else None)
    assert got and got[0].payload["type"] == "CRASH" and got[0].payload["target"] == crash
    recorder = spawn(rt, "RecorderActor", host=1)
    rt.send(recorder, Op("SEND", {"to": crash, "type": "CRASH"}))
    log = wait_for_log(rt, recorder, lambda entries: any(e[0] == "POISON" for e in entries))
    assert [e for e in log if e[0] == "POISON"][0][1]["error"].startswith("ValueError")


def wait_for_log(rt: Runtime, recorder: str, done, timeout: float = 10.0) -> list:
    collected: list = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        collected += rt.request(recorder, Op("LOG", priority=-10), 10).payload
        if done(collected):
            return collected
        rt.sleep(0.05)
    raise AssertionError(f"condition not met; log: {collected}")


def test_priority_order_in_a_mailbox(rt: Runtime) -> None:
    recorder = spawn(rt, "RecorderActor")
    rt.send_many((recorder, Op(t, priority=p)) for t, p in [("a", 0), ("b", 5), ("c", 0), ("d", 9), ("e", 5)])
    log = wait_for_log(rt, recorder, lambda entries: len(entries) >= 5)
    assert [e[0] for e in log] == ["d", "b", "e", "a", "c"]


def test_version_barrier_in_an_actor(rt: Runtime) -> None:
    recorder = spawn(rt, "RecorderActor")
    rt.send(recorder, Op("SET_VERSION", 5, priority=10))
    rt.send_many((recorder, Op(f"v{v}", version=v)) for v in (4, 5, 0, 6, 3))
    log = wait_for_log(rt, recorder, lambda entries: len(entries) >= 3)
    assert [e[0] for e in log] == ["v5", "v0", "v6"]


def test_reply_queue_version_drops_stale_replies(rt: Runtime) -> None:
    echo = spawn(rt, "EchoActor")
    queue = rt.new_queue()
    rt.request_async(echo, Op("DELAY", 0.1), queue, timeout=5)
    queue.bump_version()  # e.g. a rebalance: replies to requests made before it are outdated
    rt.request_async(echo, Op("ECHO", "fresh"), queue, timeout=5)
    first = queue.poll(5)
    assert first is not None and first.payload == "fresh"
    assert queue.poll(0.5) is None
    assert queue.dropped_outdated == 1


def test_forwarded_queue_keeps_its_serve_handler_and_merges_priorities(rt: Runtime) -> None:
    recorder = spawn(rt, "RecorderActor")
    qid = rt.request(recorder, Op("NEW_QUEUE"), 10).payload

    def batch() -> list[tuple[str, Op]]:
        return [(recorder, Op("A")), (recorder, Op("B", priority=5, qid=qid)), (recorder, Op("C"))]

    rt.send_many(batch())  # not forwarded: the sub-queue is served on its own, after the mailbox
    assert [e[0] for e in wait_for_log(rt, recorder, lambda e: len(e) >= 3)] == ["A", "C", "sub:B"]
    rt.request(recorder, Op("FORWARD", {"qid": qid, "on": True}), 10)
    rt.send_many(batch())  # forwarded: one priority order, and B is still served by the sub-queue's handler
    assert [e[0] for e in wait_for_log(rt, recorder, lambda e: len(e) >= 3)] == ["sub:B", "A", "C"]
    rt.request(recorder, Op("FORWARD", {"qid": qid, "on": False}), 10)
    rt.send_many(batch())
    assert [e[0] for e in wait_for_log(rt, recorder, lambda e: len(e) >= 3)] == ["A", "C", "sub:B"]


def test_timers_are_ops(rt: Runtime) -> None:
    recorder = spawn(rt, "RecorderActor")
    rt.request(recorder, Op("TIMER", {"interval": 0.05, "type": "ONCE", "payload": 1}), 10)
    tick = rt.request(recorder, Op("TIMER", {"interval": 0.05, "type": "TICK", "repeat": True}), 10).payload
    log = wait_for_log(rt, recorder, lambda e: sum(x[0] == "TICK" for x in e) >= 3)
    assert sum(x[0] == "ONCE" for x in log) == 1
    assert rt.request(recorder, Op("CANCEL_TIMER", tick), 10).payload is True
    rt.request(recorder, Op("LOG", priority=-10), 10)
    rt.sleep(0.3)
    assert all(x[0] != "TICK" for x in rt.request(recorder, Op("LOG", priority=-10), 10).payload)


def test_cb_ops_and_app_queues_are_addressable(rt: Runtime) -> None:
    recorder = spawn(rt, "RecorderActor")
    called: list[object] = []
    cb_id = rt.register_callback(lambda op: called.append(op.payload))
    rt.send(recorder, Op("CB_TO_APP", {"cb_id": cb_id, "data": 7}))
    deadline = time.monotonic() + 10
    while not called and time.monotonic() < deadline:
        rt.poll(0.5, lambda op: None)
    assert called == [7]
    queue = rt.new_queue()
    rt.send(recorder, Op("SEND", {"to": "app", "qid": queue.qid, "type": "HELLO", "payload": 3}))
    op = queue.poll(10)
    assert op is not None and (op.type, op.payload, op.sender) == ("HELLO", 3, recorder)
    assert CB == 2


def test_spawn_errors_are_clear(rt: Runtime) -> None:
    with pytest.raises(ActorError) as info:
        rt.spawn("bad/path", "support.sample_actors:NoSuchActor")
    assert info.value.code == ErrorCode.SPAWN_FAILED and "NoSuchActor" in info.value.message
    with pytest.raises(ActorError) as info:
        rt.spawn("bad/init", "support.sample_actors:CrashActor", {"fail_init": True})
    assert "factory failed on purpose" in info.value.message
    with pytest.raises(ValueError):
        rt.spawn("bad/path2", "no-colon-here")
    with pytest.raises(ValueError):
        rt.spawn("bad name!", "support.sample_actors:EchoActor")
    with pytest.raises(ValueError):
        rt.spawn("app", "support.sample_actors:EchoActor")
    with pytest.raises(TypeError):
        rt.spawn("bad/args", "support.sample_actors:EchoActor", {"f": print})
    with pytest.raises(ValueError):
        rt.spawn("bad/host", "support.sample_actors:EchoActor", host=7)
    name = spawn(rt, "EchoActor")
    with pytest.raises(ValueError):
        rt.spawn(name, "support.sample_actors:EchoActor")
    # the failed names were not registered: they can be used again
    rt.spawn("bad/init", "support.sample_actors:EchoActor")
    assert rt.request("bad/init", Op("ECHO", 1), 10).payload == 1


def test_stop_forgets_the_actor(rt: Runtime) -> None:
    name = spawn(rt, "EchoActor")
    rt.stop(name)
    with pytest.raises(ActorError) as info:
        rt.request(name, Op("ECHO"), 2)
    assert info.value.code == ErrorCode.UNKNOWN_ACTOR


def test_bad_ops_fail_fast(rt: Runtime) -> None:
    name = spawn(rt, "EchoActor")
    with pytest.raises(ActorError) as info:
        rt.send(name, Op("ECHO", {"fn": print}))
    assert info.value.code == ErrorCode.BAD_OP
    with pytest.raises(ValueError):
        rt.request(name, Op("ECHO"), timeout=0)


def test_actors_spawn_and_stop_children_published_everywhere(rt: Runtime) -> None:
    spawner = spawn(rt, "SpawnerActor", host=0)
    relay = spawn(rt, "RelayActor", host=1)
    kid = f"{spawner}/kid"
    echo = "support.sample_actors:EchoActor"
    assert rt.request(spawner, Op("SPAWN_CHILD", {"name": kid, "factory": echo}), 10).payload == {"host": "h0"}
    assert rt.host_of(kid) == "h0"
    assert rt.request(kid, Op("ECHO", "from app"), 10).payload == "from app"  # the app learned the name
    answer = rt.request(relay, Op("RELAY", {"to": kid, "type": "ECHO", "payload": 5}), 10).payload
    assert answer["payload"] == 5  # so did the other host
    dup = rt.request(spawner, Op("SPAWN_CHILD", {"name": kid, "factory": echo}), 10).payload
    assert dup["error"].startswith("ValueError")
    with pytest.raises(ValueError):
        rt.spawn(kid, echo)  # the app-side placement knows the child too
    bad = rt.request(spawner, Op("SPAWN_CHILD", {"name": f"{spawner}/bad",
                                                  "factory": "support.sample_actors:Nope"}), 10).payload
    assert bad["error"].startswith("ActorError: SPAWN_FAILED")
    rt.request(spawner, Op("STOP_CHILD", kid), 10)
    assert rt.host_of(kid) is None
    gone = rt.request(relay, Op("RELAY", {"to": kid, "type": "ECHO"}), 10).payload
    assert gone["error"] == ErrorCode.UNKNOWN_ACTOR


def test_an_unencodable_op_from_an_actor_fails_alone(rt: Runtime) -> None:
    recorder = spawn(rt, "RecorderActor", host=0)
    queue = rt.new_queue()
    # Both sends leave the host in one batch; the set payload cannot be encoded, so that op is dropped
    # (logged) and the good one still arrives.
    rt.send_many([(recorder, Op("SEND", {"to": "app", "qid": queue.qid, "type": "BAD", "payload": [1],
                                         "as_set": True})),
                  (recorder, Op("SEND", {"to": "app", "qid": queue.qid, "type": "GOOD", "payload": 1}))])
    op = queue.poll(10)
    assert op is not None and op.type == "GOOD"
    assert queue.poll(0.3) is None


def test_actors_own_file_descriptors_in_the_poll_loop(rt: Runtime) -> None:
    name = spawn(rt, "SocketPairActor", host=1)
    for word in ("one", "two"):
        assert rt.request(name, Op("PING", word), 10).payload == word
    rt.stop(name)


def test_actor_replies_older_than_its_version_are_dropped(rt: Runtime) -> None:
    relay = spawn(rt, "RelayActor", host=0)
    echo = spawn(rt, "EchoActor", host=1)
    rt.send(relay, Op("SET_VERSION", 5))
    fresh = rt.request(relay, Op("RELAY", {"to": echo, "type": "ECHO", "payload": 1, "version": 5}), 10)
    assert fresh.payload["payload"] == 1
    with pytest.raises(ActorError) as info:  # the relay never sees the stale reply, so never answers
        rt.request(relay, Op("RELAY", {"to": echo, "type": "ECHO", "payload": 2, "version": 4}), timeout=0.5)
    assert info.value.code == ErrorCode.TIMED_OUT


def test_requests_queued_for_a_stopped_actor_are_answered(rt: Runtime) -> None:
    """Stopping an actor answers the requests still in its mailbox (DEAD_ACTOR), never leaves them to time out."""
    name = spawn(rt, "EchoActor", host=0)
    rt.send(name, Op("SLEEP", 0.3))  # blocks host 0, so the requests below wait in the mailbox
    replies = rt.new_queue()
    ids = [rt.request_async(name, Op("ECHO", n), replies, timeout=30) for n in range(5)]
    rt.stop(name)
    answered = {}
    deadline = time.monotonic() + 10
    while len(answered) < len(ids) and time.monotonic() < deadline:
        reply = replies.poll(0.5)
        if reply is not None:
            answered[reply.req_id] = reply
    assert sorted(answered) == sorted(ids), "every request gets one reply well before its 30 s timeout"
    for reply in answered.values():
        assert reply.error is None or reply.error.code in (ErrorCode.DEAD_ACTOR, ErrorCode.UNKNOWN_ACTOR)
