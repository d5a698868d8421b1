"""Runs in: tests. The wire codec against real brokers: Tansu and the librdkafka mock cluster.

Uses the session fixtures ``tansu`` and ``mock_cluster`` and the per-test ``unique_topic`` from
tests/conftest.py. ApiVersions, Metadata and CreateTopics run at the versions negotiated with each broker.
"""

from __future__ import annotations

import pytest

from kqactors.errors import KafkaError, KafkaException
from kqactors.protocol.api import API_KEYS
from kqactors.protocol.blocking import BlockingConnection
from kqactors.protocol.generated.create_topics import CreatableTopic, CreateTopicsRequest
from kqactors.protocol.generated.metadata import MetadataRequest, MetadataRequestTopic

pytestmark = pytest.mark.integration

METADATA = API_KEYS["Metadata"]
CREATE_TOPICS = API_KEYS["CreateTopics"]


@pytest.fixture(params=["tansu", "mock_cluster"])
def broker(request):
    return request.param, request.getfixturevalue(request.param)


def _metadata_for(conn: BlockingConnection, topic: str, version: int | None = None):
    return conn.request("Metadata", MetadataRequest(topics=[MetadataRequestTopic(name=topic)]), version=version)


def test_api_versions_and_negotiation(broker):
    kind, cluster = broker
    with BlockingConnection.from_bootstrap(cluster.bootstrap, timeout=10) as conn:
        response = conn.api_versions()
        assert response.error_code == 0
        offered = {entry.api_key: (entry.min_version, entry.max_version) for entry in response.api_keys}
        for name in ("ApiVersions", "Metadata", "Produce", "Fetch"):
            key = API_KEYS[name]
            low, high = offered[key]
            assert low <= conn.versions.version_for(name) <= high
        if kind == "mock_cluster":
            # The mock tops out at ApiVersions v2: our v4 attempt must have fallen back, not failed.
            assert conn.versions.version_for("ApiVersions") == offered[API_KEYS["ApiVersions"]][1] <= 2


def test_metadata_at_negotiated_version(broker, unique_topic):
    kind, cluster = broker
    with BlockingConnection.from_bootstrap(cluster.bootstrap, timeout=10) as conn:
        if kind == "mock_cluster":
            cluster.create_topic(unique_topic, 3, 1)
        else:
            created = conn.request("CreateTopics", CreateTopicsRequest(
                topics=[CreatableTopic(name=unique_topic, num_partitions=3, replication_factor=1)],
                timeout_ms=10000))
            assert created.topics[0].error_code == 0
        metadata = _metadata_for(conn, unique_topic)
        assert metadata.brokers, "a broker list is always returned"
        ports = {b.port for b in metadata.brokers}
        assert conn.port in ports
        if kind == "mock_cluster":
            assert len(metadata.brokers) == 3
        (topic,) = metadata.topics
        assert topic.name == unique_topic and topic.error_code == 0
        assert sorted(p.partition_index for p in topic.partitions) == [0, 1, 2]
        broker_ids = {b.node_id for b in metadata.brokers}
        assert all(p.leader_id in broker_ids for p in topic.partitions)


def test_metadata_every_common_version_agrees(broker, unique_topic):
    kind, cluster = broker
    with BlockingConnection.from_bootstrap(cluster.bootstrap, timeout=10) as conn:
        if kind == "mock_cluster":
            cluster.create_topic(unique_topic, 2, 1)
        else:
            conn.request("CreateTopics", CreateTopicsRequest(
                topics=[CreatableTopic(name=unique_topic, num_partitions=2, replication_factor=1)]))
        offered = {e.api_key: (e.min_version, e.max_version) for e in conn.api_versions().api_keys}
        low, high = offered[METADATA]
        seen = set()
        for version in range(max(low, 1), min(high, conn.versions.version_for("Metadata")) + 1):
            metadata = _metadata_for(conn, unique_topic, version=version)
            (topic,) = metadata.topics
            seen.add((topic.name, len(topic.partitions)))
        assert seen == {(unique_topic, 2)}


def test_create_topics_on_tansu(tansu, unique_topic):
    with BlockingConnection.from_bootstrap(tansu.bootstrap, timeout=10) as conn:
        request = CreateTopicsRequest(
            topics=[CreatableTopic(name=unique_topic, num_partitions=2, replication_factor=1)], timeout_ms=10000)
        first = conn.request("CreateTopics", request)
        assert [(t.name, t.error_code) for t in first.topics] == [(unique_topic, 0)]
        again = conn.request("CreateTopics", request)
        assert again.topics[0].error_code == KafkaError.TOPIC_ALREADY_EXISTS
        (topic,) = _metadata_for(conn, unique_topic).topics
        assert len(topic.partitions) == 2


def test_create_topics_on_mock_is_rejected_cleanly(mock_cluster, unique_topic):
    request = CreateTopicsRequest(topics=[CreatableTopic(name=unique_topic, num_partitions=1, replication_factor=1)])
    with BlockingConnection.from_bootstrap(mock_cluster.bootstrap, timeout=5) as conn:
        with pytest.raises(KafkaException) as info:
            conn.request("CreateTopics", request)  # not offered by the mock: refused before sending
        assert info.value.error.code() == KafkaError.UNSUPPORTED_VERSION
        assert CREATE_TOPICS in conn.versions.unsupported
    with BlockingConnection.from_bootstrap(mock_cluster.bootstrap, timeout=5) as conn:
        conn.api_versions()
        # Forcing it anyway: the mock drops the connection; we get a transport error, not a hang.
        with pytest.raises(KafkaException) as info:
            conn.request("CreateTopics", request, version=4)
        assert info.value.error.code() in (KafkaError._TRANSPORT, KafkaError._TIMED_OUT)
