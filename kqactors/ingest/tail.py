"""One file path followed across appends, rename rotation and copytruncate, resumed from its state file.

Runs in: the worker processes (synchronous; the asyncio file source in ``filesource`` drives it). Owns, for one
path, the open streams: the current file and any renamed ones still being finished, each with its read
position, the partial line after its last newline, and a ``StreamTracker`` of what was delivered.

- **Appends**: ``read`` returns the complete lines of one ``os.read`` (at most ``read_bytes``), cut into chunks
  of at most ``chunk_lines`` lines, each ending at a known byte position. A partial last line waits for its
  newline (in ``--once`` mode and when a renamed file is closed it goes out as it is).
- **Rename rotation** (``mv app.log app.log.1; new app.log``): at EOF the path's device/inode no longer match
  the open file. The old file is read to its end and kept open (``rotate_wait_s`` after its last data, for a
  writer that has not reopened yet); the new file is opened from its start. The path's state lists both.
- **copytruncate**: the file shrank below the read position, or its first bytes changed: reading restarts at 0.
  (Lines written between the copy and the truncation are lost by copytruncate itself.)
- **Restart**: the state names device, inode, a CRC of the first bytes and the committed position of each
  stream. The file now at the path resumes at its position if it is the same file (else it is new: from 0); a
  stream whose file was renamed while the daemon was down is found by inode in the same directory and finished
  first; files named after the path (``app.log.1``, ``app.log-20240501``, not compressed) that were modified after
  the last checkpoint and are not tracked were rotated more than once while it was down: they are read from their
  start (a known one from where it stopped). A file's first start without state begins at ``start_at``.
- Closed, fully delivered streams stay in the state for a while ("done" entries) so that a glob that also
  matches rotated names (``*.log*``) does not read ``app.log.1`` again from its start. ``Inodes`` (one per
  source) maps (device, inode) → the closed stream's state (its position is used only if the file's first bytes
  still match: inodes are reused), and → the tail that has it open: a file open in one tail is not opened by
  another.
"""

from __future__ import annotations

import errno
import logging
import os
import zlib
from collections.abc import Callable
from typing import Any

from kqactors.ingest.checkpoint import StateStore, StreamState, StreamTracker

__all__ = ["FileTail", "Inodes", "OpenStream", "HEAD_BYTES"]

_log = logging.getLogger("kqactors.ingest.tail")

HEAD_BYTES = 1024          # the fingerprint: CRC-32 of up to this many first bytes
_KEEP_DONE = 8             # closed streams remembered per path
_COMPRESSED = (".gz", ".bz2", ".xz", ".zst", ".lz4", ".zip", ".Z")


class Inodes:
    """A source's files by (device, inode): ``known`` positions of closed streams, ``claimed`` open ones."""

    def __init__(self) -> None:
        self.known: dict[tuple[int, int], StreamState] = {}
        self.claimed: dict[tuple[int, int], FileTail] = {}

    def claim(self, key: tuple[int, int], tail: FileTail) -> bool:
        owner = self.claimed.setdefault(key, tail)
        return owner is tail

    def release(self, key: tuple[int, int], tail: FileTail) -> None:
        if self.claimed.get(key) is tail:
            del self.claimed[key]


def _head(fd: int, length: int = HEAD_BYTES) -> tuple[int, int]:
    data = os.pread(fd, length, 0)
    return len(data), zlib.crc32(data)


class OpenStream:
    """One open file (identity, positions, partial line, tracker)."""

    __slots__ = ("fd", "dev", "ino", "read_pos", "carry", "tracker", "head_len", "head_crc", "size",
                 "last_data", "draining", "eof")

    def __init__(self, fd: int, st: os.stat_result, pos: int, now: float) -> None:
        self.fd = fd
        self.dev, self.ino = st.st_dev, st.st_ino
        self.read_pos = pos          # bytes before it are whole lines handed out
        self.carry = b""             # bytes read after read_pos (a partial line)
        self.tracker = StreamTracker(pos)
        self.head_len, self.head_crc = _head(fd)
        self.size = st.st_size
        self.last_data = now
        self.draining = False        # renamed/deleted: finish it, then close
        self.eof = False

    @property
    def file_pos(self) -> int:
        return self.read_pos + len(self.carry)

    def state(self) -> StreamState:
        if self.head_len < HEAD_BYTES and self.fd >= 0 and self.size > self.head_len:
            self.head_len, self.head_crc = _head(self.fd)
        return StreamState(self.dev, self.ino, self.tracker.committed, self.head_len, self.head_crc)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class FileTail:
    """Follows one path; ``source`` is its SourceRuntime (make_batch, stats)."""

    def __init__(self, path: str, source: Any, store: StateStore, settings: dict[str, Any],
                 inodes: Inodes, clock: Callable[[], float], new: bool = False) -> None:
        self.path = path
        self.source = source
        self.store = store
        self.inodes = inodes
        self.clock = clock
        self.read_bytes = int(settings["read_bytes"])
        self.chunk_lines = int(settings["chunk_lines"])
        self.rotate_wait_s = float(settings["rotate_wait_s"])
        self.once = bool(settings.get("once"))
        self.max_line = int(source.spec.max_line_bytes)
        self.streams: list[OpenStream] = []        # draining ones first, then the current one (if open)
        self.done: list[StreamState] = []          # closed and delivered (kept for de-duplication)
        self.finished = False                      # --once: read to the end
        self._start(new)

    # ---- opening -----------------------------------------------------------------------------------------
    @property
    def current(self) -> OpenStream | None:
        if self.streams and not self.streams[-1].draining:
            return self.streams[-1]
        return None

    def _open(self, path: str, pos: int | None, expect: StreamState | None = None) -> OpenStream | None:
        """Open ``path`` at ``pos`` (None: where a closed stream of the same file stopped, else 0); None if it
        is gone, is not the ``expect``ed file, or is open in another tail."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ENOTDIR):
                self.source.stats.error("open")
                _log.warning("cannot open %s: %s", path, exc.strerror,
                             extra={"event": "open_error", "path": path, "source": self.source.name})
            return None
        st = os.fstat(fd)
        if expect is not None and (st.st_dev, st.st_ino) != (expect.dev, expect.ino):
            os.close(fd)
            return None
        if expect is not None and expect.head_len and \
                _head(fd, expect.head_len) != (expect.head_len, expect.head_crc):
            os.close(fd)
            return None
        key = (st.st_dev, st.st_ino)
        if not self.inodes.claim(key, self):
            os.close(fd)
            return None
        if pos is None:
            known = self.inodes.known.get(key)
            same = known is not None and (not known.head_len or
                                          _head(fd, known.head_len) == (known.head_len, known.head_crc))
            pos = known.pos if same and known is not None else 0
        if pos > st.st_size:
            pos = 0
        if pos:
            os.lseek(fd, pos, os.SEEK_SET)
        return OpenStream(fd, st, pos, self.clock())

    def _start(self, new: bool) -> None:
        saved, saved_at = self.store.load_with_time(self.path)
        self.done = [s for s in saved if s.done]
        live = [s for s in saved if not s.done]
        try:
            st = os.stat(self.path)
        except OSError:
            st = None
        current = None
        for s in live:
            if st is not None and (st.st_dev, st.st_ino) == (s.dev, s.ino):
                current = self._open(self.path, s.pos, s)
                if current is None:  # same inode, other content: copytruncated or reused while we were down
                    current = self._open(self.path, 0)
                continue
            rotated = self._find_by_inode(s)
            stream = self._open(rotated, s.pos, s) if rotated else None
            if stream is None:
                _log.warning("lost %s: its file (inode %d) is gone; lines after position %d were not sent",
                             self.path, s.ino, s.pos,
                             extra={"event": "stream_lost", "path": self.path, "source": self.source.name})
                self.source.stats.error("stream_lost")
                continue
            stream.draining = True
            self.streams.append(stream)
            _log.info("finishing %s (renamed while stopped) from %d", rotated, s.pos,
                      extra={"event": "resume_rotated", "path": rotated, "source": self.source.name})
        for s in self.done:
            self.inodes.known.setdefault((s.dev, s.ino), s)
        if saved and saved_at:
            skip = {(s.dev, s.ino) for s in self.streams} | ({(st.st_dev, st.st_ino)} if st is not None else set())
            for sibling in self._rotated_siblings(saved_at, skip):
                stream = self._open(sibling, None)
                if stream is not None:
                    stream.draining = True
                    self.streams.append(stream)
                    _log.info("reading %s (rotated while stopped) from %d", sibling, stream.read_pos,
                              extra={"event": "resume_rotated", "path": sibling, "source": self.source.name})
        if current is None and st is not None:
            start_pos: int | None = None
            if not saved and not new and self.source.spec.start_at == "end":
                start_pos = st.st_size
            current = self._open(self.path, start_pos)
        if current is not None:
            self.streams.append(current)

    def _rotated_siblings(self, since: float, skip: set[tuple[int, int]]) -> list[str]:
        """Files named after the path (``app.log.1``, ``app.log-20240501``; not compressed ones) that were
        modified after the last checkpoint and are not tracked: rotated more than once while the daemon was
        stopped, so never seen. Oldest first."""
        directory, base = os.path.split(self.path)
        found = []
        try:
            with os.scandir(directory or ".") as entries:
                for entry in entries:
                    name = entry.name
                    if name == base or not name.startswith(base) or name[len(base)] not in ".-_" or \
                            name.endswith(_COMPRESSED) or not entry.is_file(follow_symlinks=False):
                        continue
                    st = entry.stat(follow_symlinks=False)
                    if (st.st_dev, st.st_ino) in skip or st.st_mtime < since - 1.0:
                        continue
                    found.append((st.st_mtime, entry.path))
        except OSError:
            return []
        return [path for _, path in sorted(found)]

    def _find_by_inode(self, s: StreamState) -> str | None:
        directory = os.path.dirname(self.path) or "."
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    if entry.inode() == s.ino and entry.is_file(follow_symlinks=False):
                        if entry.stat(follow_symlinks=False).st_dev == s.dev:
                            return entry.path
        except OSError:
            return None
        return None

    # ---- reading -----------------------------------------------------------------------------------------
    def read(self) -> list[Any]:
        """Batches of the next read with data (draining streams first); [] when every stream is at its end."""
        for stream in self.streams:
            if stream.fd < 0:
                continue
            batches = self._read_stream(stream)
            if batches:
                return batches
        return []

    def _read_stream(self, stream: OpenStream) -> list[Any]:
        """Batches of the stream's next complete lines; [] at its end (``eof``) or on a read error. Reads on
        while a read brings no newline (a line longer than one read)."""
        while True:
            try:
                if stream.eof and stream.head_len:
                    # Data after an idle spell: a copytruncate that grew past our position shows in its first bytes.
                    self._truncated(stream, os.fstat(stream.fd))
                data = os.read(stream.fd, self.read_bytes)
            except OSError as exc:
                self.source.stats.error("read")
                _log.warning("read error on %s: %s", self.path, exc.strerror,
                             extra={"event": "read_error", "path": self.path, "source": self.source.name})
                return []
            if not data:
                stream.eof = True
                return []
            stream.eof = False
            stream.last_data = self.clock()
            end = stream.read_pos + len(stream.carry) + len(data)
            if end > stream.size:
                stream.size = end
            buf = stream.carry + data if stream.carry else data
            cut = buf.rfind(b"\n")
            if cut < 0:
                stream.carry = buf
                if len(buf) > self.max_line:
                    return self._split_long(stream)
                continue
            stream.carry = buf[cut + 1:]
            batches = self._batches(stream, buf[:cut].split(b"\n"), stream.read_pos)
            stream.read_pos += cut + 1
            if len(stream.carry) > self.max_line:
                batches.extend(self._split_long(stream))
            return batches

    def _batches(self, stream: OpenStream, lines: list[bytes], pos: int) -> list[Any]:
        out = []
        step = self.chunk_lines
        make = self.source.make_batch
        tracker = stream.tracker
        for start in range(0, len(lines), step):
            sub = lines[start:start + step] if len(lines) > step else lines
            nbytes = sum(map(len, sub))
            pos += nbytes + len(sub)
            out.append(make(sub, nbytes, pos, tracker))
        return out

    def _split_long(self, stream: OpenStream) -> list[Any]:
        """A line longer than max_line_bytes goes out in pieces of that size (counted)."""
        out = []
        while len(stream.carry) > self.max_line:
            piece, stream.carry = stream.carry[:self.max_line], stream.carry[self.max_line:]
            self.source.stats.error("line_split")
            stream.read_pos += len(piece)
            out.append(self.source.make_batch([piece], len(piece), stream.read_pos, stream.tracker))
        return out

    def _flush_partial(self, stream: OpenStream) -> list[Any]:
        """The bytes after the last newline, as a last line (a closed or --once file)."""
        if not stream.carry:
            return []
        line, stream.carry = stream.carry, b""
        stream.read_pos += len(line)
        return [self.source.make_batch([line], len(line), stream.read_pos, stream.tracker)]

    # ---- at the end of the data: rotation, truncation, closing -----------------------------------------
    def check(self) -> list[Any]:
        """Called when ``read`` found nothing: notice truncation, rotation, a new file; close drained streams.
        Returns batches of partial last lines that went out with a closed (or --once) file."""
        out: list[Any] = []
        now = self.clock()
        for stream in list(self.streams):
            if stream.fd < 0:
                continue
            try:
                st = os.fstat(stream.fd)
            except OSError:
                continue
            stream.size = st.st_size
            if self._truncated(stream, st):
                continue
            if stream.draining and now - stream.last_data >= self.rotate_wait_s:
                if self._read_stream(stream):  # pragma: no cover - data arrived between the read and here
                    continue
                out.extend(self._flush_partial(stream))
                self._close(stream)
                _log.info("closed %s (inode %d) after rotation", self.path, stream.ino,
                          extra={"event": "rotated_closed", "path": self.path, "source": self.source.name})
        current = self.current
        try:
            st = os.stat(self.path)
        except OSError:
            st = None
        if current is not None and (st is None or (st.st_dev, st.st_ino) != (current.dev, current.ino)):
            current.draining = True       # renamed or deleted: finish it, then the new file
            current.last_data = now
            _log.info("%s was rotated (%s)", self.path, "deleted or renamed" if st is None else "new file",
                      extra={"event": "rotated", "path": self.path, "source": self.source.name})
            out.extend(self._drain_now(current))
            current = None
        if current is None and st is not None and not any((s.dev, s.ino) == (st.st_dev, st.st_ino)
                                                          for s in self.streams if s.fd >= 0):
            stream = self._open(self.path, None)
            if stream is not None:
                self.streams.append(stream)
        if self.once and all(s.eof or s.fd < 0 for s in self.streams):
            for stream in self.streams:
                out.extend(self._flush_partial(stream))
            self.finished = True
        self._forget_delivered()
        return out

    def _drain_now(self, stream: OpenStream) -> list[Any]:
        """The renamed file's remaining complete lines, read before the new file is opened."""
        out = []
        while True:
            batches = self._read_stream(stream)
            if not batches and stream.eof:
                return out
            out.extend(batches)

    def _truncated(self, stream: OpenStream, st: os.stat_result) -> bool:
        shrunk = st.st_size < stream.file_pos
        rewritten = False
        if not shrunk and stream.head_len:
            rewritten = _head(stream.fd, stream.head_len) != (stream.head_len, stream.head_crc)
        if not (shrunk or rewritten):
            return False
        _log.info("%s was truncated (size %d, read up to %d): reading from its start", self.path, st.st_size,
                  stream.file_pos, extra={"event": "truncated", "path": self.path, "source": self.source.name})
        self.source.stats.error("truncated")
        os.lseek(stream.fd, 0, os.SEEK_SET)
        stream.read_pos = 0
        stream.carry = b""
        stream.tracker = StreamTracker(0)   # the old chunks finish into the old tracker, which nobody reads
        stream.head_len, stream.head_crc = _head(stream.fd)
        stream.size = st.st_size
        stream.eof = False
        return True

    def _forget_delivered(self) -> None:
        for stream in list(self.streams):
            if stream.fd < 0 and stream.tracker.idle:
                self.streams.remove(stream)
                state = stream.state()
                state.done = True
                self.done.append(state)
                self.inodes.known[(state.dev, state.ino)] = state
        del self.done[:-_KEEP_DONE]

    # ---- state and numbers --------------------------------------------------------------------------------
    def state(self) -> list[StreamState]:
        self._forget_delivered()
        return [*self.done, *(s.state() for s in self.streams)]

    def save(self) -> bool:
        return self.store.save(self.path, self.state())

    def submit(self) -> None:
        self.store.submit(self.path, self.state())

    @property
    def in_flight(self) -> int:
        return sum(s.tracker.in_flight for s in self.streams)

    @property
    def lag_bytes(self) -> int:
        return sum(max(0, s.size - s.tracker.committed) for s in self.streams)

    def _close(self, stream: OpenStream) -> None:
        stream.close()
        self.inodes.release((stream.dev, stream.ino), self)

    def close(self) -> None:
        for stream in self.streams:
            self._close(stream)
