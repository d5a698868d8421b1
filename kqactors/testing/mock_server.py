"""Child process hosting one librdkafka mock cluster, driven by JSON lines on stdin.

Runs in: its own process, started by ``kqactors.testing.mock_cluster.MockCluster`` as
``python -m kqactors.testing.mock_server --brokers N --parent-pid PID``. Owns the librdkafka handle and
the mock cluster. Why a child: librdkafka threads live in this process, so a crash or a hang there
cannot take the test process with it, and killing the child always frees every mock port.

Control protocol: one JSON object per line on stdin, ``{"op": NAME, "args": {...}}``; one JSON reply per
line on the original stdout, ``{"ok": true, "result": ...}`` or ``{"ok": false, "code": INT, "message":
STR}`` (``code`` is a librdkafka error code). The first reply line is sent unprompted once the cluster is
up: ``{"ok": true, "result": {"bootstrap": ..., "version": ...}}``. The child exits on the ``stop`` op, on
stdin EOF, or when its parent dies (PR_SET_PDEATHSIG from the launcher plus a parent-pid watch).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from ctypes import c_int, c_int16, c_int32, c_size_t, c_void_p
from typing import Any, TextIO

from kqactors.testing.librdkafka import RD_KAFKA_PRODUCER, load_librdkafka

_ERR_INVALID_ARG = -186
_ERR_FAIL = -196


class CommandError(Exception):
    """A mock call returned a librdkafka error code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class MockHost:
    """The librdkafka handle plus its mock cluster, and one method per control op."""

    def __init__(self, broker_count: int) -> None:
        self.lib = load_librdkafka()
        conf = self.lib.rd_kafka_conf_new()
        errstr = ctypes.create_string_buffer(512)
        # The handle only hosts the mock cluster: keep it quiet and away from any real broker.
        self.lib.rd_kafka_conf_set(conf, b"log_level", b"3", errstr, len(errstr))
        self.rk = self.lib.rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, len(errstr))
        if not self.rk:
            raise RuntimeError(f"rd_kafka_new failed: {errstr.value.decode(errors='replace')}")
        self.mcluster = self.lib.rd_kafka_mock_cluster_new(self.rk, broker_count)
        if not self.mcluster:
            self.lib.rd_kafka_destroy(self.rk)
            raise RuntimeError(f"rd_kafka_mock_cluster_new({broker_count}) failed")
        self.bootstrap = self.lib.rd_kafka_mock_cluster_bootstraps(self.mcluster).decode()

    def close(self) -> None:
        if self.mcluster:
            self.lib.rd_kafka_mock_cluster_destroy(self.mcluster)
            self.mcluster = None
        if self.rk:
            self.lib.rd_kafka_destroy(self.rk)
            self.rk = None

    def _check(self, err: int, what: str) -> None:
        if err:
            name = self.lib.rd_kafka_err2name(err).decode()
            raise CommandError(err, f"{what} failed: {name}")

    # -- control ops (names match MockCluster's methods) --------------------------------------------
    def create_topic(self, topic: str, partition_cnt: int, replication_factor: int) -> None:
        err = self.lib.rd_kafka_mock_topic_create(
            self.mcluster, topic.encode(), partition_cnt, replication_factor
        )
        self._check(err, f"create_topic({topic!r})")

    def topic_set_error(self, topic: str, error: int) -> None:
        self.lib.rd_kafka_mock_topic_set_error(self.mcluster, topic.encode(), error)

    def push_request_errors(self, api_key: int, errors: list[int]) -> None:
        array = (c_int * len(errors))(*errors)
        self.lib.rd_kafka_mock_push_request_errors_array(self.mcluster, api_key, len(errors), array)

    def clear_request_errors(self, api_key: int) -> None:
        self.lib.rd_kafka_mock_clear_request_errors(self.mcluster, api_key)

    def broker_push_request_error_rtts(self, broker_id: int, api_key: int, pairs: list[list[int]]) -> None:
        variadic: list[c_int] = []
        for error, rtt_ms in pairs:
            variadic += [c_int(error), c_int(rtt_ms)]
        err = self.lib.rd_kafka_mock_broker_push_request_error_rtts(
            c_void_p(self.mcluster), c_int32(broker_id), c_int16(api_key), c_size_t(len(pairs)), *variadic
        )
        self._check(err, f"broker_push_request_error_rtts(broker {broker_id})")

    def partition_set_leader(self, topic: str, partition: int, broker_id: int) -> None:
        err = self.lib.rd_kafka_mock_partition_set_leader(self.mcluster, topic.encode(), partition, broker_id)
        self._check(err, f"partition_set_leader({topic!r}, {partition})")

    def partition_set_follower(self, topic: str, partition: int, broker_id: int) -> None:
        err = self.lib.rd_kafka_mock_partition_set_follower(
            self.mcluster, topic.encode(), partition, broker_id
        )
        self._check(err, f"partition_set_follower({topic!r}, {partition})")

    def partition_set_follower_wmarks(self, topic: str, partition: int, low: int, high: int) -> None:
        err = self.lib.rd_kafka_mock_partition_set_follower_wmarks(
            self.mcluster, topic.encode(), partition, low, high
        )
        self._check(err, f"partition_set_follower_wmarks({topic!r}, {partition})")

    def broker_set_down(self, broker_id: int) -> None:
        self._check(self.lib.rd_kafka_mock_broker_set_down(self.mcluster, broker_id), "broker_set_down")

    def broker_set_up(self, broker_id: int) -> None:
        self._check(self.lib.rd_kafka_mock_broker_set_up(self.mcluster, broker_id), "broker_set_up")

    def broker_set_rtt(self, broker_id: int, rtt_ms: int) -> None:
        self._check(self.lib.rd_kafka_mock_broker_set_rtt(self.mcluster, broker_id, rtt_ms), "broker_set_rtt")

    def coordinator_set(self, key_type: str, key: str, broker_id: int) -> None:
        err = self.lib.rd_kafka_mock_coordinator_set(self.mcluster, key_type.encode(), key.encode(), broker_id)
        self._check(err, f"coordinator_set({key_type!r}, {key!r})")

    def set_apiversion(self, api_key: int, min_version: int, max_version: int) -> None:
        err = self.lib.rd_kafka_mock_set_apiversion(self.mcluster, api_key, min_version, max_version)
        self._check(err, f"set_apiversion({api_key})")

    def group_initial_rebalance_delay_ms(self, delay_ms: int) -> None:
        self.lib.rd_kafka_mock_group_initial_rebalance_delay_ms(self.mcluster, delay_ms)

    def group_consumer_session_timeout_ms(self, timeout_ms: int) -> None:
        self.lib.rd_kafka_mock_set_group_consumer_session_timeout_ms(self.mcluster, timeout_ms)

    def group_consumer_heartbeat_interval_ms(self, interval_ms: int) -> None:
        self.lib.rd_kafka_mock_set_group_consumer_heartbeat_interval_ms(self.mcluster, interval_ms)

    def start_request_tracking(self) -> None:
        self.lib.rd_kafka_mock_start_request_tracking(self.mcluster)

    def stop_request_tracking(self) -> None:
        self.lib.rd_kafka_mock_stop_request_tracking(self.mcluster)

    def clear_requests(self) -> None:
        self.lib.rd_kafka_mock_clear_requests(self.mcluster)

    def get_requests(self) -> list[list[int]]:
        count = c_size_t()
        array = self.lib.rd_kafka_mock_get_requests(self.mcluster, ctypes.byref(count))
        if not array:
            return []
        try:
            return [
                [
                    self.lib.rd_kafka_mock_request_id(array[index]),
                    self.lib.rd_kafka_mock_request_api_key(array[index]),
                    self.lib.rd_kafka_mock_request_timestamp(array[index]),
                ]
                for index in range(count.value)
            ]
        finally:
            self.lib.rd_kafka_mock_request_destroy_array(array, count.value)


def _dispatch(host: MockHost, request: dict[str, Any]) -> dict[str, Any]:
    op = request.get("op")
    args = request.get("args") or {}
    handler: Callable[..., Any] | None = getattr(host, op, None) if isinstance(op, str) else None
    if handler is None or op.startswith("_") or op in ("close",):
        return {"ok": False, "code": _ERR_INVALID_ARG, "message": f"unknown mock op {op!r}"}
    try:
        return {"ok": True, "result": handler(**args)}
    except CommandError as exc:
        return {"ok": False, "code": exc.code, "message": str(exc)}
    except (TypeError, ValueError, AttributeError, ctypes.ArgumentError) as exc:
        return {"ok": False, "code": _ERR_INVALID_ARG, "message": f"{op}: {exc}"}


def _watch_parent(parent_pid: int) -> None:
    """Backstop for PR_SET_PDEATHSIG (e.g. when the launching thread, not the process, ended)."""
    while True:
        if os.getppid() != parent_pid:
            os._exit(3)
        time.sleep(0.5)


def _serve(host: MockHost, commands: TextIO, replies: TextIO) -> bool:
    """Answer commands until ``stop`` (returns True: the caller replies after cleanup) or EOF (False)."""
    for line in commands:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except json.JSONDecodeError as exc:
            reply: dict[str, Any] = {"ok": False, "code": _ERR_INVALID_ARG, "message": f"bad JSON: {exc}"}
        else:
            if request.get("op") == "stop":
                return True
            reply = _dispatch(host, request)
        replies.write(json.dumps(reply) + "\n")
        replies.flush()
    return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--parent-pid", type=int, default=None)
    options = parser.parse_args(argv)
    # Replies go to the original stdout only; anything else printing to fd 1 lands in the stderr log.
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    if options.parent_pid is not None:
        threading.Thread(target=_watch_parent, args=(options.parent_pid,), daemon=True).start()
    try:
        host = MockHost(options.brokers)
    except Exception as exc:  # report any startup failure to the parent, then exit non-zero
        replies.write(json.dumps({"ok": False, "code": _ERR_FAIL, "message": str(exc)}) + "\n")
        return 1
    try:
        version = host.lib.rd_kafka_version_str().decode()
        replies.write(json.dumps({"ok": True, "result": {"bootstrap": host.bootstrap, "version": version}}) + "\n")
        replies.flush()
        stop_requested = _serve(host, sys.stdin, replies)
    finally:
        host.close()
    if stop_requested:  # acknowledge only once every mock listener is closed
        replies.write(json.dumps({"ok": True, "result": None}) + "\n")
        replies.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
