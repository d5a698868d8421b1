"""A file source: its paths and globs, one ``FileTail`` per matched file, read and emitted on the worker's loop.

Runs in: the worker processes (a task on their asyncio loop). Owns the source's tails (globs are evaluated again
every ``glob_interval_s``; a file found later starts at its beginning), the batches read but not yet queued in
the producer (at most one read per tail: reading stops while the producer is full), the rate limit, and
saving the tails' states. Idle files are checked every ``poll_interval_ms`` (appends, rotation, truncation).
The tails are read in turn, one read at a time, and the next read waits until the last one is queued: a source
holds at most one read (``read_bytes``) outside the producer however many files it follows.
"""

from __future__ import annotations

import asyncio
import glob
import logging
import os
from collections import deque
from collections.abc import Callable
from typing import Any

from kqactors.ingest.checkpoint import StateStore
from kqactors.ingest.emit import Batch, SourceRuntime
from kqactors.ingest.tail import FileTail, Inodes

__all__ = ["FileSource"]

_log = logging.getLogger("kqactors.ingest.filesource")


def _is_glob(path: str) -> bool:
    return glob.has_magic(path)


class FileSource:
    """Follows a file source's paths; ``run`` until ``stop`` is set (or, with --once, every file is read)."""

    def __init__(self, runtime: SourceRuntime, store: StateStore, settings: dict[str, Any],
                 clock: Callable[[], float]) -> None:
        self.rt = runtime
        self.store = store
        self.settings = settings
        self.clock = clock
        self.patterns = [os.path.abspath(os.path.expanduser(p)) for p in runtime.spec.paths]
        self.poll_s = int(settings["poll_interval_ms"]) / 1000.0
        self.glob_s = float(settings["glob_interval_s"])
        self.once = bool(settings.get("once"))
        self.tails: dict[str, FileTail] = {}
        self.inodes = Inodes()
        self.pending: deque[Batch] = deque()
        self._scanned = False
        self._turn = 0
        self._next_scan = 0.0

    # ---- discovery ---------------------------------------------------------------------------------------
    def scan(self) -> None:
        """Literal paths always have a tail (their file may appear later); glob matches get one when found.
        Paths with a state file are opened first, so a rotated file they are still finishing is theirs."""
        found: list[str] = []
        for pattern in self.patterns:
            if _is_glob(pattern):
                found.extend(p for p in sorted(glob.glob(pattern)) if os.path.isfile(p))
            else:
                found.append(pattern)
        fresh = [p for p in dict.fromkeys(found) if p not in self.tails]
        fresh.sort(key=lambda p: not os.path.exists(self.store.file_for(p)))
        for path in fresh:
            self.tails[path] = FileTail(path, self.rt, self.store, self.settings, self.inodes, self.clock,
                                        new=self._scanned)
        for path, tail in list(self.tails.items()):
            if _is_glob_member(path, self.patterns) and not tail.streams and not os.path.exists(path):
                self.store.remove(path)      # a rotated file deleted: nothing left to remember
                del self.tails[path]
        self._scanned = True
        self._next_scan = self.clock() + self.glob_s

    # ---- the loop ----------------------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        self.scan()
        emitter = self.rt.emitter
        bucket = self.rt.bucket
        while not stop.is_set():
            if self.pending:
                batch = self.pending[0]
                if batch.next == 0 and bucket.rate:
                    delay = bucket.delay(len(batch.values))
                    if delay > 0:
                        await _sleep_unless(stop, delay)
                if not emitter.emit(batch):
                    await emitter.wait_room(0.1)
                    continue
                self.pending.popleft()
                continue
            read_any = False
            tails = list(self.tails.values())
            for k in range(len(tails)):          # one read at a time, the tails in turn
                tail = tails[(self._turn + k) % len(tails)]
                batches = tail.read()
                if batches:
                    self.pending.extend(batches)
                    self._turn = (self._turn + k + 1) % len(tails)
                    read_any = True
                    break
            if read_any:
                await asyncio.sleep(0)
                continue
            for tail in list(self.tails.values()):
                self.pending.extend(tail.check())
            if self.pending:
                continue
            if self.once:
                if all(t.finished for t in self.tails.values()):
                    self.rt.finished = True
                    return
                await asyncio.sleep(0.001)
                continue
            if self.clock() >= self._next_scan and any(_is_glob(p) for p in self.patterns):
                self.scan()
            await _sleep_unless(stop, self.poll_s)

    # ---- state and numbers ---------------------------------------------------------------------------------
    def save(self, now: bool = False) -> None:
        """Checkpoint every tail: hand the states to the writer thread, or (``now``) write them before returning."""
        for tail in self.tails.values():
            try:
                tail.save() if now else tail.submit()
            except OSError as exc:
                self.rt.stats.error("state_write")
                _log.error("cannot write the state of %s: %s", tail.path, exc,
                           extra={"event": "state_write_error", "source": self.rt.name})

    def gauges(self) -> None:
        self.rt.stats.lag_bytes = sum(t.lag_bytes for t in self.tails.values())

    def close(self) -> None:
        for tail in self.tails.values():
            tail.close()


def _is_glob_member(path: str, patterns: list[str]) -> bool:
    return path not in patterns


async def _sleep_unless(stop: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds`` or until ``stop`` is set."""
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except asyncio.TimeoutError:
        pass
