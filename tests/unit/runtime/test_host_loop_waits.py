"""Runs in: the test process. How a host's poll loop waits for its next timer (kqactors.runtime.host_process):
whole milliseconds floored for libzmq and a sub-millisecond wait done with select(), so a timer is not up to a
millisecond late; and the sub-millisecond poll still reports the inbox and the actors' fds."""

from __future__ import annotations

import os
import socket
import time

import pytest
import zmq

from kqactors.runtime.host_process import _poll_within, timer_wait
from kqactors.runtime.op import Op
from kqactors.runtime.transport_zmq import ZmqInbox, ZmqOutbox, make_run_dir, remove_run_dir


@pytest.mark.parametrize(("seconds", "expected"), [
    (0.0025, (2, 0.0)),        # 2 ms in libzmq, the rest on the next turn (was 3 ms: up to 1 ms late)
    (0.0003, (0, 0.0003)),     # under a millisecond: waited precisely (was 1 ms)
    (0.0, (0, 0.0)),
    (-0.002, (0, 0.0)),        # overdue: no wait
    (0.25, (250, 0.0)),
])
def test_timer_wait_floors_whole_ms_and_keeps_a_sub_ms_rest(seconds: float, expected: tuple[int, float]) -> None:
    timeout_ms, rest = timer_wait(seconds)
    assert timeout_ms == expected[0]
    assert rest == pytest.approx(expected[1])


@pytest.fixture
def inbox_pair():
    context = zmq.Context()
    run_dir = make_run_dir()
    inbox = ZmqInbox(context, run_dir, "h0")
    outbox = ZmqOutbox(context, run_dir)
    yield inbox, outbox
    outbox.close()
    inbox.close()
    context.term()
    remove_run_dir(run_dir)


def test_sub_ms_poll_reports_nothing_then_a_message_then_a_readable_fd(inbox_pair) -> None:
    inbox, outbox = inbox_pair
    left, right = socket.socketpair()
    try:
        items = [(inbox.socket, zmq.POLLIN), (left.fileno(), zmq.POLLIN)]
        assert zmq.zmq_poll(items, 0) == []  # the loop's own zmq_poll first, as in serve_forever
        assert _poll_within(items, 0.0005) == []
        outbox.send("h0", [Op("PING", 1, target="x")])
        deadline = time.monotonic() + 10  # generous: the ipc hop may be slow on a loaded machine
        ready: list = []
        while not ready and time.monotonic() < deadline:
            ready = zmq.zmq_poll(items, 0) or _poll_within(items, 0.0008)
        assert [item for item, _ in ready] == [inbox.socket]
        assert [op.type for batch in inbox.recv_batches() for op in batch] == ["PING"]
        assert zmq.zmq_poll(items, 0) == []
        right.send(b"x")
        deadline = time.monotonic() + 10
        ready = []
        while not ready and time.monotonic() < deadline:
            ready = _poll_within(items, 0.0008)
        assert ready == [(left.fileno(), zmq.POLLIN)]
    finally:
        left.close()
        right.close()


def test_sub_ms_poll_with_a_writable_fd_returns_at_once(inbox_pair) -> None:
    inbox, _ = inbox_pair
    left, right = socket.socketpair()
    try:
        items = [(inbox.socket, zmq.POLLIN), (left.fileno(), zmq.POLLOUT)]
        assert _poll_within(items, 0.0009) == [(left.fileno(), zmq.POLLOUT)]
    finally:
        left.close()
        right.close()


def test_sub_ms_poll_beyond_select_range_falls_back_to_zmq_poll(inbox_pair) -> None:
    inbox, _ = inbox_pair
    read_end, write_end = os.pipe()
    high = os.dup2(read_end, 1500) if _can_open(1500) else None
    if high is None:
        os.close(read_end)
        os.close(write_end)
        pytest.skip("the fd limit is below 1500")
    try:
        os.write(write_end, b"x")
        items = [(inbox.socket, zmq.POLLIN), (high, zmq.POLLIN)]
        assert _poll_within(items, 0.0005) == [(high, zmq.POLLIN)]  # select() would raise ValueError
    finally:
        os.close(high)
        os.close(read_end)
        os.close(write_end)


def _can_open(fd: int) -> bool:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return fd < soft
