"""The ingestion daemon's supervisor: worker processes, signals, reload, Prometheus and the progress line.

Runs in: the daemon's main process (``kqactors ingest``). Owns:

- the state directory's lock (one daemon per directory; the workers inherit it);
- one worker process per source group (``config.worker_groups``), started with ``python -m
  kqactors.ingest.worker``; each gets its spec on a pipe and sends JSON reports back on another. A worker that
  exits unasked is restarted after a back-off (1 s, doubling to 30 s) and resumes from its checkpoints; one
  that finished (``--once``, stdin at EOF) is not; one that says its configuration is unusable (exit 2) is not;
- signals: SIGTERM/SIGINT drain (workers flush and checkpoint; exit 0), SIGHUP re-reads the configuration and
  restarts only the groups whose spec changed (an invalid file is logged and the running config kept);
- the metrics: a ``MetricsBoard`` of the workers' reports, served by prometheus_client on ``metrics_port``;
- a progress line on stderr when it is a terminal.
"""

from __future__ import annotations

import json
import logging
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from kqactors.ingest.checkpoint import StateDirBusy, StateDirLock
from kqactors.ingest.config import ConfigError, IngestConfig, WorkerSpec, worker_groups
from kqactors.ingest.logs import setup_logging
from kqactors.ingest.metrics import MetricsBoard, PrometheusCollector

__all__ = ["Supervisor", "ProgressLine"]

_log = logging.getLogger("kqactors.ingest.supervisor")

_BACKOFF_START_S, _BACKOFF_MAX_S, _STABLE_S = 1.0, 30.0, 60.0
_KILL_GRACE_S = 10.0


class ProgressLine:
    """One redrawn line of totals and rates (only on a terminal)."""

    def __init__(self, stream: TextIO, enabled: bool, clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream
        self.enabled = enabled
        self.clock = clock
        self.drawn = False
        self._last: tuple[float, int, int] | None = None
        self._started = clock()

    def render(self, totals: dict[str, int], workers_up: int, workers: int, final: bool = False) -> str:
        """Totals and rates since the last render (``final``: averages since the start)."""
        now = self.clock()
        rate_in = rate_out = 0.0
        if final:
            self._last = (self._started, 0, 0)
        if self._last is not None and now > self._last[0]:
            span = now - self._last[0]
            rate_in = (totals["lines_in"] - self._last[1]) / span
            rate_out = (totals["lines_out"] - self._last[2]) / span
        self._last = (now, totals["lines_in"], totals["lines_out"])
        return (f"ingest: in {totals['lines_in']:,} ({rate_in:,.0f}/s)  out {totals['lines_out']:,} "
                f"({rate_out:,.0f}/s)  in flight {totals['in_flight']:,}  lag {totals['lag_bytes']:,} B  "
                f"dropped {totals['dropped']:,}  errors {totals['errors']:,}  workers {workers_up}/{workers}")

    def draw(self, text: str) -> None:
        if self.enabled:
            self.stream.write("\r\x1b[K" + text)
            self.stream.flush()
            self.drawn = True

    def clear(self) -> None:
        if self.enabled and self.drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.drawn = False


class _Worker:
    """The supervisor's view of one worker process."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        self.group = spec.group
        self.proc: subprocess.Popen[bytes] | None = None
        self.report_fd = -1
        self.buffer = b""
        self.stderr_fd = -1            # with a progress line: the worker's stderr, passed on whole lines
        self.stderr_buffer = b""
        self.started = 0.0
        self.backoff = _BACKOFF_START_S
        self.restart_at: float | None = None
        self.stopping = False
        self.replacement: WorkerSpec | None = None   # started when this one has exited (reload)
        self.removed = False                         # reload dropped the group
        self.done = False                            # finished on its own, or unusable: never restarted
        self.exit_code: int | None = None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None


class Supervisor:
    """Runs the daemon until it is stopped, or until every worker finished on its own."""

    def __init__(self, config: IngestConfig, reload: Callable[[], IngestConfig] | None = None,
                 stderr: TextIO | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.reload_config = reload
        self.stderr = stderr or sys.stderr
        self.clock = clock
        self.board = MetricsBoard()
        self.workers: dict[str, _Worker] = {}
        self.selector = selectors.DefaultSelector()
        self.lock: StateDirLock | None = None
        self.metrics_server: Any = None
        self.stopping = False
        self._signals: list[int] = []
        progress = config.progress if config.progress is not None else self.stderr.isatty()
        self.progress = ProgressLine(self.stderr, bool(progress), clock)

    # ---- the loop ----------------------------------------------------------------------------------------
    def run(self) -> int:
        setup_logging(self.config.log_format, self.config.log_level, "supervisor", self.stderr,
                      before=self.progress.clear)
        if self.config.state_dir:
            try:
                self.lock = StateDirLock(self.config.state_dir)
            except StateDirBusy as exc:
                _log.error("%s", exc, extra={"event": "state_dir_busy"})
                return 1
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        os.set_blocking(wake_r, False)
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
        old_wakeup = signal.set_wakeup_fd(wake_w)
        self.selector.register(wake_r, selectors.EVENT_READ, None)
        try:
            if self.config.metrics_port and not self._start_metrics():
                return 2
            for spec in worker_groups(self.config):
                self._start(_Worker(spec))
            _log.info("ingest daemon started: %d worker(s), %d source(s)", len(self.workers),
                      len(self.config.sources), extra={"event": "daemon_started", "pid": os.getpid()})
            return self._loop(wake_r)
        finally:
            signal.set_wakeup_fd(old_wakeup)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.selector.close()
            os.close(wake_r)
            os.close(wake_w)
            self.progress.clear()
            if self.metrics_server is not None:
                self.metrics_server.shutdown()
                self.metrics_server.server_close()
            if self.lock is not None:
                self.lock.close()

    def _loop(self, wake_r: int) -> int:
        next_draw = 0.0
        stop_deadline: float | None = None
        while True:
            for key, _ in self.selector.select(timeout=0.2):
                if key.data is None:
                    try:
                        while os.read(wake_r, 512):
                            pass
                    except BlockingIOError:
                        pass
                elif isinstance(key.data, tuple):
                    self._pass_stderr(key.data[1])
                else:
                    self._read_reports(key.data)
            for sig in self._take_signals():
                if sig == signal.SIGHUP and not self.stopping:
                    self._reload()
                elif sig in (signal.SIGTERM, signal.SIGINT) and not self.stopping:
                    _log.info("stopping: draining the workers", extra={"event": "stopping", "signal": sig})
                    self.stopping = True
                    stop_deadline = self.clock() + self.config.drain_timeout_s + _KILL_GRACE_S
                    for w in self.workers.values():
                        self._terminate(w)
            self._reap()
            now = self.clock()
            if stop_deadline is not None and now >= stop_deadline:
                for w in self.workers.values():
                    if w.alive:
                        _log.error("worker %s did not stop: killed", w.group, extra={"event": "worker_killed"})
                        w.proc.kill()  # type: ignore[union-attr]
                stop_deadline = now + 5.0
            if not self.stopping:
                for w in list(self.workers.values()):
                    if w.restart_at is not None and now >= w.restart_at:
                        w.restart_at = None
                        self._start(w)
            if now >= next_draw and self.progress.enabled:
                next_draw = now + 0.5
                up = sum(1 for w in self.workers.values() if w.alive)
                self.progress.draw(self.progress.render(self.board.totals(), up, len(self.workers)))
            if not any(w.alive or w.restart_at is not None for w in self.workers.values()):
                if self.progress.enabled:   # the totals stay on screen
                    self.progress.draw(self.progress.render(self.board.totals(), 0, len(self.workers), final=True))
                    self.stderr.write("\n")
                    self.progress.drawn = False
                return self._exit_code()

    def _exit_code(self) -> int:
        codes = [w.exit_code for w in self.workers.values()]
        if any(c == 2 for c in codes):
            return 2
        return 0 if all(c == 0 for c in codes) else 1

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._signals.append(signum)

    def _take_signals(self) -> list[int]:
        taken, self._signals = self._signals, []
        return taken

    # ---- workers -----------------------------------------------------------------------------------------
    def _start(self, w: _Worker) -> None:
        spec_r, spec_w = os.pipe()
        rep_r, rep_w = os.pipe()
        fds = [spec_r, rep_w] + ([self.lock.fd] if self.lock is not None else [])
        cmd = [sys.executable, "-m", "kqactors.ingest.worker", "--parent", str(os.getpid()),
               "--spec-fd", str(spec_r), "--report-fd", str(rep_w)]
        uses_stdin = any(s.type == "stdin" for s in w.spec.sources)
        # With a progress line, the workers' log lines come through us, so that each starts on a clean line.
        stderr = subprocess.PIPE if self.progress.enabled else None
        try:
            w.proc = subprocess.Popen(cmd, stdin=None if uses_stdin else subprocess.DEVNULL, pass_fds=fds,
                                      stderr=stderr)
        finally:
            os.close(spec_r)
            os.close(rep_w)
        data = json.dumps(w.spec.to_dict()).encode()
        with os.fdopen(spec_w, "wb") as f:
            f.write(data)
        w.report_fd = rep_r
        w.buffer = b""
        w.started = self.clock()
        w.exit_code = None
        w.stopping = False
        os.set_blocking(rep_r, False)
        self.selector.register(rep_r, selectors.EVENT_READ, w)
        if w.proc.stderr is not None:
            w.stderr_fd = w.proc.stderr.fileno()
            w.stderr_buffer = b""
            os.set_blocking(w.stderr_fd, False)
            self.selector.register(w.stderr_fd, selectors.EVENT_READ, ("stderr", w))
        self.workers[w.group] = w
        self.board.update(w.group, {})
        _log.info("worker %s started (pid %d)", w.group, w.proc.pid,
                  extra={"event": "worker_started", "group": w.group, "child": w.proc.pid})

    def _read_reports(self, w: _Worker) -> None:
        try:
            while True:
                chunk = os.read(w.report_fd, 65536)
                if not chunk:
                    self._close_reports(w)
                    break
                w.buffer += chunk
        except BlockingIOError:
            pass
        *lines, w.buffer = w.buffer.split(b"\n")
        for line in lines:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if message.get("type") == "metrics":
                self.board.update(w.group, message)

    def _pass_stderr(self, w: _Worker, final: bool = False) -> None:
        try:
            while True:
                chunk = os.read(w.stderr_fd, 65536)
                if not chunk:
                    final = True
                    break
                w.stderr_buffer += chunk
        except BlockingIOError:
            pass
        *lines, w.stderr_buffer = w.stderr_buffer.split(b"\n")
        if final and w.stderr_buffer:
            lines.append(w.stderr_buffer)
            w.stderr_buffer = b""
        if lines:
            self.progress.clear()
            self.stderr.write(b"\n".join(lines).decode(errors="replace") + "\n")
            self.stderr.flush()
        if final:
            self.selector.unregister(w.stderr_fd)
            w.proc.stderr.close()  # type: ignore[union-attr]
            w.stderr_fd = -1

    def _close_reports(self, w: _Worker) -> None:
        if w.report_fd >= 0:
            self.selector.unregister(w.report_fd)
            os.close(w.report_fd)
            w.report_fd = -1

    def _terminate(self, w: _Worker) -> None:
        w.stopping = True
        w.restart_at = None
        if w.alive:
            w.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]

    def _reap(self) -> None:
        for w in list(self.workers.values()):
            if w.proc is None or w.proc.returncode is not None or w.proc.poll() is None:
                continue
            if w.report_fd >= 0:
                self._read_reports(w)
                self._close_reports(w)
            if w.stderr_fd >= 0:
                self._pass_stderr(w, final=True)
            code = w.proc.returncode
            w.exit_code = code
            asked = w.stopping or self.stopping
            restart = not asked and code not in (0, 2)
            self.board.worker_exited(w.group, restarting=restart)
            level = logging.INFO if code == 0 else logging.ERROR
            _log.log(level, "worker %s exited with %s", w.group, code,
                     extra={"event": "worker_exited", "group": w.group, "code": code})
            if w.replacement is not None and not self.stopping:
                spec, w.replacement = w.replacement, None
                self._start(_Worker(spec))
            elif w.removed:
                del self.workers[w.group]
                self.board.forget_worker(w.group)
            elif restart:
                if self.clock() - w.started >= _STABLE_S:
                    w.backoff = _BACKOFF_START_S
                w.restart_at = self.clock() + w.backoff
                _log.info("worker %s restarts in %.0f s", w.group, w.backoff,
                          extra={"event": "worker_restart", "group": w.group})
                w.backoff = min(_BACKOFF_MAX_S, w.backoff * 2)
            else:
                w.done = True

    # ---- reload ----------------------------------------------------------------------------------------------
    def _reload(self) -> None:
        if self.reload_config is None:
            _log.info("SIGHUP: no configuration file to reload", extra={"event": "reload_skipped"})
            return
        try:
            config = self.reload_config()
        except ConfigError as exc:
            _log.error("reload failed, keeping the running configuration: %s", exc, extra={"event": "reload_failed"})
            return
        if config.state_dir != self.config.state_dir:
            _log.warning("reload: state_dir changes need a restart; keeping %s", self.config.state_dir,
                         extra={"event": "reload_warning"})
            config = _with_state_dir(config, self.config.state_dir)
        self.config = config
        setup_logging(config.log_format, config.log_level, "supervisor", self.stderr, before=self.progress.clear)
        new = {spec.group: spec for spec in worker_groups(config)}
        changed = 0
        for group, w in list(self.workers.items()):
            spec = new.pop(group, None)
            if spec is not None and spec.to_dict() == w.spec.to_dict():
                continue
            changed += 1
            if spec is None:
                w.removed = True
            else:
                w.replacement = spec
            if w.alive:
                self._terminate(w)
            elif spec is not None:
                w.replacement = None
                self._start(_Worker(spec))
            else:
                del self.workers[group]
        for spec in new.values():
            changed += 1
            self._start(_Worker(spec))
        _log.info("configuration reloaded: %d worker(s) restarted or added", changed,
                  extra={"event": "reloaded", "changed": changed})

    # ---- metrics -------------------------------------------------------------------------------------------
    def _start_metrics(self) -> bool:
        try:
            from prometheus_client import CollectorRegistry, start_http_server
        except ImportError:
            _log.error("--metrics-port needs prometheus_client: pip install 'kqactors[ingest]'",
                       extra={"event": "metrics_unavailable"})
            return False
        registry = CollectorRegistry(auto_describe=False)
        registry.register(PrometheusCollector(self.board))  # type: ignore[arg-type]
        try:
            server, _thread = start_http_server(self.config.metrics_port, self.config.metrics_host, registry)
        except OSError as exc:
            _log.error("cannot serve metrics on %s:%d: %s", self.config.metrics_host, self.config.metrics_port,
                       exc.strerror or exc, extra={"event": "metrics_bind_error"})
            return False
        self.metrics_server = server
        _log.info("metrics on http://%s:%d/metrics", self.config.metrics_host, self.config.metrics_port,
                  extra={"event": "metrics_listening"})
        return True


def _with_state_dir(config: IngestConfig, state_dir: str) -> IngestConfig:
    import dataclasses

    return dataclasses.replace(config, state_dir=state_dir)
