"""Runs in: pytest, against Tansu (0.6). The AdminClient's methods on a real broker: what each does to the
cluster (seen through the AdminClient itself and through confluent-kafka's answers to the same questions).

What Tansu lacks, and where those methods are tested instead:
- CreatePartitions, AlterConfigs, DeleteAcls, ElectLeaders: not offered (ApiVersions): the calls fail fast with
  _UNSUPPORTED_FEATURE (tested here); requests and results in tests/unit/client/admin/test_requests.py.
- DeleteRecords: offered, but its memory store panics ("not yet implemented") and drops the connection:
  delete_records is tested in test_requests.py (and fails here with _TRANSPORT, as confluent-kafka's does).
- ListOffsets for OffsetSpec.max_timestamp(): drops the connection (tested on the mock cluster).
- ListGroups: ignores the state and type filters and reports no state (the filters' encoding is tested in
  test_requests.py); ConsumerGroupDescribe: answers for a classic group, without its members (so the
  DescribeGroups fallback and member assignments are tested in test_requests.py); no KIP-848 groups.
- validate_only: creates the topic anyway; DeleteGroups: deletes a group with members (no NON_EMPTY_GROUP); CreateAcls: answers no result (confluent-kafka asserts and aborts the
  process on it; kqactors fails the futures with _BAD_MSG); DescribeAcls and DescribeUserScramCredentials: answer
  nothing stored, so ACL and SCRAM round trips are tested in test_requests.py.
"""

from __future__ import annotations

import time

import pytest
from support.kafka_io import produce_numbered
from support.waiting import wait_until

import kqactors
import kqactors.admin as ka
from kqactors import ConsumerGroupTopicPartitions, TopicCollection, TopicPartition
from kqactors.errors import KafkaError

ck = pytest.importorskip("confluent_kafka")
ca = pytest.importorskip("confluent_kafka.admin")


@pytest.fixture(scope="module")
def admin(tansu):
    client = ka.AdminClient({"bootstrap.servers": tansu.bootstrap})
    yield client
    client.__exit__(None, None, None)


@pytest.fixture(scope="module")
def peer(tansu):
    return ca.AdminClient({"bootstrap.servers": tansu.bootstrap})


def code_of(future, timeout: float = 15) -> int:
    return future.exception(timeout).args[0].code()


def test_an_admin_client_runs_no_toppar_host(admin) -> None:
    assert admin._rt.host_keys == ["h0"]  # the main host only, whatever kqactors.hosts says


def test_create_list_describe_delete_topics(admin, peer, unique_topic) -> None:
    names = [unique_topic + "-a", unique_topic + "-b"]
    futures = admin.create_topics([ka.NewTopic(names[0], 3, 1),
                                   ka.NewTopic(names[1], 1, 1, config={"cleanup.policy": "compact"})],
                                  operation_timeout=10)
    assert set(futures) == set(names)
    assert [f.result(15) for f in futures.values()] == [None, None]
    cluster = admin.list_topics(timeout=10)
    assert len(cluster.topics[names[0]].partitions) == 3 and len(cluster.topics[names[1]].partitions) == 1
    assert names[0] in peer.list_topics(timeout=10).topics  # the peer sees them too

    again = admin.create_topics([ka.NewTopic(names[0], 3, 1)])
    assert code_of(again[names[0]]) == KafkaError.TOPIC_ALREADY_EXISTS

    described = admin.describe_topics(TopicCollection([names[0], unique_topic + "-none"]))
    topic = described[names[0]].result(15)
    theirs = peer.describe_topics(ck.TopicCollection([names[0]]))[names[0]].result(15)
    assert (topic.name, str(topic.topic_id), topic.is_internal) == (theirs.name, str(theirs.topic_id),
                                                                     theirs.is_internal)
    assert [(p.id, p.leader.id, [n.id for n in p.replicas], [n.id for n in p.isr]) for p in topic.partitions] == \
        [(p.id, p.leader.id, [n.id for n in p.replicas], [n.id for n in p.isr]) for p in theirs.partitions]
    assert str(topic.partitions[0].leader) == str(theirs.partitions[0].leader)
    assert code_of(described[unique_topic + "-none"]) == KafkaError.UNKNOWN_TOPIC_OR_PART

    deleted = admin.delete_topics(names, operation_timeout=10)
    assert [f.result(15) for f in deleted.values()] == [None, None]
    wait_until(lambda: not set(names) & set(admin.list_topics(timeout=10).topics), 10, "the topics to go")
    assert code_of(admin.delete_topics([names[0]])[names[0]]) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_describe_cluster_and_cluster_id(admin, peer) -> None:
    ours = admin.describe_cluster(include_authorized_operations=True).result(15)
    theirs = peer.describe_cluster(include_authorized_operations=True).result(15)
    assert ours.cluster_id == theirs.cluster_id == admin.cluster_id(timeout=10)
    assert str(ours.controller) == str(theirs.controller)
    assert sorted(str(n) for n in ours.nodes) == sorted(str(n) for n in theirs.nodes)
    assert [op.name for op in ours.authorized_operations or ()] == \
        [op.name for op in theirs.authorized_operations or ()]


def test_describe_and_incrementally_alter_configs(admin, peer, unique_topic) -> None:
    admin.create_topics([ka.NewTopic(unique_topic, 1, 1)])[unique_topic].result(15)
    resource = ka.ConfigResource(ka.ResourceType.TOPIC, unique_topic, incremental_configs=[
        ka.ConfigEntry("retention.ms", "123456", incremental_operation=ka.AlterConfigOpType.SET)])
    assert admin.incremental_alter_configs([resource])[resource].result(15) is None
    described = admin.describe_configs([ka.ConfigResource("topic", unique_topic)])
    configs = next(iter(described.values())).result(15)
    theirs = next(iter(peer.describe_configs([ca.ConfigResource("topic", unique_topic)]).values())).result(15)
    assert configs["retention.ms"].value == "123456"
    assert {n: (e.value, e.source, e.is_default, e.is_read_only, e.is_sensitive, sorted(e.synonyms))
            for n, e in configs.items()} == \
        {n: (e.value, e.source, e.is_default, e.is_read_only, e.is_sensitive, sorted(e.synonyms))
         for n, e in theirs.items()}
    broker = ka.ConfigResource("broker", str(admin.describe_cluster().result(15).controller.id))
    assert isinstance(admin.describe_configs([broker])[broker].result(15), dict)


def test_list_offsets_answers_as_confluent_kafka(admin, peer, tansu, unique_topic) -> None:
    admin.create_topics([ka.NewTopic(unique_topic, 2, 1)])[unique_topic].result(15)
    produce_numbered(tansu.bootstrap, unique_topic, 20, 2)
    now_ms = int(time.time() * 1000)
    specs = [(ka.OffsetSpec.earliest(), ca.OffsetSpec.earliest()), (ka.OffsetSpec.latest(), ca.OffsetSpec.latest()),
             (ka.OffsetSpec.for_timestamp(0), ca.OffsetSpec.for_timestamp(0)),
             (ka.OffsetSpec.for_timestamp(now_ms + 60000), ca.OffsetSpec.for_timestamp(now_ms + 60000))]
    for level in (kqactors.IsolationLevel.READ_UNCOMMITTED, kqactors.IsolationLevel.READ_COMMITTED):
        for ours_spec, theirs_spec in specs:
            ours = admin.list_offsets({TopicPartition(unique_topic, p): ours_spec for p in (0, 1)},
                                      isolation_level=level)
            theirs = peer.list_offsets({ck.TopicPartition(unique_topic, p): theirs_spec for p in (0, 1)},
                                       isolation_level=getattr(ck.IsolationLevel, level.name))
            got = {(tp.topic, tp.partition): f.result(15) for tp, f in ours.items()}
            expected = {(tp.topic, tp.partition): f.result(15) for tp, f in theirs.items()}
            assert {k: (v.offset, v.leader_epoch) for k, v in got.items()} == \
                {k: (v.offset, v.leader_epoch) for k, v in expected.items()}, (level, type(ours_spec).__name__)
    unknown = admin.list_offsets({TopicPartition(unique_topic, 7): ka.OffsetSpec.latest(),
                                  TopicPartition(unique_topic + "-none", 0): ka.OffsetSpec.latest()})
    assert sorted(code_of(f) for f in unknown.values()) == [KafkaError.UNKNOWN_TOPIC_OR_PART] * 2


def test_group_offsets_and_groups(admin, peer, unique_topic) -> None:
    group = unique_topic + "-group"
    admin.create_topics([ka.NewTopic(unique_topic, 2, 1)])[unique_topic].result(15)
    altered = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [
        TopicPartition(unique_topic, 0, 5), TopicPartition(unique_topic, 1, 7)])])
    result = altered[group].result(15)
    assert result.group_id == group
    assert sorted((tp.partition, tp.offset, tp.error) for tp in result.topic_partitions) == [(0, 5, None),
                                                                                            (1, 7, None)]

    some = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [TopicPartition(unique_topic, 1)])])
    assert [(tp.partition, tp.offset) for tp in some[group].result(15).topic_partitions] == [(1, 7)]
    everything = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(15)
    theirs = peer.list_consumer_group_offsets([ck.ConsumerGroupTopicPartitions(group)])[group].result(15)
    assert sorted((tp.topic, tp.partition, tp.offset) for tp in everything.topic_partitions) == \
        sorted((tp.topic, tp.partition, tp.offset) for tp in theirs.topic_partitions) == \
        [(unique_topic, 0, 5), (unique_topic, 1, 7)]

    listed = admin.list_consumer_groups().result(15)
    assert group in {g.group_id for g in listed.valid} and listed.errors == []
    assert group in {g.group_id for g in peer.list_consumer_groups().result(15).valid}

    ours = admin.describe_consumer_groups([group])[group].result(15)
    theirs = peer.describe_consumer_groups([group])[group].result(15)
    assert (ours.group_id, ours.state.name, ours.type.name, ours.is_simple_consumer_group, len(ours.members)) == \
        (theirs.group_id, theirs.state.name, theirs.type.name, theirs.is_simple_consumer_group, len(theirs.members))
    assert str(ours.coordinator) == str(theirs.coordinator)

    with pytest.warns(DeprecationWarning):
        legacy = admin.list_groups(group, timeout=10)
    assert [g.id for g in legacy] == [group] and legacy[0].broker.id == ours.coordinator.id
    assert legacy[0].protocol_type == "" and legacy[0].error is None
    with pytest.warns(DeprecationWarning):
        assert admin.list_groups(group + "-none", timeout=10) == []

    assert admin.delete_consumer_groups([group])[group].result(15) is None
    wait_until(lambda: group not in {g.group_id for g in admin.list_consumer_groups().result(15).valid}, 10,
               "the group to be deleted")


def test_describe_an_active_group(admin, peer, tansu, unique_topic) -> None:
    group = unique_topic + "-live"
    admin.create_topics([ka.NewTopic(unique_topic, 2, 1)])[unique_topic].result(15)
    # Tansu waits about half the session timeout for a join: a short one keeps the test short
    consumer = ck.Consumer({"bootstrap.servers": tansu.bootstrap, "group.id": group, "client.id": "describe-me",
                            "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    try:
        consumer.subscribe([unique_topic])
        wait_until(lambda: consumer.assignment(), 30, "an assignment", sleep=lambda s: consumer.poll(0.2))
        described = admin.describe_consumer_groups([group])[group].result(15)
        theirs = peer.describe_consumer_groups([group])[group].result(15)
        assert described.state == kqactors.ConsumerGroupState.STABLE and not described.is_simple_consumer_group
        # Tansu answers ConsumerGroupDescribe for a classic group, without its members (so neither client falls
        # back to DescribeGroups); the members of a DescribeGroups answer are tested in test_requests.py
        assert (described.type.name, len(described.members)) == (theirs.type.name, len(theirs.members))
    finally:
        consumer.close()


def test_methods_tansu_lacks_fail_fast(admin, unique_topic) -> None:
    admin.create_topics([ka.NewTopic(unique_topic, 1, 1)])[unique_topic].result(15)
    started = time.monotonic()
    failures = [
        admin.create_partitions([ka.NewPartitions(unique_topic, 2)])[unique_topic],
        admin.elect_leaders(kqactors.ElectionType.PREFERRED, [TopicPartition(unique_topic, 0)]),
        admin.delete_acls([ka.AclBindingFilter(ka.ResourceType.ANY, None, ka.ResourcePatternType.ANY, None, None,
                                               ka.AclOperation.ANY, ka.AclPermissionType.ANY)]).popitem()[1],
    ]
    with pytest.warns(DeprecationWarning):
        failures += list(admin.alter_configs([ka.ConfigResource("topic", unique_topic,
                                                                set_config={"retention.ms": "1"})]).values())
    assert [code_of(f) for f in failures] == [KafkaError._UNSUPPORTED_FEATURE] * 4
    assert time.monotonic() - started < 10


def test_what_tansu_answers_for_acls_and_scram(admin) -> None:
    binding = ka.AclBinding(ka.ResourceType.TOPIC, "t", ka.ResourcePatternType.LITERAL, "User:a", "*",
                            ka.AclOperation.READ, ka.AclPermissionType.ALLOW)
    assert code_of(admin.create_acls([binding])[binding]) == KafkaError._BAD_MSG  # no result in its answer
    everything = ka.AclBindingFilter(ka.ResourceType.ANY, None, ka.ResourcePatternType.ANY, None, None,
                                     ka.AclOperation.ANY, ka.AclPermissionType.ANY)
    assert admin.describe_acls(everything).result(15) == []
    info = ka.ScramCredentialInfo(ka.ScramMechanism.SCRAM_SHA_256, 4096)
    altered = admin.alter_user_scram_credentials([ka.UserScramCredentialUpsertion("alice", info, b"secret")])
    assert altered["alice"].result(15) is None
    assert admin.describe_user_scram_credentials().result(15) == {}


def test_delete_records_fails_as_confluent_kafkas(admin, tansu, unique_topic) -> None:
    admin.create_topics([ka.NewTopic(unique_topic, 1, 1)])[unique_topic].result(15)
    deleted = admin.delete_records([TopicPartition(unique_topic, 0, 1)], request_timeout=20)
    assert code_of(deleted[TopicPartition(unique_topic, 0)], 25) == KafkaError._TRANSPORT


def test_poll_serves_error_cb() -> None:
    errors: list = []
    client = ka.AdminClient({"bootstrap.servers": "127.0.0.1:1", "error_cb": errors.append})
    try:
        wait_until(lambda: client.poll(0.2) or errors, 15, "an error_cb call")
        assert errors[0].code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)
    finally:
        client.__exit__(None, None, None)


_APP = """
import json, sys, time
import kqactors.admin as ka
from kqactors import TopicCollection, TopicPartition, ConsumerGroupTopicPartitions

bootstrap, topic = sys.argv[1], sys.argv[2]
stats = []
admin = ka.AdminClient({"bootstrap.servers": bootstrap, "statistics.interval.ms": 100, "stats_cb": stats.append})
admin.create_topics([ka.NewTopic(topic, 1, 1)])[topic].result(15)
admin.describe_topics(TopicCollection([topic]))[topic].result(15)
admin.list_offsets({TopicPartition(topic, 0): ka.OffsetSpec.latest()}).popitem()[1].result(15)
admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions("g-" + topic, [TopicPartition(topic, 0, 0)])])
deadline = time.monotonic() + 10
while not stats and time.monotonic() < deadline:
    admin.poll(0.2)
print(json.dumps({"actor_modules": sorted(n for n in sys.modules if n.startswith("kqactors.actors")),
                  "stats": json.loads(stats[0]) if stats else None}))
# no close: the client is closed when the interpreter exits
"""


def test_an_admin_app_loads_no_actor_code_and_gets_statistics(tansu, unique_topic) -> None:
    import json
    import os
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", _APP, tansu.bootstrap, unique_topic], capture_output=True,
                         text=True, timeout=90, env=dict(os.environ))
    assert run.returncode == 0, run.stderr[-2000:]
    found = json.loads(run.stdout.strip().splitlines()[-1])
    assert found["actor_modules"] == []
    stats = found["stats"]
    assert stats is not None and stats["type"] == "producer" and stats["name"].endswith("#producer-1")
    assert stats["brokers"]
