"""Runs in: host processes. Owns small example actors used by the runtime's tests, benchmarks and docs
(importable by dotted path, which spawned hosts need): echo, sink, relay, recorder, crasher, ticker, stepper.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from typing import Any

from kqactors.runtime.actor import Actor, ActorContext, on
from kqactors.runtime.op import CHILD_EXITED, POISON, Op


class EchoActor(Actor):
    """Replies to ECHO with the same payload and frames; DELAY replies after ``payload`` seconds (via a
    timer, never blocking); LOADED tells which modules its host has imported; SLEEP blocks this host; WEDGE
    blocks it deaf to SIGTERM too."""

    def __init__(self, ctx: ActorContext, **args: Any) -> None:
        super().__init__(ctx, **args)
        self._delayed: dict[int, Op] = {}
        self._tokens = 0

    @on("DELAY")
    def delay(self, op: Op) -> None:
        self._tokens += 1
        self._delayed[self._tokens] = op
        self.ctx.timer(float(op.payload), Op("_DELAYED", self._tokens))

    @on("_DELAYED")
    def delayed(self, op: Op) -> None:
        request = self._delayed.pop(op.payload)
        self.ctx.reply(request, Op("DELAY", request.payload))

    @on("ECHO")
    def echo(self, op: Op) -> None:
        self.ctx.reply(op, Op("ECHO", op.payload, op.frames))

    @on("WHO")
    def who(self, op: Op) -> None:
        self.ctx.reply(op, Op("WHO", {"name": self.ctx.name, "host": self.ctx.host, "pid": os.getpid(),
                                      "args": self.args}))

    @on("LOADED")
    def loaded(self, op: Op) -> None:
        """Which of the module names in the payload this host has imported."""
        self.ctx.reply(op, Op("LOADED", {name: name in sys.modules for name in op.payload}))

    @on("IGNORE")
    def ignore(self, op: Op) -> None:
        """Never replies: the requester's timeout must answer instead."""

    @on("SLEEP")
    def sleep(self, op: Op) -> None:
        time.sleep(float(op.payload))
        if op.is_request:
            self.ctx.reply(op, Op("SLEEP"))


    @on("WEDGE")
    def wedge(self, op: Op) -> None:
        """Stand-in for a host stuck in native code: no signal handler and no loop turn can run."""
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        time.sleep(float(op.payload))


class SinkActor(Actor):
    """Counts messages packed in frames (payload ``n`` = messages in the op) and bytes; COUNT reports."""

    def __init__(self, ctx: ActorContext, **args: Any) -> None:
        super().__init__(ctx, **args)
        self.messages = 0
        self.bytes = 0
        self.ops = 0

    @on("DATA")
    def data(self, op: Op) -> None:
        self.ops += 1
        self.messages += op.payload or len(op.frames)
        for frame in op.frames:
            self.bytes += len(frame)

    @on("COUNT")
    def count(self, op: Op) -> None:
        self.ctx.reply(op, Op("COUNT", {"messages": self.messages, "bytes": self.bytes, "ops": self.ops}))


class RecorderActor(Actor):
    """Records every op it serves (type, payload, version) in order; LOG returns and clears the record.
    Its version barrier is ``op_version``, set with SET_VERSION (served at high priority by callers)."""

    def __init__(self, ctx: ActorContext, **args: Any) -> None:
        super().__init__(ctx, **args)
        self.log: list[list] = []
        self.queues: dict[int, Any] = {}

    def on_unhandled(self, op: Op) -> None:
        self.log.append([op.type, op.payload, op.version, op.error.code if op.error else None])

    @on("SET_VERSION")
    def set_version(self, op: Op) -> None:
        self.op_version = int(op.payload)

    @on("LOG")
    def get_log(self, op: Op) -> None:
        log, self.log = self.log, []
        self.ctx.reply(op, Op("LOG", log))

    @on("NEW_QUEUE")
    def new_queue(self, op: Op) -> None:
        """Make a sub-queue whose serve handler tags ops 'sub:'; FORWARD links it to the mailbox."""
        qid, queue = self.ctx.new_queue(lambda o: self.log.append(["sub:" + o.type, o.payload, o.version, None]))
        self.queues[qid] = queue
        self.ctx.reply(op, Op("NEW_QUEUE", qid))

    @on("FORWARD")
    def forward(self, op: Op) -> None:
        queue = self.queues[op.payload["qid"]]
        if op.payload.get("on", True):
            queue.forward_to(self.ctx.mailbox)
        else:
            queue.unforward()
        if op.is_request:
            self.ctx.reply(op, Op("FORWARD"))

    @on("TIMER")
    def timer(self, op: Op) -> None:
        p = op.payload
        timer_id = self.ctx.timer(p["interval"], Op(p["type"], p.get("payload"), priority=p.get("priority", 0)),
                                  repeat=p.get("repeat", False))
        self.ctx.reply(op, Op("TIMER", timer_id))

    @on("CANCEL_TIMER")
    def cancel_timer(self, op: Op) -> None:
        self.ctx.reply(op, Op("CANCEL_TIMER", self.ctx.cancel_timer(op.payload)))

    @on("CB_TO_APP")
    def cb_to_app(self, op: Op) -> None:
        self.ctx.send("app", Op("CALLBACK", op.payload.get("data"), flags=2, cb_id=op.payload["cb_id"]))

    @on("SEND")
    def send(self, op: Op) -> None:
        """Send an op {type, payload} to payload["to"] (maybe "app" with a qid)."""
        p = op.payload
        payload = set(p["payload"]) if p.get("as_set") else p.get("payload")  # a set cannot be encoded
        self.ctx.send(p["to"], Op(p["type"], payload, version=p.get("version", 0)), qid=p.get("qid", 0))

    @on(CHILD_EXITED, POISON)
    def record_event(self, op: Op) -> None:
        self.log.append([op.type, op.payload, op.version, op.error.code if op.error else None])


class RelayActor(Actor):
    """RELAY {to, type, payload, timeout}: asks another actor without blocking and answers the original
    request with that reply (or with the error the runtime produced)."""

    @on("RELAY")
    def relay(self, op: Op) -> None:
        p = op.payload

        def answered(reply: Op) -> None:
            self.ctx.reply(op, Op("RELAY", {"payload": reply.payload, "from": reply.sender,
                                            "error": reply.error.code if reply.error else None}))

        self.ctx.request(p["to"], Op(p["type"], p.get("payload")), answered, timeout=p.get("timeout", 5.0),
                         version=p.get("version", 0))

    @on("RELAY_CANCEL")
    def relay_cancel(self, op: Op) -> None:
        """Asks like RELAY, then cancels that request at once; answers {cancelled, again} (the two
        cancel_request results). Whatever reaches the cancelled request's callback later is kept for SERVED."""
        p = op.payload
        served = self.__dict__.setdefault("served", [])
        req_id = self.ctx.request(p["to"], Op(p["type"], p.get("payload")),
                                  lambda reply: served.append(reply.error.code if reply.error else reply.payload),
                                  timeout=p.get("timeout", 5.0))
        cancelled = self.ctx.cancel_request(req_id)
        self.ctx.reply(op, Op("RELAY_CANCEL", {"cancelled": cancelled, "again": self.ctx.cancel_request(req_id)}))

    @on("SERVED")
    def served_replies(self, op: Op) -> None:
        self.ctx.reply(op, Op("SERVED", list(self.__dict__.get("served", []))))

    @on("SET_VERSION")
    def set_version(self, op: Op) -> None:
        self.op_version = int(op.payload)


class StepperActor(Actor):
    """STEPS {to, count}: sends STEP 0 .. count-1 to ``to``, one per host turn (``continue_later``)."""

    def __init__(self, ctx: ActorContext, **args: Any) -> None:
        super().__init__(ctx, **args)
        self._left: list[int] = []
        self._to = ""

    @on("STEPS")
    def steps(self, op: Op) -> None:
        self._to, self._left = op.payload["to"], list(range(int(op.payload["count"])))
        self.step(op)

    @on("_STEP")
    def step(self, _op: Op) -> None:
        if self._left:
            self.ctx.send(self._to, Op("STEP", self._left.pop(0)))
            self.ctx.continue_later(Op("_STEP"))


class CrashActor(Actor):
    """CRASH always raises; FLAKY raises on the first attempt only (the retry succeeds)."""

    def __init__(self, ctx: ActorContext, **args: Any) -> None:
        super().__init__(ctx, **args)
        self.attempts = 0
        if args.get("fail_init"):
            raise RuntimeError("factory failed on purpose")

    @on("CRASH")
    def crash(self, op: Op) -> None:
        raise ValueError(f"boom on {op.payload!r}")

    @on("FLAKY")
    def flaky(self, op: Op) -> None:
        self.attempts += 1
        if self.attempts % 2 == 1:
            raise ValueError("first attempt fails")
        self.ctx.reply(op, Op("FLAKY", self.attempts))

    @on("ECHO")
    def echo(self, op: Op) -> None:
        self.ctx.reply(op, Op("ECHO", op.payload))


class SpawnerActor(Actor):
    """SPAWN_CHILD {name, factory, args} / STOP_CHILD name: ctx.spawn and ctx.stop, answering the
    request with the child's host or the error text."""

    @on("SPAWN_CHILD")
    def spawn_child(self, op: Op) -> None:
        p = op.payload
        try:
            host = self.ctx.spawn(p["name"], p["factory"], p.get("args"))
        except Exception as exc:  # noqa: BLE001 - reported to the requester
            self.ctx.reply(op, Op("SPAWN_CHILD", {"error": f"{type(exc).__name__}: {exc}"}))
            return
        self.ctx.reply(op, Op("SPAWN_CHILD", {"host": host}))

    @on("STOP_CHILD")
    def stop_child(self, op: Op) -> None:
        self.ctx.stop(op.payload)
        self.ctx.reply(op, Op("STOP_CHILD"))


class SocketPairActor(Actor):
    """Owns a socketpair in the host's poll loop: PING writes its payload into one end, and the readable
    callback of the other end answers the request with what it read (like a broker's TCP socket)."""

    def __init__(self, ctx: ActorContext, **args: Any) -> None:
        super().__init__(ctx, **args)
        self.reader, self.writer = socket.socketpair()
        self.reader.setblocking(False)
        self.waiting: list[Op] = []
        ctx.register_fd(self.reader.fileno(), on_readable=self.readable)

    @on("PING")
    def ping(self, op: Op) -> None:
        self.waiting.append(op)
        self.writer.send(op.payload.encode())

    def readable(self) -> None:
        data = self.reader.recv(65536)
        if self.waiting:
            self.ctx.reply(self.waiting.pop(0), Op("PING", data.decode()))

    def on_stop(self) -> None:
        self.ctx.unregister_fd(self.reader.fileno())
        self.reader.close()
        self.writer.close()


class GreeterActor(Actor):
    """With ``peer``: sends HELLO to it from on_start, before the runtime could have told the peer's host
    about this actor; the peer answers HELLO_BACK by name. GREETED says whether the answer arrived."""

    def __init__(self, ctx: ActorContext, **args: Any) -> None:
        super().__init__(ctx, **args)
        self.answered_by: str | None = None

    def on_start(self) -> None:
        if self.args.get("peer"):
            self.ctx.send(self.args["peer"], Op("HELLO"))

    @on("HELLO")
    def hello(self, op: Op) -> None:
        self.ctx.send(op.sender, Op("HELLO_BACK"))

    @on("HELLO_BACK")
    def hello_back(self, op: Op) -> None:
        self.answered_by = op.sender

    @on("GREETED")
    def greeted(self, op: Op) -> None:
        self.ctx.reply(op, Op("GREETED", self.answered_by))
