"""A TLS terminator in front of a plaintext broker for test beds: Debian's ``stunnel4`` on loopback.

Runs in: the test process; stunnel is a child process (foreground, killed with its parent, stopped by pid).
Owns its configuration file and log in a private temp dir. ``StunnelProxy(connect_port, cert, key)`` accepts
TLS on ``port`` and forwards plaintext to ``127.0.0.1:connect_port``; ``ca`` makes it require and verify a
client certificate (mutual TLS). The broker behind it must advertise the stunnel port (``TansuBroker(...,
advertised_port=proxy_port)``) so clients keep talking through it after the first Metadata.

``find_stunnel()`` names the binary or raises StunnelNotFound with the install hint (``apt-get install -y
stunnel4``).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

from kqactors.testing._process import (
    die_with_parent_preexec,
    free_loopback_port,
    log_tail,
    make_workdir,
    stop_process,
)
from kqactors.testing.tansu import FrontedTansu

__all__ = ["StunnelProxy", "StunnelNotFound", "find_stunnel"]

STUNNEL_ENV_VAR = "KQ_STUNNEL_BIN"


class StunnelNotFound(FileNotFoundError):
    """No stunnel binary: ``apt-get install -y stunnel4`` (Debian), or set KQ_STUNNEL_BIN."""


def find_stunnel() -> str:
    override = os.environ.get(STUNNEL_ENV_VAR)
    if override:
        if not (os.path.isfile(override) and os.access(override, os.X_OK)):
            raise StunnelNotFound(f"{STUNNEL_ENV_VAR}={override!r} is not an executable file")
        return override
    for name in ("stunnel4", "stunnel"):
        found = shutil.which(name) or (f"/usr/bin/{name}" if os.access(f"/usr/bin/{name}", os.X_OK) else None)
        if found:
            return found
    raise StunnelNotFound("stunnel not found: apt-get install -y stunnel4 (or set KQ_STUNNEL_BIN)")


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class StunnelProxy:
    """stunnel accepting TLS on 127.0.0.1:``port`` (chosen when None) and forwarding to ``connect_port``."""

    def __init__(self, connect_port: int, cert: Path, key: Path, port: int | None = None, ca: Path | None = None,
                 startup_timeout: float = 15.0) -> None:
        self.connect_port = connect_port
        self.cert, self.key, self.ca = Path(cert), Path(key), Path(ca) if ca else None
        self.port = port or free_loopback_port()
        self._startup_timeout = startup_timeout
        self._proc: subprocess.Popen | None = None
        self._workdir: Path | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path | None:
        return self._workdir / "stunnel.log" if self._workdir else None

    def start(self) -> StunnelProxy:
        binary = find_stunnel()
        self._workdir = make_workdir("stunnel")
        conf = self._workdir / "stunnel.conf"
        lines = ["foreground = yes", "pid =", f"output = {self._workdir / 'stunnel.log'}", "debug = 5",
                 "[kafka]", f"accept = 127.0.0.1:{self.port}", f"connect = 127.0.0.1:{self.connect_port}",
                 f"cert = {self.cert}", f"key = {self.key}", "sslVersionMin = TLSv1.2"]
        if self.ca is not None:
            lines += [f"CAfile = {self.ca}", "verifyChain = yes", "requireCert = yes"]
        conf.write_text("\n".join(lines) + "\n")
        with open(self._workdir / "stdout.log", "ab") as out:
            self._proc = subprocess.Popen([binary, str(conf)], stdin=subprocess.DEVNULL, stdout=out,
                                          stderr=subprocess.STDOUT, preexec_fn=die_with_parent_preexec(),
                                          close_fds=True)
        deadline = time.monotonic() + self._startup_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                break
            if _accepts(self.port):
                return self
            time.sleep(0.05)
        tail = log_tail(self.log_path) + "\n" + log_tail(self._workdir / "stdout.log")
        self.stop()
        raise RuntimeError(f"stunnel did not start on port {self.port}:\n{tail}")

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            stop_process(proc)
        workdir, self._workdir = self._workdir, None
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)

    def __enter__(self) -> StunnelProxy:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<StunnelProxy {self.bootstrap} -> 127.0.0.1:{self.connect_port}>"


class TlsTansu(FrontedTansu):
    """A Tansu broker reachable only through stunnel: every connection of a client (bootstrap and learned) is
    TLS. ``client_ca`` turns on mutual TLS."""

    def __init__(self, cert: Path, key: Path, client_ca: Path | None = None) -> None:
        super().__init__()
        self._cert, self._key, self._ca = cert, key, client_ca

    def _start_front(self) -> StunnelProxy:
        find_stunnel()
        return StunnelProxy(self.tansu.port, self._cert, self._key, port=self.proxy_port, ca=self._ca).start()

    def _stop_front(self, front: StunnelProxy) -> None:
        front.stop()
