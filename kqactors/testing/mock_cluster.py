"""Drive a librdkafka mock cluster (running in a child process) from a test.

Runs in: the test process. Owns the child started from ``kqactors.testing.mock_server`` and the JSON-line
control channel to it (its stdin/stdout pipes). Each method maps to one ``rd_kafka_mock_*`` call.

Mock cluster facts (librdkafka 2.16): brokers have ids 1..N and listen on 127.0.0.1; topics are
auto-created on first use unless created with ``create_topic``; it implements the classic data and group
APIs and KIP-848's ConsumerGroupHeartbeat (v1 only; its heartbeat interval and session timeout are set with
``group_consumer_heartbeat_interval_ms`` / ``group_consumer_session_timeout_ms``) (no admin APIs such as
CreateTopics, no SASL/TLS); ApiVersions only up to v2 (v3+ gets
UNSUPPORTED_VERSION with a non-standard body), and an unsupported request makes it close the connection.
Tracked requests carry broker id, ApiKey and a timestamp, but not the ApiVersion (librdkafka has no
accessor for it). Fetch answers one record batch per partition; transactions write COMMIT/ABORT control
batches (stored with a CRC of 0) but Fetch reports LSO = high watermark and never lists aborted transactions.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple

from kqactors.errors import ERROR_CODES, KafkaError, KafkaException
from kqactors.testing._process import die_with_parent_preexec, log_tail, make_workdir, stop_process
from kqactors.testing.librdkafka import find_librdkafka
from kqactors.testing.probe import wait_until_ready

__all__ = ["MockCluster", "MockRequest"]

_ERR_INVALID_ARG = KafkaError._INVALID_ARG
_ERR_TRANSPORT = KafkaError._TRANSPORT
_ERR_TIMED_OUT = KafkaError._TIMED_OUT
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


class MockRequest(NamedTuple):
    """One request the mock cluster received while tracking was on."""

    broker_id: int
    api_key: int
    timestamp_us: int


def _error_code(error: int | str | KafkaError) -> int:
    """Accept 6, "NOT_LEADER_OR_FOLLOWER" or KafkaError(6); return the int code."""
    if isinstance(error, KafkaError):
        return error.code()
    if isinstance(error, bool):
        raise TypeError("error code must be an int, a name or a KafkaError, not bool")
    if isinstance(error, int):
        return error
    if isinstance(error, str):
        name = error.removeprefix("RD_KAFKA_RESP_ERR_")
        if name in ERROR_CODES:
            return ERROR_CODES[name]
        raise ValueError(f"unknown Kafka error name {error!r}")
    raise TypeError(f"error code must be an int, a name or a KafkaError, not {type(error).__name__}")


def _int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    return value


def _text(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError(f"{what} must be a non-empty str")
    return value


class MockCluster:
    """A librdkafka mock cluster with ``num_brokers`` brokers, in a child process.

    ``with MockCluster(3) as cluster: cluster.bootstrap`` — all methods raise KafkaException carrying the
    librdkafka error code when the mock refuses, and TypeError/ValueError for malformed arguments.
    """

    def __init__(self, num_brokers: int = 3, startup_timeout: float = 20.0, call_timeout: float = 10.0):
        if _int(num_brokers, "num_brokers") < 1:
            raise ValueError("num_brokers must be at least 1")
        self.num_brokers = num_brokers
        self._startup_timeout = startup_timeout
        self._call_timeout = call_timeout
        self._proc: subprocess.Popen | None = None
        self._workdir: Path | None = None
        self._buffer = b""
        self._lock = threading.Lock()
        self._bootstrap: str | None = None
        self.librdkafka_version: str | None = None

    # -- lifecycle ----------------------------------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        """Comma-separated ``host:port`` list of every mock broker."""
        if self._bootstrap is None:
            raise RuntimeError("MockCluster is not started")
        return self._bootstrap

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise RuntimeError("MockCluster is not started")
        return self._proc.pid

    def broker_address(self, broker_id: int) -> tuple[str, int]:
        """(host, port) of mock broker ``broker_id`` (ids are 1..num_brokers, in bootstrap order)."""
        if not 1 <= _int(broker_id, "broker_id") <= self.num_brokers:
            raise ValueError(f"broker_id must be in 1..{self.num_brokers}")
        host, _, port = self.bootstrap.split(",")[broker_id - 1].rpartition(":")
        return host, int(port)

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> MockCluster:
        """Start the child, wait for its cluster to answer ApiVersions on every broker."""
        if self._proc is not None:
            raise RuntimeError("MockCluster already started")
        find_librdkafka()  # fail early and clearly, in this process, if the library is missing
        self._workdir = make_workdir("mock")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_PACKAGE_ROOT, env.get("PYTHONPATH")]))
        command = [sys.executable, "-m", "kqactors.testing.mock_server",
                   "--brokers", str(self.num_brokers), "--parent-pid", str(os.getpid())]
        try:
            with open(self._workdir / "mock.log", "ab") as log:
                self._proc = subprocess.Popen(
                    command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                    preexec_fn=die_with_parent_preexec(), close_fds=True, env=env,
                )
            hello = self._read_reply(self._startup_timeout)
            if not hello.get("ok"):
                raise RuntimeError(f"mock cluster failed to start: {hello.get('message')}")
            self._bootstrap = hello["result"]["bootstrap"]
            self.librdkafka_version = hello["result"]["version"]
            proc = self._proc
            for broker_id in range(1, self.num_brokers + 1):
                host, port = self.broker_address(broker_id)
                wait_until_ready(host, port, self._startup_timeout, still_running=lambda: proc.poll() is None)
            return self
        except BaseException as exc:
            tail = log_tail(self._workdir / "mock.log") if self._workdir else ""
            self.stop()
            if isinstance(exc, Exception):
                raise RuntimeError(f"MockCluster failed to start: {exc}\n--- mock log tail ---\n{tail}") from exc
            raise

    def stop(self) -> None:
        """Ask the child to destroy the cluster and exit; kill it if it does not. Idempotent."""
        self._shutdown(graceful=True)

    def _shutdown(self, graceful: bool) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if not graceful:
                proc.kill()
            if proc.poll() is None:
                try:
                    self._send(proc, {"op": "stop"})
                    proc.wait(timeout=5)
                except (OSError, subprocess.TimeoutExpired):
                    pass
            stop_process(proc)
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    pipe.close()
        self._bootstrap = None
        self._buffer = b""
        workdir, self._workdir = self._workdir, None
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)

    def __enter__(self) -> MockCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"{self._bootstrap} pid={self._proc.pid}" if self.is_running() else "stopped"
        return f"<MockCluster brokers={self.num_brokers} {state}>"

    # -- control channel ----------------------------------------------------------------------------
    @staticmethod
    def _send(proc: subprocess.Popen, message: dict[str, Any]) -> None:
        assert proc.stdin is not None
        proc.stdin.write((json.dumps(message) + "\n").encode())
        proc.stdin.flush()

    def _read_reply(self, timeout: float) -> dict[str, Any]:
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KafkaException(KafkaError(_ERR_TIMED_OUT, f"mock cluster gave no reply in {timeout}s"))
            ready, _, _ = select.select([fd], [], [], remaining)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise KafkaException(KafkaError(_ERR_TRANSPORT, "mock cluster process exited"))
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return json.loads(line)

    def _call(self, op: str, **args: Any) -> Any:
        with self._lock:
            if not self.is_running():
                raise RuntimeError("MockCluster is not running")
            assert self._proc is not None
            try:
                self._send(self._proc, {"op": op, "args": args})
            except BrokenPipeError as exc:
                raise KafkaException(KafkaError(_ERR_TRANSPORT, "mock cluster process exited")) from exc
            try:
                reply = self._read_reply(self._call_timeout)
            except KafkaException:
                self._shutdown(graceful=False)  # a late reply would desynchronise the channel
                raise
        if not reply.get("ok"):
            raise KafkaException(KafkaError(reply.get("code", _ERR_INVALID_ARG), reply.get("message")))
        return reply.get("result")

    # -- topics and partitions ----------------------------------------------------------------------
    def create_topic(self, topic: str, partition_cnt: int = 1, replication_factor: int = 1) -> None:
        self._call("create_topic", topic=_text(topic, "topic"),
                   partition_cnt=_int(partition_cnt, "partition_cnt"),
                   replication_factor=_int(replication_factor, "replication_factor"))

    def topic_set_error(self, topic: str, error: int | str | KafkaError) -> None:
        """Make Metadata report ``error`` for ``topic`` (0 clears it)."""
        self._call("topic_set_error", topic=_text(topic, "topic"), error=_error_code(error))

    def partition_set_leader(self, topic: str, partition: int, broker_id: int) -> None:
        """Move the leader; broker_id -1 makes the partition leaderless."""
        self._call("partition_set_leader", topic=_text(topic, "topic"), partition=_int(partition, "partition"),
                   broker_id=_int(broker_id, "broker_id"))

    def partition_set_follower(self, topic: str, partition: int, broker_id: int) -> None:
        """Name the replica the mock sends fetchers to when they ask for a preferred follower."""
        self._call("partition_set_follower", topic=_text(topic, "topic"),
                   partition=_int(partition, "partition"), broker_id=_int(broker_id, "broker_id"))

    def partition_set_follower_wmarks(self, topic: str, partition: int, low: int, high: int) -> None:
        """Fake the follower's low/high watermarks (-1 restores the leader's)."""
        self._call("partition_set_follower_wmarks", topic=_text(topic, "topic"),
                   partition=_int(partition, "partition"), low=_int(low, "low"), high=_int(high, "high"))

    # -- brokers ------------------------------------------------------------------------------------
    def broker_set_down(self, broker_id: int) -> None:
        """Close the broker's connections and refuse new ones until ``broker_set_up``."""
        self._call("broker_set_down", broker_id=_int(broker_id, "broker_id"))

    def broker_set_up(self, broker_id: int) -> None:
        self._call("broker_set_up", broker_id=_int(broker_id, "broker_id"))

    def broker_set_rtt(self, broker_id: int, rtt_ms: int) -> None:
        """Delay every response from ``broker_id`` by ``rtt_ms``."""
        self._call("broker_set_rtt", broker_id=_int(broker_id, "broker_id"), rtt_ms=_int(rtt_ms, "rtt_ms"))

    def coordinator_set(self, key_type: str, key: str, broker_id: int) -> None:
        """Pin the coordinator for a group (key_type "group") or transactional id ("transaction")."""
        if key_type not in ("group", "transaction"):
            raise ValueError('key_type must be "group" or "transaction"')
        self._call("coordinator_set", key_type=key_type, key=_text(key, "key"),
                   broker_id=_int(broker_id, "broker_id"))

    def set_apiversion(self, api_key: int, min_version: int, max_version: int) -> None:
        """Change the version range advertised for ``api_key``; -1/-1 disables the API."""
        self._call("set_apiversion", api_key=_int(api_key, "api_key"),
                   min_version=_int(min_version, "min_version"), max_version=_int(max_version, "max_version"))

    def group_initial_rebalance_delay_ms(self, delay_ms: int) -> None:
        self._call("group_initial_rebalance_delay_ms", delay_ms=_int(delay_ms, "delay_ms"))

    def group_consumer_session_timeout_ms(self, timeout_ms: int) -> None:
        """KIP-848 groups (group.protocol=consumer): the broker-side group.consumer.session.timeout.ms."""
        self._call("group_consumer_session_timeout_ms", timeout_ms=_int(timeout_ms, "timeout_ms"))

    def group_consumer_heartbeat_interval_ms(self, interval_ms: int) -> None:
        """KIP-848 groups: the heartbeat interval the coordinator hands its members."""
        self._call("group_consumer_heartbeat_interval_ms", interval_ms=_int(interval_ms, "interval_ms"))

    # -- error injection ----------------------------------------------------------------------------
    def push_request_errors(self, api_key: int, errors: Iterable[int | str | KafkaError]) -> None:
        """Queue errors for the next requests of ``api_key`` to any broker, one per request, in order."""
        codes = [_error_code(error) for error in errors]
        self._call("push_request_errors", api_key=_int(api_key, "api_key"), errors=codes)

    def broker_push_request_error_rtts(
        self, broker_id: int, api_key: int, errors_rtts: Sequence[tuple[int | str | KafkaError, int]]
    ) -> None:
        """Queue (error, rtt_ms) pairs for the next ``api_key`` requests to ``broker_id`` (error 0 = ok)."""
        pairs = [[_error_code(error), _int(rtt_ms, "rtt_ms")] for error, rtt_ms in errors_rtts]
        self._call("broker_push_request_error_rtts", broker_id=_int(broker_id, "broker_id"),
                   api_key=_int(api_key, "api_key"), pairs=pairs)

    def clear_request_errors(self, api_key: int) -> None:
        """Drop queued cluster-level errors for ``api_key``."""
        self._call("clear_request_errors", api_key=_int(api_key, "api_key"))

    # -- request tracking ---------------------------------------------------------------------------
    def start_request_tracking(self) -> None:
        self._call("start_request_tracking")

    def stop_request_tracking(self) -> None:
        self._call("stop_request_tracking")

    def clear_requests(self) -> None:
        self._call("clear_requests")

    def get_requests(self) -> list[MockRequest]:
        """Requests received since tracking started (or the last ``clear_requests``), oldest first."""
        return [MockRequest(*row) for row in self._call("get_requests")]
