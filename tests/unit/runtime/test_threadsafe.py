"""Unit tests for ThreadInbox: ops posted from other threads reach the actor on its own host loop."""

from __future__ import annotations

import threading
import time

from kqactors.runtime.actor import Actor, on
from kqactors.runtime.op import Op
from kqactors.runtime.runtime import Runtime
from kqactors.runtime.threadsafe import ThreadInbox


class Collector(Actor):
    """Starts `threads` worker threads that each post `count` ops; answers GET with what it received."""

    def __init__(self, ctx, threads: int = 3, count: int = 50) -> None:
        super().__init__(ctx)
        self.inbox = ThreadInbox(ctx)
        self.got: list[tuple[int, int]] = []
        self.threads, self.count = threads, count

    def on_start(self) -> None:
        def work(n: int) -> None:
            for i in range(self.count):
                self.inbox.post(Op("POSTED", {"thread": n, "i": i}))
        for n in range(self.threads):
            threading.Thread(target=work, args=(n,), daemon=True).start()

    def on_stop(self) -> None:
        self.inbox.close()

    @on("POSTED")
    def _posted(self, op: Op) -> None:
        self.got.append((op.payload["thread"], op.payload["i"]))

    @on("GET")
    def _get(self, op: Op) -> None:
        self.ctx.reply(op, Op("GET", {"got": self.got}))


def test_posts_from_threads_arrive_in_order_per_thread():
    with Runtime(transport="inproc") as rt:
        rt.spawn("collector", "tests.unit.runtime.test_threadsafe:Collector", {"threads": 3, "count": 50})
        deadline = time.monotonic() + 10
        got: list = []
        while len(got) < 150 and time.monotonic() < deadline:
            rt.poll(0.02, lambda _op: None)  # the in-process loop watches fds while it idles
            got = rt.request("collector", Op("GET"), timeout=5).payload["got"]
        assert len(got) == 150
        for n in range(3):
            assert [i for t, i in got if t == n] == list(range(50))


class _Ctx:
    name = "x"

    def __init__(self) -> None:
        self.fds: dict = {}
        self.sent: list = []

    def register_fd(self, fd, on_readable=None, on_writable=None):
        self.fds[fd] = on_readable

    def unregister_fd(self, fd):
        self.fds.pop(fd, None)

    def send(self, name, op):
        self.sent.append((name, op.type))


def test_a_closed_inbox_drops_posts_and_releases_its_fds():
    ctx = _Ctx()
    inbox = ThreadInbox(ctx)
    assert inbox.post(Op("A"))
    (drain,) = ctx.fds.values()
    drain()
    assert ctx.sent == [("x", "A")]
    inbox.close()
    assert ctx.fds == {} and inbox.post(Op("B")) is False
    inbox.close()  # idempotent
