"""Runs in: every process (app and hosts). Owns the Op record, the runtime's error type and the wire codec.

An op is librdkafka's ``rd_kafka_op_t`` made serialisable: a type name, flags, a version for the barrier,
a reply address, a priority, an optional error and a msgpack-able payload. Bulk bytes ride next to it as
separate frames so they are never copied into msgpack. Owning modules declare their own op type names.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgpack

# Flags (bit mask).
REPLY = 0x1  # this op answers a request; ``req_id`` names which one
CB = 0x2  # served by calling the callback registered under ``cb_id`` in the receiving process

# Op types the runtime itself understands; every other type belongs to an actor's handler table.
TERMINATE = "TERMINATE"
CHILD_EXITED = "CHILD_EXITED"
POISON = "POISON"
# A monitor's notice (Runtime.monitor): a host died and its actors with it. Payload: host (its key), names
# (the actors it ran), restarts (how often that host has died so far, this time included), exitcode.
ACTORS_DOWN = "ACTORS_DOWN"

# Reserved addresses.
APP = "app"  # the app process' mailbox (reply queues, events)
HOST_CONTROL = "@host"  # control ops for whichever host receives them
SUPERVISOR = "@sup"  # control replies for the supervisor


class ErrorCode:
    """Error codes of the runtime; the Kafka layer maps them onto librdkafka codes."""

    TIMED_OUT = "TIMED_OUT"  # no reply before the request's deadline
    POISON = "POISON"  # the handler raised twice on this op
    DEAD_ACTOR = "DEAD_ACTOR"  # the actor's host died (or is restarting) while the request was pending
    UNKNOWN_ACTOR = "UNKNOWN_ACTOR"  # no actor of that name has been spawned
    TERMINATED = "TERMINATED"  # the runtime closed while the request was pending
    FORKED = "FORKED"  # the runtime was created in another process (fork)
    CLOSED = "CLOSED"  # the runtime is closed
    SPAWN_FAILED = "SPAWN_FAILED"  # the factory or a host process failed to start
    UNHANDLED = "UNHANDLED"  # the actor has no handler for this op type
    BAD_OP = "BAD_OP"  # the op cannot be encoded (e.g. a callable in its payload)


class ActorError(Exception):
    """The runtime's only exception: a code from :class:`ErrorCode` and a human-readable message."""

    def __init__(self, code: str, message: str = "", op: Op | None = None) -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message
        self.op = op


class OpError:
    """An error carried by an op (e.g. a timed-out or poisoned reply). Crosses processes as [code, text]."""

    __slots__ = ("code", "message")

    def __init__(self, code: str, message: str = "") -> None:
        self.code = code
        self.message = message

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OpError) and (self.code, self.message) == (other.code, other.message)

    def __hash__(self) -> int:
        return hash((self.code, self.message))

    def __repr__(self) -> str:
        return f"OpError({self.code!r}, {self.message!r})"

    def to_exception(self, op: Op | None = None) -> ActorError:
        return ActorError(self.code, self.message, op)


ReplyTo = tuple  # (actor name, queue id, version)


class Op:
    """One operation. ``serve``, ``replied`` and ``attempts`` are local bookkeeping, never sent."""

    __slots__ = (
        "type", "payload", "frames", "flags", "version", "priority", "reply_to", "error",
        "target", "qid", "req_id", "sender", "cb_id", "serve", "replied",
    )

    def __init__(
        self,
        type: str,
        payload: Any = None,
        frames: Sequence[bytes | memoryview] | None = None,
        *,
        flags: int = 0,
        version: int = 0,
        priority: int = 0,
        reply_to: ReplyTo | None = None,
        error: OpError | None = None,
        target: str | None = None,
        qid: int = 0,
        req_id: int = 0,
        sender: str | None = None,
        cb_id: int = 0,
    ) -> None:
        self.type = type
        self.payload = payload
        self.frames = list(frames) if frames else []
        self.flags = flags
        self.version = version
        self.priority = priority
        self.reply_to = reply_to
        self.error = error
        self.target = target
        self.qid = qid
        self.req_id = req_id
        self.sender = sender
        self.cb_id = cb_id
        self.serve: Callable[[Op], Any] | None = None
        self.replied = False

    def copy(self) -> Op:
        """A fresh op with the same fields (frames shared), e.g. for each tick of a repeating timer."""
        return Op(self.type, self.payload, self.frames, flags=self.flags, version=self.version,
                  priority=self.priority, reply_to=self.reply_to, error=self.error, target=self.target,
                  qid=self.qid, req_id=self.req_id, sender=self.sender, cb_id=self.cb_id)

    @property
    def is_request(self) -> bool:
        return self.reply_to is not None and not self.flags & REPLY

    def __repr__(self) -> str:
        extra = f", error={self.error!r}" if self.error else ""
        return (f"Op({self.type!r}, target={self.target!r}, flags={self.flags}, version={self.version}, "
                f"req_id={self.req_id}, payload={self.payload!r}, frames={len(self.frames)}{extra})")


def error_reply(request: Op, code: str, message: str, *, type: str | None = None) -> Op:
    """Build the error reply for ``request`` (used for timeouts, poison and dead actors)."""
    name, qid, version = request.reply_to
    return Op(type or request.type, flags=REPLY, error=OpError(code, message), target=name, qid=qid,
              version=version, req_id=request.req_id, priority=request.priority)


# --- wire codec -------------------------------------------------------------------------------------
# One zmq message per batch: [header][blob?][large frame]...  The header is one msgpack array
# [rows, has_blob] with one row per op. Frames below ZERO_COPY_MIN are joined into a single blob frame
# (one copy, instead of per-frame costs of ~10 us each) and come back as zero-copy memoryview slices of it;
# larger frames travel as their own zero-copy zmq frames. A row's frame spec lists, per frame, its length
# in the blob or -1 for "the next large frame".

ZERO_COPY_MIN = 64 * 1024

_packer = msgpack.Packer(use_bin_type=True)
_BYTES_LIKE = (bytes, bytearray, memoryview)


# The header of a one-op batch without bytes frames, around its packed row: the array [rows, has_blob,
# large] with rows = [row], has_blob = False and large = 0 (the request/reply fast path: no list building).
_SINGLE_HEAD = b"\x93\x91"
_SINGLE_TAIL = b"\xc2\x00"


def _encode_single(op: Op) -> list:
    try:
        row = _packer.pack((op.target, op.qid, op.type, op.flags, op.version, op.priority, op.reply_to,
                            op.req_id, op.sender, None, op.payload, None, op.cb_id))
    except (TypeError, ValueError, OverflowError) as exc:
        _packer.reset()
        raise ActorError(ErrorCode.BAD_OP, f"op cannot cross a process boundary: {exc}") from exc
    return [_SINGLE_HEAD + row + _SINGLE_TAIL]


def encode_batch(ops: Sequence[Op]) -> list:
    """Encode ``ops`` into the frames of one zmq multipart message. Raises ActorError(BAD_OP)."""
    if len(ops) == 1:
        op = ops[0]
        if not op.frames and op.error is None:
            return _encode_single(op)
    rows = []
    small: list = []
    large: list = []
    for op in ops:
        spec = None
        if op.frames:
            spec = []
            for frame in op.frames:
                size = frame.nbytes if isinstance(frame, memoryview) else len(frame)
                if size >= ZERO_COPY_MIN:
                    spec.append(-1)
                    large.append(frame)
                else:
                    spec.append(size)
                    small.append(frame)
        err = op.error
        rows.append([op.target, op.qid, op.type, op.flags, op.version, op.priority, op.reply_to, op.req_id,
                     op.sender, (err.code, err.message) if err is not None else None, op.payload, spec,
                     op.cb_id])
    try:
        header = _packer.pack([rows, bool(small), len(large)])
    except (TypeError, ValueError, OverflowError) as exc:
        raise ActorError(ErrorCode.BAD_OP, f"op cannot cross a process boundary: {exc}") from exc
    frames: list = [header]
    if small:
        frames.append(small[0] if len(small) == 1 else b"".join(small))
    if large:
        frames.extend(large)
    return frames


def _view(frame: Any) -> Any:
    return frame if isinstance(frame, _BYTES_LIKE) else frame.buffer


def decode_header(head: bytes) -> tuple[list, bool, int]:
    """Unpack a batch header: (rows, has_blob, number of large frames). The receiver then knows exactly
    how many frames follow, without asking the socket."""
    return msgpack.unpackb(head, raw=False, use_list=True, strict_map_key=False)


def decode_batch(frames: Sequence[Any], header: tuple[list, bool, int] | None = None) -> list[Op]:
    """Decode one multipart message. Frames may be bytes or zmq.Frame (kept zero-copy as memoryview)."""
    if header is None:
        head = frames[0]
        header = decode_header(head if isinstance(head, _BYTES_LIKE) else head.bytes)
    rows, has_blob, _ = header
    index = 1
    blob = None
    cursor = 0
    if has_blob:
        blob = memoryview(_view(frames[1]))
        index = 2
    ops = []
    new = Op.__new__
    for target, qid, op_type, flags, version, priority, reply_to, req_id, sender, err, payload, spec, cb_id \
            in rows:
        op = new(Op)
        op.type = op_type
        op.payload = payload
        if spec:
            op_frames = []
            for size in spec:
                if size >= 0:
                    op_frames.append(blob[cursor:cursor + size])
                    cursor += size
                else:
                    op_frames.append(_view(frames[index]))
                    index += 1
            op.frames = op_frames
        else:
            op.frames = []
        op.flags = flags
        op.version = version
        op.priority = priority
        op.reply_to = tuple(reply_to) if reply_to is not None else None
        op.error = OpError(err[0], err[1]) if err is not None else None
        op.target = target
        op.qid = qid
        op.req_id = req_id
        op.sender = sender
        op.cb_id = cb_id
        op.serve = None
        op.replied = False
        ops.append(op)
    return ops
