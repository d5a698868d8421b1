"""Locate and bind librdkafka (the copy bundled in the confluent-kafka wheel) through ctypes.

Runs in: the mock-cluster child process (``kqactors.testing.mock_server``); the locator also runs in the
test process to decide whether the mock fixtures can run. Owns the C signatures of the few librdkafka
functions the mock cluster needs, transcribed from ``rdkafka.h`` / ``rdkafka_mock.h`` (librdkafka 2.16).

kqactors never imports confluent_kafka: the library is found through ``importlib.util.find_spec`` (which
does not execute the package) in ``site-packages/confluent_kafka.libs/librdkafka-*.so*``, or taken from
the ``KQ_LIBRDKAFKA`` environment variable, or from the system's ``librdkafka.so.1``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import importlib.util
import os
from ctypes import POINTER, c_char_p, c_int, c_int16, c_int32, c_int64, c_size_t, c_void_p
from pathlib import Path

__all__ = ["LIBRDKAFKA_ENV_VAR", "LibrdkafkaNotFound", "find_librdkafka", "load_librdkafka"]

LIBRDKAFKA_ENV_VAR = "KQ_LIBRDKAFKA"
RD_KAFKA_PRODUCER = 0


class LibrdkafkaNotFound(FileNotFoundError):
    """No librdkafka shared library: install confluent-kafka, or set KQ_LIBRDKAFKA."""


def _bundled_candidates() -> list[str]:
    spec = importlib.util.find_spec("confluent_kafka")
    if spec is None or not spec.submodule_search_locations:
        return []
    found: list[str] = []
    for location in spec.submodule_search_locations:
        site = Path(location).parent
        for pattern in ("confluent_kafka.libs/librdkafka*.so*", "confluent_kafka/.dylibs/librdkafka*.dylib"):
            found.extend(sorted(glob.glob(str(site / pattern))))
    return found


def find_librdkafka() -> str:
    """Path (or loader name) of librdkafka: $KQ_LIBRDKAFKA, confluent-kafka's bundled copy, the system's."""
    override = os.environ.get(LIBRDKAFKA_ENV_VAR)
    if override:
        if not os.path.isfile(override):
            raise LibrdkafkaNotFound(f"{LIBRDKAFKA_ENV_VAR}={override!r} is not a file")
        return override
    bundled = _bundled_candidates()
    if bundled:
        return bundled[0]
    system = ctypes.util.find_library("rdkafka")
    if system:
        return system
    raise LibrdkafkaNotFound(
        "librdkafka not found: install confluent-kafka (it bundles the library) or set "
        f"{LIBRDKAFKA_ENV_VAR} to the path of librdkafka.so"
    )


# name -> (restype, argtypes); argtypes None marks a variadic function whose fixed prefix is listed in
# _VARIADIC_PREFIX (ctypes then passes the extra arguments with their own ctypes types).
_MOCK = c_void_p
_SIGNATURES: dict[str, tuple[object, list[object] | None]] = {
    "rd_kafka_version_str": (c_char_p, []),
    "rd_kafka_err2name": (c_char_p, [c_int]),
    "rd_kafka_conf_new": (c_void_p, []),
    "rd_kafka_conf_set": (c_int, [c_void_p, c_char_p, c_char_p, c_char_p, c_size_t]),
    "rd_kafka_new": (c_void_p, [c_int, c_void_p, c_char_p, c_size_t]),
    "rd_kafka_destroy": (None, [c_void_p]),
    "rd_kafka_mock_cluster_new": (_MOCK, [c_void_p, c_int]),
    "rd_kafka_mock_cluster_destroy": (None, [_MOCK]),
    "rd_kafka_mock_cluster_bootstraps": (c_char_p, [_MOCK]),
    "rd_kafka_mock_topic_create": (c_int, [_MOCK, c_char_p, c_int, c_int]),
    "rd_kafka_mock_topic_set_error": (None, [_MOCK, c_char_p, c_int]),
    "rd_kafka_mock_clear_request_errors": (None, [_MOCK, c_int16]),
    "rd_kafka_mock_push_request_errors_array": (None, [_MOCK, c_int16, c_size_t, POINTER(c_int)]),
    "rd_kafka_mock_broker_push_request_error_rtts": (c_int, None),
    "rd_kafka_mock_partition_set_leader": (c_int, [_MOCK, c_char_p, c_int32, c_int32]),
    "rd_kafka_mock_partition_set_follower": (c_int, [_MOCK, c_char_p, c_int32, c_int32]),
    "rd_kafka_mock_partition_set_follower_wmarks": (c_int, [_MOCK, c_char_p, c_int32, c_int64, c_int64]),
    "rd_kafka_mock_broker_set_down": (c_int, [_MOCK, c_int32]),
    "rd_kafka_mock_broker_set_up": (c_int, [_MOCK, c_int32]),
    "rd_kafka_mock_broker_set_rtt": (c_int, [_MOCK, c_int32, c_int]),
    "rd_kafka_mock_coordinator_set": (c_int, [_MOCK, c_char_p, c_char_p, c_int32]),
    "rd_kafka_mock_set_apiversion": (c_int, [_MOCK, c_int16, c_int16, c_int16]),
    "rd_kafka_mock_group_initial_rebalance_delay_ms": (None, [_MOCK, c_int32]),
    "rd_kafka_mock_set_group_consumer_session_timeout_ms": (None, [_MOCK, c_int]),
    "rd_kafka_mock_set_group_consumer_heartbeat_interval_ms": (None, [_MOCK, c_int]),
    "rd_kafka_mock_start_request_tracking": (None, [_MOCK]),
    "rd_kafka_mock_stop_request_tracking": (None, [_MOCK]),
    "rd_kafka_mock_get_requests": (POINTER(c_void_p), [_MOCK, POINTER(c_size_t)]),
    "rd_kafka_mock_request_id": (c_int32, [c_void_p]),
    "rd_kafka_mock_request_api_key": (c_int16, [c_void_p]),
    "rd_kafka_mock_request_timestamp": (c_int64, [c_void_p]),
    "rd_kafka_mock_request_destroy_array": (None, [POINTER(c_void_p), c_size_t]),
    "rd_kafka_mock_clear_requests": (None, [_MOCK]),
}


def load_librdkafka(path: str | None = None) -> ctypes.CDLL:
    """Load librdkafka and declare the signatures above; fail clearly if a symbol is missing."""
    library = ctypes.CDLL(path or find_librdkafka())
    missing = [name for name in _SIGNATURES if not hasattr(library, name)]
    if missing:
        raise LibrdkafkaNotFound(f"librdkafka at {library._name} lacks mock-cluster symbols: {missing}")
    for name, (restype, argtypes) in _SIGNATURES.items():
        function = getattr(library, name)
        function.restype = restype
        if argtypes is not None:
            function.argtypes = argtypes
    return library

