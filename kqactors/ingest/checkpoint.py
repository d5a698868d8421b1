"""Delivery tracking in read order, and the state files that keep a file's position across restarts.

Runs in: the worker processes (the supervisor only takes the state directory's lock). Owns three things:

- ``Chunk``: the lines of one read (at most ``chunk_lines``), produced with the chunk's bound ``ack`` as their
  ``on_delivery``: one callback object per chunk rather than per line. ``left`` counts the lines whose delivery
  report is still due; the chunk is done when it reaches 0.
- ``StreamTracker``: the chunks of one open file in read order. Its ``committed`` position only moves over a
  prefix of done chunks, so the checkpoint is always a position whose every earlier line was delivered, even
  when the partitions' reports come back out of order. A restart re-sends what lies past it: the lines in flight
  and, at most, the delivered lines of the chunks after the first undelivered one (``chunk_lines`` bounds that).
- ``StateStore``: one small JSON file per followed path (``<state_dir>/file-<hash>.json``) holding the identity
  (device, inode, a CRC of the first bytes) and the committed position of each stream still tracked for that
  path (a renamed file being finished, then the current one), written atomically (temp file + rename, fsync when
  asked) only when it changed, by a writer thread in the worker (an fsync takes milliseconds; a late write is
  safe, never ahead of the deliveries); and ``StateDirLock``, one daemon per state directory.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

__all__ = ["Chunk", "StreamTracker", "StateStore", "StateDirLock", "StateDirBusy", "StreamState"]

_log = logging.getLogger("kqactors.ingest.checkpoint")


class Chunk:
    """Lines of one read on their way to Kafka; ``ack`` is their delivery callback."""

    __slots__ = ("left", "lines", "nbytes", "failed", "end", "started", "tracker", "emitter", "on_done", "source")

    def __init__(self, emitter: Any, source: Any, lines: int, nbytes: int = 0, end: int = 0,
                 tracker: StreamTracker | None = None, on_done: Callable[[Chunk], Any] | None = None,
                 started: float = 0.0) -> None:
        self.left = lines
        self.lines = lines
        self.nbytes = nbytes
        self.failed = 0
        self.end = end
        self.started = started
        self.tracker = tracker
        self.emitter = emitter
        self.on_done = on_done
        self.source = source

    def ack(self, err: Any, msg: Any) -> None:
        """on_delivery of each of the chunk's lines (called from Producer.poll())."""
        if err is None:
            self.left -= 1
            if not self.left:
                self.emitter.chunk_done(self)
        else:
            self.emitter.delivery_failed(self, err, msg)

    def settle(self, count: int = 1) -> None:
        """``count`` lines are finished without a successful delivery (dropped after an error)."""
        self.failed += count
        self.left -= count
        if not self.left:
            self.emitter.chunk_done(self)


class StreamTracker:
    """Committed position of one open file: the end of the longest prefix of done chunks, in read order."""

    __slots__ = ("committed", "_pending", "on_commit")

    def __init__(self, committed: int, on_commit: Callable[[], Any] | None = None) -> None:
        self.committed = committed
        self._pending: deque[Chunk] = deque()
        self.on_commit = on_commit

    def add(self, chunk: Chunk) -> None:
        """Register a chunk before any of its lines is produced (read order = registration order)."""
        chunk.tracker = self
        self._pending.append(chunk)

    def done(self, chunk: Chunk) -> None:
        pending = self._pending
        moved = False
        while pending and not pending[0].left:
            self.committed = pending.popleft().end
            moved = True
        if moved and self.on_commit is not None:
            self.on_commit()

    @property
    def in_flight(self) -> int:
        """Lines whose delivery report is still due (pending chunks' remaining lines)."""
        return sum(c.left for c in self._pending)

    @property
    def idle(self) -> bool:
        return not self._pending


class StreamState:
    """One tracked stream of a path as stored: identity (device, inode, CRC of the first bytes), committed
    position, and ``done`` for a closed, fully delivered stream kept for de-duplication."""

    __slots__ = ("dev", "ino", "pos", "head_len", "head_crc", "done")

    def __init__(self, dev: int, ino: int, pos: int, head_len: int = 0, head_crc: int = 0,
                 done: bool = False) -> None:
        self.dev, self.ino, self.pos, self.head_len, self.head_crc = dev, ino, pos, head_len, head_crc
        self.done = done

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"dev": self.dev, "ino": self.ino, "pos": self.pos, "head_len": self.head_len,
                               "head_crc": self.head_crc}
        if self.done:
            out["done"] = True
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StreamState:
        return cls(int(data["dev"]), int(data["ino"]), int(data["pos"]), int(data.get("head_len", 0)),
                   int(data.get("head_crc", 0)), bool(data.get("done", False)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StreamState) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        return f"StreamState({self.to_dict()})"


class StateStore:
    """Per-path state files in ``directory``; ``save`` writes only what changed."""

    def __init__(self, directory: str, fsync: bool = True) -> None:
        self.directory = directory
        self.fsync = fsync
        self._written: dict[str, str] = {}       # path → body on disk
        self._submitted: dict[str, str] = {}     # path → body last handed to the writer (or written)
        self._pending: dict[str, str] = {}       # path → body the writer thread has yet to write
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._idle = threading.Condition(self._lock)
        self._busy = False
        self._closing = False
        self._thread: threading.Thread | None = None
        self.errors = 0
        os.makedirs(directory, mode=0o750, exist_ok=True)

    def file_for(self, path: str) -> str:
        digest = hashlib.sha1(path.encode("utf-8", "surrogateescape")).hexdigest()[:20]
        return os.path.join(self.directory, f"file-{digest}.json")

    def load(self, path: str) -> list[StreamState]:
        """The streams saved for ``path`` (oldest first); [] when none or the file is unreadable."""
        return self.load_with_time(path)[0]

    def load_with_time(self, path: str) -> tuple[list[StreamState], float]:
        """The streams saved for ``path`` and when they were written (wall clock; 0.0 when unknown)."""
        try:
            with open(self.file_for(path), encoding="utf-8") as f:
                data = json.load(f)
            if data.get("path") != path:
                return [], 0.0
            return [StreamState.from_dict(s) for s in data.get("streams", [])], float(data.get("updated", 0.0))
        except (OSError, ValueError, KeyError, TypeError):
            return [], 0.0

    def remove(self, path: str) -> None:
        """Forget ``path`` (its file is gone and nothing of it is tracked any more)."""
        with self._lock:
            self._written.pop(path, None)
            self._submitted.pop(path, None)
            self._pending.pop(path, None)
        try:
            os.unlink(self.file_for(path))
        except FileNotFoundError:
            pass

    def _body(self, path: str, streams: list[StreamState]) -> str:
        return json.dumps({"version": 1, "path": path, "streams": [s.to_dict() for s in streams]}, sort_keys=True)

    def save(self, path: str, streams: list[StreamState]) -> bool:
        """Write ``path``'s streams now if they differ from the last write; True when written."""
        body = self._body(path, streams)
        with self._lock:
            if self._written.get(path) == body:
                return False
            self._pending.pop(path, None)
            self._submitted[path] = body
        self._write(path, body)
        return True

    def submit(self, path: str, streams: list[StreamState]) -> None:
        """Have the writer thread write ``path``'s streams (the latest submitted wins); synchronous without it."""
        if self._thread is None:
            self.save(path, streams)
            return
        body = self._body(path, streams)
        with self._lock:
            if self._submitted.get(path) == body:
                return
            self._submitted[path] = body
            self._pending[path] = body
            self._wake.notify()

    def start_writer(self) -> None:
        """Write submitted states on a thread: a checkpoint with fsync takes milliseconds, which the worker's
        loop should not wait for. A late write is safe: a saved position is never past what was delivered."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._writer, name="kqactors-ingest-state", daemon=True)
            self._thread.start()

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every submitted state is written (or ``timeout``)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._pending or self._busy:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._idle.wait(remaining)
        return True

    def close(self) -> None:
        self.flush()
        with self._lock:
            self._closing = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join(5.0)
            self._thread = None

    def _writer(self) -> None:
        while True:
            with self._lock:
                while not self._pending and not self._closing:
                    self._wake.wait()
                if self._closing and not self._pending:
                    return
                batch, self._pending = self._pending, {}
                self._busy = True
            try:
                for path, body in batch.items():
                    try:
                        self._write(path, body)
                    except OSError as exc:
                        self.errors += 1
                        with self._lock:
                            self._submitted.pop(path, None)   # written again at the next checkpoint
                        _log.error("cannot write the state of %s: %s", path, exc,
                                   extra={"event": "state_write_error", "path": path})
            finally:
                with self._lock:
                    self._busy = False
                    self._idle.notify_all()

    def _write(self, path: str, body: str) -> None:
        target = self.file_for(path)
        tmp = f"{target}.tmp.{os.getpid()}.{threading.get_ident()}"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(body[:-1] + f', "updated": {time.time():.3f}}}\n')
            if self.fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, target)
        if self.fsync:
            dir_fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        with self._lock:
            self._written[path] = body


class StateDirBusy(RuntimeError):
    """Another ingest daemon holds the state directory."""


class StateDirLock:
    """An exclusive flock on ``<state_dir>/ingest.lock``, held for the daemon's life (its workers inherit the
    descriptor, so the lock lasts until the last of them is gone)."""

    def __init__(self, directory: str) -> None:
        os.makedirs(directory, mode=0o750, exist_ok=True)
        self.path = os.path.join(directory, "ingest.lock")
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o640)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            raise StateDirBusy(f"another ingest daemon uses the state directory {directory}") from None
        os.ftruncate(self.fd, 0)
        os.write(self.fd, f"{os.getpid()}\n".encode())

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
