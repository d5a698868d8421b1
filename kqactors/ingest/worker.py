"""One worker process of the ingestion daemon: its source group, its own Producer, checkpoints and reports.

Runs in: a worker process (``python -m kqactors.ingest.worker``, started by the supervisor; it dies with the
supervisor: PR_SET_PDEATHSIG=SIGKILL, as a crash would). Owns, on one asyncio loop: the group's sources, the
Producer (whose host processes encode and compress), the pump that serves delivery reports (``poll(0)`` every
few ms), the periodic checkpoint of file positions, and a JSON metrics snapshot every ``metrics_interval_s``
on the report pipe. SIGTERM/SIGINT drain: the sources stop, the producer is flushed (up to
``drain_timeout_s``), positions are checkpointed, exit 0. SIGHUP is ignored here (the supervisor reloads).

Exit status: 0 drained or finished; 1 failed (the supervisor restarts it); 2 unusable configuration (not
restarted); 3 a listener could not bind (restarted after a back-off).
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from kqactors.errors import KafkaError, KafkaException
from kqactors.ingest.checkpoint import StateStore
from kqactors.ingest.config import WorkerSpec
from kqactors.ingest.emit import Emitter, SourceRuntime
from kqactors.ingest.filesource import FileSource
from kqactors.ingest.logs import setup_logging
from kqactors.ingest.metrics import rdkafka_fields
from kqactors.ingest.netsources import HttpSource, StdinSource, TcpSource, UdpSource

__all__ = ["Worker", "main", "EXIT_OK", "EXIT_FAILED", "EXIT_CONFIG", "EXIT_BIND"]

_log = logging.getLogger("kqactors.ingest.worker")

EXIT_OK, EXIT_FAILED, EXIT_CONFIG, EXIT_BIND = 0, 1, 2, 3
_PR_SET_PDEATHSIG = 1


def _default_producer(conf: dict[str, Any]) -> Any:
    from kqactors import Producer

    return Producer(conf)


class Worker:
    """Runs a WorkerSpec until stopped (or until every source is finished)."""

    def __init__(self, spec: WorkerSpec, report: Callable[[dict[str, Any]], None] | None = None,
                 producer_factory: Callable[[dict[str, Any]], Any] = _default_producer,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.spec = spec
        self.settings = dict(spec.settings)
        self.report = report
        self.producer_factory = producer_factory
        self.clock = clock
        self.stop = asyncio.Event()
        self.rdkafka: dict[str, Any] = {}
        self.producer: Any = None
        self.emitter: Emitter | None = None
        self.runtimes: list[SourceRuntime] = []
        self.file_sources: list[FileSource] = []
        self.store: StateStore | None = None
        self.listeners: list[Any] = []
        self._logged: dict[str, float] = {}
        self.fatal = False

    # ---- producer callbacks (served by poll() on the loop's thread) -------------------------------------
    def _on_stats(self, stats_json: str) -> None:
        try:
            self.rdkafka = rdkafka_fields(json.loads(stats_json))
        except (ValueError, AttributeError):
            pass

    def _on_error(self, err: Any) -> None:
        name = err.name() if hasattr(err, "name") else str(err)
        if hasattr(err, "fatal") and err.fatal() and not self.fatal:
            # Nothing more will be delivered by this producer: end the worker; its restart resumes from the
            # checkpoints with a new producer.
            self.fatal = True
            _log.error("producer: fatal error %s: %s", name, err.str() if hasattr(err, "str") else err,
                       extra={"event": "producer_fatal", "error": name})
            self.stop.set()
            return
        now = self.clock()
        if now - self._logged.get(name, -1e9) >= 10.0:
            self._logged[name] = now
            _log.warning("producer: %s", err.str() if hasattr(err, "str") else err,
                         extra={"event": "producer_error", "error": name})

    def producer_config(self) -> dict[str, Any]:
        conf = dict(self.settings["kafka"])
        conf["error_cb"] = self._on_error
        try:
            interval = int(conf.get("statistics.interval.ms", 0))
        except (TypeError, ValueError):
            interval = 0
        if interval > 0:
            conf["stats_cb"] = self._on_stats
        return conf

    # ---- running -----------------------------------------------------------------------------------------
    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop.set)
        try:
            self.producer = self.producer_factory(self.producer_config())
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError._TRANSPORT:  # a shared runtime that is not up (yet): try again later
                _log.error("cannot attach the producer: %s", exc, extra={"event": "producer_attach_error"})
                return EXIT_FAILED
            _log.error("cannot create the producer: %s", exc, extra={"event": "producer_config_error"})
            return EXIT_CONFIG
        except Exception as exc:  # noqa: BLE001 - a bad property, an unknown setting: say which and stop
            _log.error("cannot create the producer: %s", exc, extra={"event": "producer_config_error"})
            return EXIT_CONFIG
        self.emitter = emitter = Emitter(self.producer, int(self.settings["retry_backoff_ms"]) / 1000.0,
                                         self.clock)
        store = None
        if any(s.type == "file" for s in self.spec.sources):
            store = StateStore(self.settings["state_dir"], bool(self.settings["fsync"]))
            store.start_writer()
        self.store = store
        tasks: list[asyncio.Task[Any]] = []
        finite = True
        for spec in self.spec.sources:
            rt = SourceRuntime(spec, emitter, self.clock)
            self.runtimes.append(rt)
            if spec.type == "file":
                assert store is not None
                fs = FileSource(rt, store, self.settings, self.clock)
                self.file_sources.append(fs)
                tasks.append(asyncio.ensure_future(fs.run(self.stop)))
                finite = finite and bool(self.settings.get("once"))
            elif spec.type == "stdin":
                tasks.append(asyncio.ensure_future(StdinSource(rt, int(self.settings["read_bytes"])).run(self.stop)))
            else:
                finite = False
                listener = {"tcp": lambda r: TcpSource(r, int(self.settings["read_bytes"])),
                            "udp": UdpSource, "http": HttpSource}[spec.type](rt)
                try:
                    await listener.start(self.stop)
                except OSError as exc:
                    _log.error("source %s cannot listen on %s: %s", spec.name, spec.listen, exc.strerror or exc,
                               extra={"event": "bind_error", "source": spec.name})
                    await self._close(tasks, 0.0)
                    return EXIT_BIND
                self.listeners.append(listener)
        helpers = [asyncio.ensure_future(self._pump()), asyncio.ensure_future(self._checkpoints()),
                   asyncio.ensure_future(self._reports())]
        self._send({"type": "ready", "pid": os.getpid()})
        _log.info("worker %s started: %s", self.spec.group, ", ".join(s.name for s in self.spec.sources),
                  extra={"event": "started", "sources": ",".join(s.name for s in self.spec.sources)})
        failed = await self._wait(tasks, finite)
        drained = await self._close(tasks, 0.0 if self.fatal else float(self.settings["drain_timeout_s"]))
        for helper in helpers:
            helper.cancel()
        await asyncio.gather(*helpers, return_exceptions=True)
        if store is not None:
            store.close()
        self._save(now=True)
        self._send(self.snapshot(final=True))
        left = len(self.producer)
        if left:
            self.producer.purge()
            self.producer.poll(0)
        try:
            self.producer.close(1.0) if hasattr(self.producer, "close") else self.producer.flush(0)
        except Exception:  # noqa: BLE001 - closing after the numbers are saved: nothing more to lose
            pass
        _log.info("worker %s stopped (%s)", self.spec.group,
                  "drained" if drained else f"{left} lines not delivered: they are read again after a restart",
                  extra={"event": "stopped", "undelivered": left})
        return EXIT_FAILED if failed or self.fatal else EXIT_OK

    async def _wait(self, tasks: list[asyncio.Task[Any]], finite: bool) -> bool:
        """Until stop (or, when every source is finite, until they are all finished); True if a source failed."""
        stopper = asyncio.ensure_future(self.stop.wait())
        pending = set(tasks)
        failed = False
        while not self.stop.is_set():
            done, pending = await asyncio.wait(pending | {stopper}, return_when=asyncio.FIRST_COMPLETED)
            pending.discard(stopper)
            for task in done:
                if task is not stopper and not task.cancelled() and task.exception() is not None:
                    _log.error("source failed", exc_info=task.exception(), extra={"event": "source_failed"})
                    failed = True
                    self.stop.set()
            if finite and not pending:
                break
            if not pending and not self.listeners and not self.file_sources:
                break
        stopper.cancel()
        return failed

    async def _close(self, tasks: list[asyncio.Task[Any]], drain_s: float) -> bool:
        """Stop the sources, then serve delivery reports until the producer is empty (or ``drain_s``)."""
        self.stop.set()
        for listener in self.listeners:
            await listener.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.emitter is None:
            return True
        deadline = self.clock() + drain_s
        while len(self.producer) or self.emitter.retrying:
            if self.clock() >= deadline:
                return False
            self.emitter.service()
            self._save_if_due()
            await asyncio.sleep(0.005)
        self.emitter.service()
        return True

    async def _pump(self) -> None:
        emitter = self.emitter
        assert emitter is not None
        while True:
            served = emitter.service()
            await asyncio.sleep(0.002 if served else 0.01)

    async def _checkpoints(self) -> None:
        interval = int(self.settings["checkpoint_interval_ms"]) / 1000.0
        while True:
            await asyncio.sleep(interval)
            self._save()

    _next_save = 0.0

    def _save_if_due(self) -> None:
        now = self.clock()
        if now >= self._next_save:
            self._next_save = now + int(self.settings["checkpoint_interval_ms"]) / 1000.0
            self._save()

    def _save(self, now: bool = False) -> None:
        for fs in self.file_sources:
            fs.save(now)

    async def _reports(self) -> None:
        interval = float(self.settings["metrics_interval_s"])
        while True:
            await asyncio.sleep(interval)
            self._send(self.snapshot())

    def snapshot(self, final: bool = False) -> dict[str, Any]:
        for fs in self.file_sources:
            fs.gauges()
        return {"type": "metrics", "group": self.spec.group, "final": final,
                "sources": {rt.name: rt.stats.snapshot() for rt in self.runtimes},
                "queue": len(self.producer) if self.producer is not None else 0,
                "retrying": self.emitter.retrying if self.emitter is not None else 0,
                "rdkafka": self.rdkafka}

    def _send(self, message: dict[str, Any]) -> None:
        if self.report is not None:
            self.report(message)


# ---- process entry ----------------------------------------------------------------------------------------
def _die_with_parent(parent: int) -> None:
    """SIGKILL when the supervisor dies (as if the whole daemon had crashed); exit now if it already has."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(EXIT_FAILED)


def _pipe_reporter(fd: int) -> Callable[[dict[str, Any]], None]:
    def report(message: dict[str, Any]) -> None:
        data = (json.dumps(message, separators=(",", ":")) + "\n").encode()
        try:
            while data:
                written = os.write(fd, data)
                data = data[written:]
        except OSError:
            pass
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kqactors.ingest.worker")
    parser.add_argument("--parent", type=int, required=True)
    parser.add_argument("--spec-fd", type=int, required=True)
    parser.add_argument("--report-fd", type=int, required=True)
    args = parser.parse_args(argv)
    _die_with_parent(args.parent)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    with os.fdopen(args.spec_fd, "rb") as f:
        spec = WorkerSpec.from_dict(json.loads(f.read()))
    settings = spec.settings
    setup_logging(settings["log_format"], settings["log_level"], spec.group)
    worker = Worker(spec, _pipe_reporter(args.report_fd))
    # Per line the worker allocates little that can form cycles, but enough containers (lists of lines, delivery
    # reports) to run ~3,800 young collections per million lines; with the imports frozen and a higher
    # threshold that is a handful (about 5 % of the worker's CPU at 1M lines).
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)
    try:
        return asyncio.run(worker.run())
    except Exception:  # noqa: BLE001 - logged for the supervisor, which restarts us
        _log.exception("worker %s failed", spec.group, extra={"event": "worker_failed"})
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
