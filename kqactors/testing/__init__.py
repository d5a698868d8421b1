"""Real brokers as test fixtures: a Tansu launcher and the librdkafka mock cluster (via ctypes).

Runs in: test processes and the ``kqactors broker`` CLI. Nothing here is imported by the client itself.
"""

from kqactors.testing.librdkafka import LibrdkafkaNotFound, find_librdkafka
from kqactors.testing.mock_cluster import MockCluster, MockRequest
from kqactors.testing.probe import ApiVersionsError, api_versions, wait_until_ready
from kqactors.testing.tansu import TansuBroker, TansuNotFound, find_tansu_binary

__all__ = [
    "ApiVersionsError",
    "LibrdkafkaNotFound",
    "MockCluster",
    "MockRequest",
    "TansuBroker",
    "TansuNotFound",
    "api_versions",
    "find_librdkafka",
    "find_tansu_binary",
    "wait_until_ready",
]
