"""Progress display for long CLI runs (``perf consume``, ``cat -P`` of a file): a rich bar, or one plain line.

Runs in: the user's shell process. Owns only drawing: callers say how far they are; this module decides
whether anything is drawn at all (only when the stream is a terminal, never in a pipe) and how. ``rich`` is
an optional dependency (``pip install kqactors[cli]``); without it a carriage-return line is drawn instead.
"""

from __future__ import annotations

import time
from typing import Any, TextIO

__all__ = ["Progress", "make_progress", "rich_available"]


def rich_available() -> bool:
    try:
        import rich.progress  # noqa: F401
    except ImportError:
        return False
    return True


class Progress:
    """No-op progress (the pipe case); the drawing kinds below override ``advance`` and ``close``."""

    kind = "none"

    def advance(self, amount: float = 1.0) -> None:
        """Add ``amount`` (items or bytes) to what is done."""

    def close(self) -> None:
        """Stop drawing and leave the terminal on a fresh line."""

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _PlainProgress(Progress):
    kind = "plain"

    def __init__(self, stream: TextIO, total: float | None, label: str, unit: str, interval: float = 0.5) -> None:
        self._stream, self._total, self._label, self._unit = stream, total, label, unit
        self._done = 0.0
        self._interval = interval
        self._next = 0.0
        self._drawn = False
        self._started = time.monotonic()

    def advance(self, amount: float = 1.0) -> None:
        self._done += amount
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self._interval
            self._draw(now)

    def _draw(self, now: float) -> None:
        elapsed = max(now - self._started, 1e-9)
        total = f"/{self._total:,.0f}" if self._total else ""
        percent = f" ({100.0 * self._done / self._total:5.1f}%)" if self._total else ""
        self._stream.write(f"\r{self._label}: {self._done:,.0f}{total} {self._unit}{percent}  "
                           f"{self._done / elapsed:,.0f} {self._unit}/s ")
        self._stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self._drawn:
            self._draw(time.monotonic())
            self._stream.write("\n")
            self._stream.flush()
            self._drawn = False


class _RichProgress(Progress):
    kind = "rich"

    def __init__(self, stream: TextIO, total: float | None, label: str, unit: str) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        columns: list[Any] = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                              TextColumn(unit), TimeElapsedColumn()]
        self._bar = Progress(*columns, console=Console(file=stream), transient=False)
        self._task = self._bar.add_task(label, total=total)
        self._bar.start()
        self._closed = False

    def advance(self, amount: float = 1.0) -> None:
        self._bar.advance(self._task, amount)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._bar.stop()


def make_progress(stream: TextIO, total: float | None, label: str, unit: str = "msgs", *,
                  enabled: bool = True, prefer_rich: bool = True) -> Progress:
    """A progress display on ``stream``: nothing unless ``enabled`` and ``stream`` is a terminal; rich's
    bar when installed (and ``prefer_rich``), else a plain carriage-return line."""
    isatty = getattr(stream, "isatty", None)
    if not enabled or not callable(isatty) or not isatty():
        return Progress()
    if prefer_rich and rich_available():
        return _RichProgress(stream, total, label, unit)
    return _PlainProgress(stream, total, label, unit)


class _RichProduceProgress:
    """``perf produce``'s progress (ProgressLine's interface) as a rich bar of delivery reports."""

    def __init__(self, stream: TextIO, total: int) -> None:
        self._bar = _RichProgress(stream, total, "delivered", "msgs")
        self.enabled = True

    def update(self, produced: int, stats: Any, force: bool = False) -> None:
        self._bar._bar.update(self._bar._task, completed=stats.reported)  # noqa: SLF001 - our own wrapper

    def finish(self) -> None:
        self._bar.close()


def produce_progress(stream: TextIO, total: int, enabled: bool) -> Any:
    """``perf produce``'s progress: a rich bar on a terminal when rich is installed, else perf_stats'
    carriage-return ProgressLine (which also draws only on a terminal)."""
    from kqactors.cli.perf_stats import ProgressLine

    isatty = getattr(stream, "isatty", None)
    on_terminal = enabled and callable(isatty) and isatty()
    if on_terminal and rich_available():
        return _RichProduceProgress(stream, total)
    return ProgressLine(stream, total, enabled=on_terminal)
