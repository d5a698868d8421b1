"""The runtime's event-loop hook that kqactors.aio stands on: Runtime.wakeup_fd() turns readable when ops reach
the app, and Runtime.pump_nowait() routes them without blocking (None while another thread pumps); plus the
LoopDriver waking a coroutine for a reply, and a request's deadline expiring through the loop alone."""

from __future__ import annotations

import asyncio
import select
import threading
import time

import pytest

from kqactors.aio._loop import LoopDriver
from kqactors.runtime import Op, Runtime

ECHO = "support.sample_actors:EchoActor"


@pytest.fixture
def runtime():
    rt = Runtime(hosts=1)
    try:
        rt.spawn("echo", ECHO, host=0)
        yield rt
    finally:
        rt.close()


def test_wakeup_fd_and_pump_nowait(runtime):
    fd = runtime.wakeup_fd()
    assert isinstance(fd, int) and fd >= 0
    assert runtime.pump_nowait() is False  # nothing has arrived: the fd's signal is consumed too
    queue = runtime.new_queue()
    runtime.request_async("echo", Op("ECHO", {"n": 1}), queue, timeout=10)
    # Readable means "look": ZeroMQ also signals for its own commands (a peer connecting), so the watcher
    # pumps whenever it is readable, and the reply is routed by one of those pumps.
    deadline = time.monotonic() + 10
    routed = []
    while not len(queue):
        assert time.monotonic() < deadline, "the reply never arrived"
        readable, _, _ = select.select([fd], [], [], 10)
        assert readable == [fd], "the descriptor turns readable when something arrives"
        routed.append(runtime.pump_nowait())
    assert routed[-1] is True
    assert runtime.pump_nowait() is False
    reply = queue.pop()
    assert reply is not None and reply.payload == {"n": 1}


def test_pump_nowait_steps_aside_while_another_thread_pumps(runtime):
    pumping = threading.Thread(target=runtime.sleep, args=(0.5,))  # sleep() pumps the inbox meanwhile
    pumping.start()
    try:
        deadline = time.monotonic() + 5
        seen = set()
        while time.monotonic() < deadline and None not in seen:
            seen.add(runtime.pump_nowait())
        assert None in seen
    finally:
        pumping.join()
    assert runtime.pump_nowait() is False


def test_inproc_transport_has_no_fd_but_pumps():
    rt = Runtime(hosts=1, transport="inproc")
    try:
        rt.spawn("echo", ECHO, host=0)
        assert rt.wakeup_fd() is None
        queue = rt.new_queue()
        rt.request_async("echo", Op("ECHO", 7), queue, timeout=10)
        deadline = time.monotonic() + 5
        while queue.pop() is None:
            assert time.monotonic() < deadline
            rt.pump_nowait()
    finally:
        rt.close()


def test_loop_driver_wakes_a_waiting_coroutine_and_expires_deadlines(runtime):
    async def main() -> None:
        loop = asyncio.get_running_loop()
        queue = runtime.new_queue()
        driver = LoopDriver(loop, runtime, lambda: None, [queue])
        try:
            runtime.request_async("echo", Op("DELAY", 0.2), queue, timeout=10)
            started = time.monotonic()
            while queue.pop() is None:
                assert time.monotonic() - started < 5
                await driver.wait(5)
            assert 0.15 < time.monotonic() - started < 2, "woken by the reply, not by the timeout"
            runtime.request_async("echo", Op("IGNORE"), queue, timeout=0.3)
            started = time.monotonic()
            reply = None
            while reply is None:
                assert time.monotonic() - started < 5
                await driver.wait(5)
                reply = queue.pop()
            assert reply.error is not None and reply.error.code == "TIMED_OUT"
        finally:
            driver.detach()
        await driver.wait(10)  # a detached driver never makes anyone wait

    asyncio.run(asyncio.wait_for(main(), 30))
