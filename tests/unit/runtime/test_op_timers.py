"""Runs in: pytest. The op wire codec (header + separate frames) and the timer heap."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.clock import FakeClock

from kqactors.runtime.op import (
    REPLY,
    ActorError,
    ErrorCode,
    Op,
    OpError,
    decode_batch,
    encode_batch,
    error_reply,
)
from kqactors.runtime.timers import TimerHeap

plain = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.text(max_size=20) | st.binary(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10,
)


@settings(max_examples=80, deadline=None)
@given(payloads=st.lists(plain, min_size=1, max_size=5),
       frames=st.lists(st.binary(max_size=64), max_size=3),
       priority=st.integers(-5, 5), version=st.integers(0, 2**31))
def test_batch_round_trip(payloads, frames, priority, version) -> None:
    ops = [Op(f"T{i}", p, frames, priority=priority, version=version, target="toppar/t/1", qid=i,
              reply_to=("app", 3, 7), req_id=i + 1, sender="main", error=OpError("X", "y") if i else None)
           for i, p in enumerate(payloads)]
    wire = encode_batch(ops)
    assert len(wire) == (2 if frames else 1)  # small frames share one blob frame, never the msgpack header
    back = decode_batch(wire)
    for a, b in zip(ops, back, strict=True):
        assert (a.type, a.payload, a.priority, a.version, a.target, a.qid, a.reply_to, a.req_id, a.sender,
                a.error) == (b.type, b.payload, b.priority, b.version, b.target, b.qid, b.reply_to, b.req_id,
                             b.sender, b.error)
        assert [bytes(f) for f in b.frames] == frames


def test_frames_are_not_copied_into_the_header() -> None:
    big = b"\xab" * 100_000
    wire = encode_batch([Op("DATA", {"n": 1}, [b"small", big, b"", b"tail"]), Op("MORE", None, [big])])
    assert len(wire[0]) < 100 and wire[1] == b"smalltail" and wire[2] is big and wire[3] is big
    back = decode_batch(wire)
    assert [bytes(f) for f in back[0].frames] == [b"small", big, b"", b"tail"]
    assert back[0].frames[1] is big  # the large frame was not copied


def test_callables_cannot_cross() -> None:
    with pytest.raises(ActorError) as info:
        encode_batch([Op("X", {"cb": print})])
    assert info.value.code == ErrorCode.BAD_OP


def test_error_reply_addresses_the_requester() -> None:
    req = Op("FETCH", reply_to=("broker/1", 0, 4), req_id=9, priority=2)
    rep = error_reply(req, ErrorCode.TIMED_OUT, "late")
    assert (rep.target, rep.qid, rep.version, rep.req_id, rep.flags & REPLY, rep.error.code) == (
        "broker/1", 0, 4, 9, REPLY, "TIMED_OUT")
    assert req.is_request and not rep.is_request




def test_timers_one_shot_repeat_cancel() -> None:
    clock = FakeClock()
    heap = TimerHeap(clock)
    fired: list[str] = []
    heap.schedule(1.0, lambda: fired.append("once"))
    tick = heap.schedule(0.5, lambda: fired.append("tick"), repeat=True)
    dead = heap.schedule(0.7, lambda: fired.append("cancelled"))
    assert heap.cancel(dead) and not heap.cancel(dead)
    assert heap.next_due() == 100.5
    clock.now = 101.0
    heap.run_due()
    assert sorted(fired) == ["once", "tick", "tick"]
    clock.now = 110.0  # a long stall: one catch-up tick, not twenty
    fired.clear()
    heap.run_due()
    assert fired == ["tick"]
    assert heap.cancel(tick) and heap.next_due() is None
    with pytest.raises(ValueError):
        heap.schedule(-1, lambda: None)
    with pytest.raises(ValueError):
        heap.schedule(0, lambda: None, repeat=True)


def test_timers_cancelled_long_before_they_are_due_take_bounded_memory() -> None:
    """Request timeouts are mostly cancelled by the reply, long before they are due: the heap must not keep
    every one of them until then (a producer at 10k msg/s held ~80k such entries)."""
    clock = FakeClock()
    heap = TimerHeap(clock)
    fired: list[int] = []
    keep = [heap.schedule(90.0 + i, lambda i=i: fired.append(i)) for i in range(3)]
    for _ in range(20_000):
        heap.cancel(heap.schedule(60.0, lambda: fired.append(-1)))
    assert len(heap._heap) <= 2 * len(keep) + 1024 + 1  # noqa: SLF001 - the bound is the point
    clock.now += 100.0
    heap.run_due()
    assert fired == [0, 1, 2] and all(not heap.cancel(t) for t in keep)
