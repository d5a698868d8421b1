"""Runs in: pytest. A KeyboardInterrupt (Ctrl+C reaches the app's main thread, which may be the one pumping)
loses no op and does not desynchronise the inbox: the rest of a batch is routed before it is raised, an op
it interrupted is routed once, and a receive interrupted after a message's first frame skips the rest of
that message so the next receive starts at a header. (The end-to-end checks with real signals are
tests/integration/test_interrupt_and_exit.py.)"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import zmq

from kqactors.runtime import Runtime, transport_zmq
from kqactors.runtime.op import Op, encode_batch
from kqactors.runtime.transport_zmq import recv_batch, send_frames


@pytest.fixture
def rt() -> Iterator[Runtime]:
    with Runtime(hosts=1, transport="inproc") as runtime:
        yield runtime


def _events(rt: Runtime, qid: int) -> list[Op]:
    queue = rt._queues[qid]
    out = []
    while (op := queue.poll(0)) is not None:
        out.append(op)
    return out


@pytest.mark.parametrize("after_routing", [False, True])
def test_an_interrupt_while_routing_a_batch_routes_every_op_once(rt: Runtime, after_routing: bool) -> None:
    queue = rt.new_queue()
    ops = [Op("E", {"i": i}, qid=queue.qid) for i in range(4)]
    route = rt._route
    interrupted: list[int] = []

    def flaky_route(op: Op) -> None:
        if op.payload["i"] == 1 and not interrupted:
            interrupted.append(1)
            if after_routing:
                route(op)  # the interrupt lands just after the op reached its queue
            raise KeyboardInterrupt
        route(op)

    rt._route = flaky_route  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        rt._route_all(ops)
    assert [op.payload["i"] for op in _events(rt, queue.qid)] == [0, 1, 2, 3]


def test_a_receive_interrupted_after_the_first_frame_skips_that_message(monkeypatch: pytest.MonkeyPatch) -> None:
    context = zmq.Context()
    pull, push = context.socket(zmq.PULL), context.socket(zmq.PUSH)
    try:
        pull.bind("inproc://interrupts")
        push.connect("inproc://interrupts")
        big = b"x" * (70 * 1024)  # a frame of its own (zero-copy), so the message has several frames
        send_frames(push, encode_batch([Op("FIRST", {"n": 1}, [big, b"small"])]))
        send_frames(push, encode_batch([Op("SECOND", {"n": 2}, [big])]))
        decode = transport_zmq.decode_header
        calls = []

        def interrupted_once(head: bytes):  # type: ignore[no-untyped-def]
            calls.append(1)
            if len(calls) == 1:
                raise KeyboardInterrupt
            return decode(head)

        monkeypatch.setattr(transport_zmq, "decode_header", interrupted_once)
        assert pull.poll(2000)
        with pytest.raises(KeyboardInterrupt):
            recv_batch(pull)
        assert pull.poll(2000)
        (op,) = recv_batch(pull)
        assert op.type == "SECOND" and bytes(op.frames[0]) == big
    finally:
        pull.close(linger=0)
        push.close(linger=0)
        context.term()
