"""Runs in: the test process. The request/reply fast path: the one-op header encoder must produce the
same bytes as the general batch encoder, and the inbox's bounded receive must honour its timeout."""

from __future__ import annotations

import time

import msgpack
import pytest
import zmq
from hypothesis import given, settings
from hypothesis import strategies as st

from kqactors.runtime.op import ActorError, Op, OpError, decode_batch, encode_batch
from kqactors.runtime.transport_zmq import ZmqInbox, ZmqOutbox, make_run_dir, remove_run_dir

plain = st.recursive(st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.text(max_size=20),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner,
                                                                                  max_size=4),
                     max_leaves=10)


def _general_header(op: Op) -> bytes:
    """The header the multi-op encoder writes, spelled out independently with msgpack."""
    row = [op.target, op.qid, op.type, op.flags, op.version, op.priority, op.reply_to, op.req_id, op.sender,
           None, op.payload, None, op.cb_id]
    return msgpack.packb([[row], False, 0], use_bin_type=True)


@settings(max_examples=60, deadline=None)
@given(payload=plain, version=st.integers(0, 2**31), priority=st.integers(-5, 5), req_id=st.integers(0, 2**40),
       reply=st.booleans())
def test_single_op_header_matches_the_general_layout(payload, version, priority, req_id, reply) -> None:
    op = Op("ECHO", payload, target="echo/1", qid=2, version=version, priority=priority, req_id=req_id,
            reply_to=("app", 3, 1) if reply else None, sender="app", flags=1 if not reply else 0)
    frames = encode_batch([op])
    assert frames == [_general_header(op)]
    back = decode_batch(frames)[0]
    assert (back.type, back.payload, back.version, back.priority, back.req_id, back.reply_to, back.flags) == (
        op.type, op.payload, op.version, op.priority, op.req_id, op.reply_to, op.flags)


def test_ops_with_frames_or_errors_take_the_general_encoder() -> None:
    with_frames = Op("DATA", 1, [b"abc"], target="t")
    with_error = Op("R", None, target="t", error=OpError("TIMED_OUT", "late"))
    for op in (with_frames, with_error):
        back = decode_batch(encode_batch([op]))[0]
        assert [bytes(f) for f in back.frames] == [bytes(f) for f in op.frames]
        assert back.error == op.error


def test_single_op_encoder_rejects_unencodable_payloads_and_recovers() -> None:
    with pytest.raises(ActorError) as info:
        encode_batch([Op("X", {"f": object()}, target="t")])
    assert info.value.code == "BAD_OP"
    good = Op("Y", [1, 2], target="t")
    assert encode_batch([good]) == [_general_header(good)]  # no leftover bytes from the failed pack


def test_inbox_bounded_receive_times_out_then_delivers() -> None:
    run_dir = make_run_dir()
    context = zmq.Context()
    try:
        inbox = ZmqInbox(context, run_dir, "rx")
        outbox = ZmqOutbox(context, run_dir)
        started = time.monotonic()
        assert inbox.recv_within(50) == []
        waited = time.monotonic() - started
        assert 0.04 <= waited < 2.0
        outbox.send("rx", [Op("A", 1, target="x")])
        outbox.send("rx", [Op("B", 2, target="x"), Op("C", None, [b"f" * 10], target="x")])
        got: list[Op] = []
        deadline = time.monotonic() + 5
        while len(got) < 3 and time.monotonic() < deadline:
            for batch in inbox.recv_within(100, limit=1):  # limit 1: one batch per call
                got.extend(batch)
        assert [op.type for op in got] == ["A", "B", "C"]
        assert bytes(got[2].frames[0]) == b"f" * 10
        assert inbox.recv_within(0) == []  # zero timeout: no wait
        outbox.close()
        inbox.close()
    finally:
        context.term()
        remove_run_dir(run_dir)


def test_inbox_wait_readable_is_precise_and_takes_nothing() -> None:
    run_dir = make_run_dir()
    context = zmq.Context()
    try:
        inbox = ZmqInbox(context, run_dir, "rx")
        outbox = ZmqOutbox(context, run_dir)
        started = time.monotonic()
        assert inbox.wait_readable(0.0003) is False
        assert time.monotonic() - started >= 0.0003
        outbox.send("rx", [Op("A", 1, target="x")])
        assert inbox.wait_readable(5.0) is True
        assert inbox.wait_readable(0.0) is True  # still there: waiting took nothing off the socket
        assert [op.type for batch in inbox.recv_within(0) for op in batch] == ["A"]
        assert inbox.wait_readable(0.0002) is False
        outbox.close()
        inbox.close()
    finally:
        context.term()
        remove_run_dir(run_dir)


def test_app_wait_ends_at_a_sub_millisecond_deadline() -> None:
    """libzmq waits in whole milliseconds: a 0.2 ms wait rounded up to 1 ms kept a consume() (and its
    messages) up to a millisecond past its timeout. The best of 30 waits shows the rounding is gone
    (before, none came back sooner than 1 ms), with room for a loaded machine."""
    from kqactors.runtime import Runtime

    with Runtime(hosts=1) as rt:
        queue = rt.new_queue()
        waits = []
        for _ in range(30):
            started = time.perf_counter()
            assert queue.poll(0.0002) is None
            waits.append(time.perf_counter() - started)
        assert min(waits) >= 0.0002
        assert min(waits) < 0.0008, sorted(waits)[:5]
