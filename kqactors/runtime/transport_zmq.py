"""Runs in: app and host processes. Owns the ZeroMQ transport: the private run directory, ipc endpoints,
the PULL inbox each process binds and the PUSH outboxes it keeps per destination.

One zmq multipart message carries one batch of ops (see op.py's codec): the msgpack header, a blob of the
small bytes frames, then each large frame sent zero-copy. The header tells the receiver how many frames
follow.
"""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Sequence

import zmq

from .op import ZERO_COPY_MIN, Op, decode_batch, decode_header, encode_batch

MAX_IPC_PATH = 100  # sun_path is 108 bytes on Linux; keep a margin
DRAIN_LIMIT = 256  # messages taken from the inbox per loop turn
_RECONNECT_IVL_MS = 5  # an outbox's retry interval while its peer's inbox is not bound yet
_POLLIN = int(zmq.POLLIN)  # plain ints: IntFlag arithmetic runs in Python and costs microseconds
_EVENTS = int(zmq.EVENTS)
_NOBLOCK = int(zmq.NOBLOCK)
_RCVTIMEO = int(zmq.RCVTIMEO)
_RCVMORE = int(zmq.RCVMORE)
_get_ident = threading.get_ident
_monotonic = time.monotonic
_MAIN_THREAD = threading.main_thread().ident


def send_frames(sock: zmq.Socket, frames: Sequence) -> None:
    """Send one multipart message; large frames go zero-copy, small ones are copied (below ZERO_COPY_MIN
    copying is cheaper than pyzmq's zero-copy machinery: a Frame object released by a background thread)."""
    if len(frames) == 1:
        sock.send(frames[0])
        return
    last = len(frames) - 1
    send = sock.send
    for i, frame in enumerate(frames):
        size = frame.nbytes if isinstance(frame, memoryview) else len(frame)
        send(frame, zmq.SNDMORE if i < last else 0, copy=size < ZERO_COPY_MIN)


def recv_batch(sock: zmq.Socket, flags: int = _NOBLOCK) -> list[Op]:
    """Receive and decode one batch (without blocking unless ``flags`` is 0; raises zmq.Again). The header
    says how many frames follow, so no RCVMORE round trips; the blob and large frames are received
    zero-copy."""
    head = sock.recv(flags)  # an interrupt (Ctrl+C) while this blocks takes nothing off the socket
    try:
        header = decode_header(head)
        extra = (1 if header[1] else 0) + header[2]
        if not extra:
            return decode_batch((head,), header)
        frames = [head]
        for _ in range(extra):
            frames.append(sock.recv(copy=False))
        return decode_batch(frames, header)
    except BaseException:
        # Interrupted (KeyboardInterrupt) or failed after the first frame was taken: drop the rest of this
        # message too, or the next receive would read one of its frames as a header.
        _skip_rest(sock)
        raise


def _skip_rest(sock: zmq.Socket) -> None:
    try:
        while sock.getsockopt(_RCVMORE):
            sock.recv(_NOBLOCK, copy=False)
    except zmq.ZMQError:
        pass


# libzmq's context option ZMQ_ZERO_COPY_RECV (zmq.h lists it among the draft context options; a stable build
# takes it all the same, and pyzmq has no name for it).
_ZERO_COPY_RECV = 10


def new_context() -> zmq.Context:
    """The ZeroMQ context of a process of the runtime (app, host, shared runtime).

    It turns off libzmq's zero-copy receive of small messages. With it on, every message up to its read buffer
    (~8 KiB) is a view into a shared ~18 KiB block, which stays allocated until the last message read into it
    is closed. A host that holds received batches until the broker answers (the producer's main host holds
    each XMIT until its Produce response) then kept ~18 KiB per 2.7 KiB batch: the soak's producer host held
    31.7 MB for 4.7 MB of batches. Off, each small message is copied into its own buffer by libzmq's I/O
    thread; messages over the read buffer were never copied and still are not."""
    context = zmq.Context()
    try:
        context.set(_ZERO_COPY_RECV, 0)
    except zmq.ZMQError:  # a libzmq without the option: the memory above, nothing else
        pass
    return context


def make_run_dir(prefix: str = "kqactors-") -> str:
    """A private directory (mode 0700) for this runtime's ipc sockets (the app's: tempfile, like shutil below,
    is imported where used, so a host's start does not load it and shutil's codec modules)."""
    import tempfile

    base = tempfile.gettempdir()
    if len(base) > MAX_IPC_PATH - 40:
        base = "/tmp"
    path = tempfile.mkdtemp(prefix=prefix, dir=base)
    os.chmod(path, 0o700)
    return path


def remove_run_dir(path: str) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def ipc_path(run_dir: str, key: str) -> str:
    """The file system path of ``key``'s socket in ``run_dir`` (what ``endpoint`` names, and what is unlinked)."""
    path = f"{run_dir}/{key.replace('/', '_')}.sock"
    if len(path) > MAX_IPC_PATH:
        raise ValueError(f"ipc path too long for a unix socket: ipc://{path}")
    return path


def endpoint(run_dir: str, key: str) -> str:
    return f"ipc://{ipc_path(run_dir, key)}"


class ZmqInbox:
    """The PULL socket a process binds; everyone who talks to it connects a PUSH."""

    def __init__(self, context: zmq.Context, run_dir: str, key: str) -> None:
        self.key = key
        self.socket = context.socket(zmq.PULL)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.RCVHWM, 0)
        self.socket.bind(endpoint(run_dir, key))
        self._rcvtimeo = -1
        self._fd: int | None = None  # ZMQ_FD, read on the first wait_readable()

    def poll(self, timeout_ms: int) -> bool:
        return bool(zmq.zmq_poll([(self.socket, _POLLIN)], timeout_ms))

    def wait_readable(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` (microsecond precision) for a message; takes nothing off the socket.

        libzmq counts its waits (zmq_poll, RCVTIMEO) in whole milliseconds: a caller whose deadline is
        0.3 ms away either returned at once or overshot by 0.7 ms (a consume() in a produce loop returned
        its messages up to a millisecond late). Here select() waits on the socket's notification fd, which
        becomes readable whenever its events may have changed, so ZMQ_EVENTS is read again each time
        (reading it also re-arms the fd). Interruptible on the main thread, like zmq_poll."""
        sock = self.socket
        fd = self._fd
        if fd is None:
            fd = self._fd = sock.getsockopt(zmq.FD)
        deadline = _monotonic() + timeout_s
        while True:
            if sock.getsockopt(_EVENTS) & _POLLIN:
                return True
            remaining = deadline - _monotonic()
            if remaining <= 0:
                return False
            select.select((fd,), (), (), remaining)

    def recv_within(self, timeout_ms: int, limit: int = DRAIN_LIMIT) -> list[list[Op]]:
        """Wait up to ``timeout_ms`` for a message and take up to ``limit`` waiting ones; [] on timeout.

        The hot path of a process that waits on this socket alone: one blocking recv bounded by
        RCVTIMEO (set only when it changes) costs one libzmq call instead of zmq_poll followed by recv,
        which measured several microseconds of CPU less per round trip."""
        sock = self.socket
        if timeout_ms == 0:  # a busy loop's turn: plain non-blocking, RCVTIMEO left alone
            flags = _NOBLOCK
        elif _get_ident() == _MAIN_THREAD:
            # The main thread is where Ctrl+C raises KeyboardInterrupt, and pyzmq checks for signals after a
            # receive that succeeded too: a message taken by a blocking recv would be dropped with the
            # interrupt. So it waits in zmq_poll (interruptible, takes nothing) and receives without
            # blocking; other threads never see the interrupt and keep the one-call blocking recv.
            if not zmq.zmq_poll([(sock, _POLLIN)], timeout_ms):
                return []
            flags = _NOBLOCK
        else:
            flags = 0
            if timeout_ms != self._rcvtimeo:
                sock.setsockopt(_RCVTIMEO, timeout_ms)
                self._rcvtimeo = timeout_ms
        try:
            batches = [recv_batch(sock, flags)]
        except zmq.Again:
            return []
        for _ in range(limit - 1):
            if not sock.getsockopt(_EVENTS) & _POLLIN:
                break
            try:
                batches.append(recv_batch(sock))
            except zmq.Again:
                break
        return batches

    def recv_batches(self, limit: int = DRAIN_LIMIT) -> list[list[Op]]:
        """Take up to ``limit`` waiting messages without blocking (call after a poll said readable)."""
        return self.recv_within(0, limit)

    def close(self) -> None:
        self.socket.close(linger=0)


class ZmqOutbox:
    """PUSH sockets, one per destination endpoint, connected lazily. Never blocks (no high-water mark):
    backpressure is the Kafka layer's job, with explicit credits."""

    def __init__(self, context: zmq.Context, run_dir: str) -> None:
        self._context = context
        self._run_dir = run_dir
        self._sockets: dict[str, zmq.Socket] = {}

    def _socket(self, key: str) -> zmq.Socket:
        sock = self._sockets.get(key)
        if sock is None:
            sock = self._context.socket(zmq.PUSH)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.SNDHWM, 0)
            # A host that is still starting has not bound its inbox yet: retry the connection often (the
            # default 100 ms would delay every op queued meanwhile); ops wait in the socket until then.
            sock.setsockopt(zmq.RECONNECT_IVL, _RECONNECT_IVL_MS)
            sock.connect(endpoint(self._run_dir, key))
            self._sockets[key] = sock
        return sock

    def send(self, key: str, ops: Sequence[Op]) -> None:
        send_frames(self._socket(key), encode_batch(ops))

    def connect(self, key: str) -> bool:
        """Connect to ``key`` now, ahead of the first send (a shared runtime's attach: ZeroMQ's handshake,
        several hops between the two processes' I/O threads, then runs while nothing waits on it). False if
        a socket to ``key`` was there already."""
        if key in self._sockets:
            return False
        self._socket(key)
        return True

    def connected(self) -> list[str]:
        """The endpoints this outbox has a socket to."""
        return list(self._sockets)

    def reset(self, key: str) -> None:
        """Drop the socket to ``key`` (its process died): ops queued for the dead peer are discarded."""
        sock = self._sockets.pop(key, None)
        if sock is not None:
            sock.close(linger=0)

    def close(self) -> None:
        for sock in self._sockets.values():
            sock.close(linger=0)
        self._sockets.clear()
