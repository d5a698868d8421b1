"""Shared pytest fixtures: real brokers (Tansu, librdkafka mock cluster) and unique topic names.

Runs in: the pytest process. Brokers start lazily, only when a test asks for them, so collection stays
fast; a fixture whose binary or library is missing skips the test with the reason.

- ``tansu``: one TansuBroker for the whole session (tests must use their own topics: ``unique_topic``).
- ``mock_cluster``: one 3-broker MockCluster for the session; only for tests that do not inject faults.
- ``mock_cluster_factory``: ``make(num_brokers=3)`` returns a fresh started MockCluster, stopped after the
  test; fault-injection tests use this so their errors, downed brokers and RTTs do not leak.
- ``fresh_cluster``: one such fresh MockCluster, shaped by the closest ``@pytest.mark.fresh_cluster(...)``
  (module ``pytestmark`` or the test's own): ``num_brokers``, ``topics={name: partitions}``, and any mock
  setting by method name, e.g. ``group_initial_rebalance_delay_ms=0``.
- ``cluster``: either test broker (mock and Tansu), for tests that must hold on both.
- ``unique_topic``: a topic name unique to this test run, e.g. ``t-test_produce-1a2b3c4d``.
"""

from __future__ import annotations

import os
import re
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest

# tests/support holds the sample actors the runtime's tests spawn by dotted path ("support.sample_actors:..."):
# the pytest process and every actor host it starts must be able to import it.
_TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_TESTS_DIR, os.environ.get("PYTHONPATH")) if p)

if TYPE_CHECKING:  # imported lazily below so collecting tests that need no broker stays cheap
    from kqactors.testing.mock_cluster import MockCluster
    from kqactors.testing.tansu import TansuBroker


def _require_tansu() -> None:
    from kqactors.testing.tansu import TansuNotFound, find_tansu_binary

    try:
        find_tansu_binary()
    except TansuNotFound as exc:
        pytest.skip(f"Tansu broker unavailable: {exc}")


def _require_librdkafka() -> None:
    from kqactors.testing.librdkafka import LibrdkafkaNotFound, find_librdkafka

    try:
        find_librdkafka()
    except LibrdkafkaNotFound as exc:
        pytest.skip(f"librdkafka mock cluster unavailable: {exc}")


@pytest.fixture(scope="session")
def tansu() -> Iterator[TansuBroker]:
    """A running Tansu broker shared by the session (in-memory; bootstrap at ``tansu.bootstrap``)."""
    _require_tansu()
    from kqactors.testing.tansu import TansuBroker

    with TansuBroker() as broker:
        yield broker


@pytest.fixture(scope="session")
def mock_cluster() -> Iterator[MockCluster]:
    """A running 3-broker librdkafka mock cluster shared by the session. No fault injection here."""
    _require_librdkafka()
    from kqactors.testing.mock_cluster import MockCluster

    with MockCluster(num_brokers=3) as cluster:
        yield cluster


@pytest.fixture
def mock_cluster_factory() -> Iterator[Callable[..., MockCluster]]:
    """Call ``make(num_brokers=3)`` for a fresh started mock cluster; all are stopped after the test."""
    _require_librdkafka()
    from kqactors.testing.mock_cluster import MockCluster

    started: list[MockCluster] = []

    def make(num_brokers: int = 3) -> MockCluster:
        cluster = MockCluster(num_brokers=num_brokers)
        started.append(cluster)
        return cluster.start()

    yield make
    for cluster in started:
        cluster.stop()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "fresh_cluster(num_brokers=3, topics={}, **settings): the shape of the "
                                       "test's own mock cluster (the fresh_cluster fixture)")


@pytest.fixture
def fresh_cluster(request: pytest.FixtureRequest, mock_cluster_factory: Callable[..., MockCluster]) -> MockCluster:
    """A started mock cluster of this test's own, shaped by the closest ``fresh_cluster`` marker: ``num_brokers``
    (3), ``topics`` ({name: partitions}, created first) and mock settings by method name, applied in order."""
    marker = request.node.get_closest_marker("fresh_cluster")
    options = dict(marker.kwargs) if marker is not None else {}
    topics = options.pop("topics", {})
    cluster = mock_cluster_factory(options.pop("num_brokers", 3))
    for setting, value in options.items():
        getattr(cluster, setting)(value)
    for topic, partitions in topics.items():
        cluster.create_topic(topic, partitions)
    return cluster


@pytest.fixture
def unique_topic(request: pytest.FixtureRequest) -> str:
    """A legal Kafka topic name unique to this test invocation."""
    test_name = re.sub(r"[^a-zA-Z0-9._-]+", "_", request.node.name)[:100]
    return f"t-{test_name}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(params=["mock", "tansu"])
def cluster(request: pytest.FixtureRequest):
    """Either test broker, for tests that must hold on both (a test that needs a cluster of its own, to inject
    faults or change its settings, asks for ``fresh_cluster`` instead)."""
    if request.param == "mock":
        return request.getfixturevalue("mock_cluster")
    return request.getfixturevalue("tansu")


@pytest.fixture(autouse=True)
def _restore_kqactors_logging() -> Iterator[None]:
    """Code under test may route the ``kqactors`` loggers (the ingest daemon's setup_logging, a log/<host>
    forwarder running in-process): put them back after each test, so caplog sees the next test's records."""
    import logging

    logger = logging.getLogger("kqactors")
    saved = (logger.level, logger.propagate, list(logger.handlers))
    yield
    logger.setLevel(saved[0])
    logger.propagate = saved[1]
    logger.handlers[:] = saved[2]
