"""Runs in: pytest. What each AdminClient method sends and how it reads the answer, without a broker: the
method's planned calls (kqactors.ops.admin) are captured, encoded at every version their request kind speaks
and read back with the generated codec of the Kafka specs (field by field); synthetic responses, encoded with
the specs' codec and decoded by the kind, are fed to the method's completion and the futures checked. This is
the whole test of the methods neither test broker supports (create_partitions, alter_configs, delete_acls,
delete_records, elect_leaders) and of the result shapes of the others."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

import kqactors
import kqactors.admin as ka
from kqactors import ConsumerGroupTopicPartitions, TopicCollection, TopicPartition
from kqactors.actors.admin import rows_args
from kqactors.client.admin.acls import salted_password
from kqactors.client.admin.client import AdminClient
from kqactors.errors import KafkaError, KafkaException
from kqactors.ops import admin as aops
from kqactors.protocol.errors import EncodeError
from kqactors.protocol.generated import API_TABLE
from kqactors.protocol.requests import REQUEST_KINDS


class Planner:
    """An AdminClient without processes: ``_submit`` records what would be sent."""

    def __init__(self) -> None:
        self.client = AdminClient.__new__(AdminClient)
        self.client._default_timeout_ms = 60000
        self.client._closed = False
        self.sent: list[tuple[str, list[dict[str, Any]], Any, Any]] = []
        self.client._submit = lambda op, calls, options, complete, futures: self.sent.append(
            (op, calls, options, complete))

    def last(self) -> tuple[str, list[dict[str, Any]], Any, Any]:
        return self.sent[-1]


@pytest.fixture
def planner() -> Planner:
    return Planner()


def _classes(kind_name: str) -> tuple[Any, Any]:
    kind = REQUEST_KINDS[kind_name]
    _name, module, request, response, _valid, _flex = API_TABLE[kind.api_key]
    mod = importlib.import_module(f"kqactors.protocol.generated.{module}")
    return getattr(mod, request), getattr(mod, response)


def encoded(kind_name: str, args: dict[str, Any], low: int = 0) -> dict[int, Any]:
    """{version: the request as the specs' codec reads it back} for every version of the kind from ``low`` (the
    versions below cannot carry what the args ask for: the codec refuses them, as the second loop checks)."""
    kind = REQUEST_KINDS[kind_name]
    request_cls, _ = _classes(kind_name)
    for version in range(kind.min_version, max(low, kind.min_version)):
        with pytest.raises(EncodeError):
            kind.encode(version, args, [])
    out = {}
    for version in range(max(low, kind.min_version), kind.max_version + 1):
        body = b"".join(bytes(chunk) for chunk in kind.encode(version, args, []))
        out[version] = request_cls.decode(body, version)
    return out


def answer(kind_name: str, version: int, **fields: Any) -> dict[str, Any]:
    """An outcome carrying ``fields`` as the broker would answer at ``version`` (through the kind's decode)."""
    _, response_cls = _classes(kind_name)
    from kqactors.protocol.requests import _struct_from

    body = _struct_from(response_cls, fields).encode(version)
    return aops.outcome(0, "", REQUEST_KINDS[kind_name].decode(version, body), 1, [1, "h", 9092, None])


def failed(code: int, reason: str = "") -> dict[str, Any]:
    return aops.outcome(code, reason)


def error_code(future) -> int:
    exc = future.exception(timeout=0)
    assert isinstance(exc, KafkaException), exc
    return exc.args[0].code()


# ---- topics -------------------------------------------------------------------------------------------------

def test_create_topics(planner: Planner) -> None:
    futures = planner.client.create_topics(
        [ka.NewTopic("a", 3, 2, config={"cleanup.policy": "compact"}), ka.NewTopic("b", 2, -1, [[1, 2], [2, 3]])],
        operation_timeout=5, validate_only=True)
    op, calls, _options, complete = planner.last()
    assert op == aops.CREATETOPICS and calls[0]["target"] == ["controller"]
    for _version, request in encoded("admin:CreateTopics", calls[0]["args"], low=1).items():  # v0: no validate_only
        a, b = request.topics
        assert (a.name, a.num_partitions, a.replication_factor) == ("a", 3, 2)
        assert [(c.name, c.value) for c in a.configs] == [("cleanup.policy", "compact")]
        assert (b.num_partitions, b.replication_factor) == (-1, -1)  # the counts travel as -1 with an assignment
        assert [(x.partition_index, x.broker_ids) for x in b.assignments] == [(0, [1, 2]), (1, [2, 3])]
        assert request.timeout_ms == 5000
        assert request.validate_only
    complete([answer("admin:CreateTopics", 5, topics=[
        {"name": "a", "error_code": 0}, {"name": "b", "error_code": 36, "error_message": "exists"}])])
    assert futures["a"].result(0) is None
    assert error_code(futures["b"]) == KafkaError.TOPIC_ALREADY_EXISTS
    assert futures["b"].exception(0).args[0].str() == "exists"


def test_create_topics_without_waiting_ignores_request_timed_out(planner: Planner) -> None:
    futures = planner.client.create_topics([ka.NewTopic("a", 1, 1)], operation_timeout=0)
    planner.last()[3]([answer("admin:CreateTopics", 2, topics=[{"name": "a", "error_code": 7}])])
    assert futures["a"].result(0) is None
    futures = planner.client.create_topics([ka.NewTopic("a", 1, 1)])
    planner.last()[3]([answer("admin:CreateTopics", 2, topics=[{"name": "a", "error_code": 7}])])
    assert error_code(futures["a"]) == KafkaError.REQUEST_TIMED_OUT


def test_a_failed_call_fails_every_future(planner: Planner) -> None:
    futures = planner.client.create_topics([ka.NewTopic("a", 1, 1), ka.NewTopic("b", 1, 1)])
    planner.last()[3]([failed(KafkaError._TIMED_OUT, "Failed while waiting for controller: Local: Timed out")])
    for future in futures.values():
        assert error_code(future) == KafkaError._TIMED_OUT
        assert future.exception(0).args[0].str() == "Failed while waiting for controller: Local: Timed out"


def test_delete_topics(planner: Planner) -> None:
    futures = planner.client.delete_topics(["a", "b"], operation_timeout=1.5)
    _op, calls, _options, complete = planner.last()
    for version, request in encoded("admin:DeleteTopics", calls[0]["args"]).items():
        names = [t.name for t in request.topics] if version >= 6 else request.topic_names
        assert names == ["a", "b"] and request.timeout_ms == 1500
    complete([answer("admin:DeleteTopics", 6, responses=[{"name": "a", "error_code": 0},
                                                        {"name": "b", "error_code": 3}])])
    assert futures["a"].result(0) is None and error_code(futures["b"]) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_create_partitions(planner: Planner) -> None:
    futures = planner.client.create_partitions([ka.NewPartitions("a", 4, [[1], [2]]), ka.NewPartitions("b", 2)],
                                               validate_only=True, operation_timeout=2)
    _op, calls, _options, complete = planner.last()
    assert calls[0]["target"] == ["controller"]
    for _version, request in encoded("admin:CreatePartitions", calls[0]["args"]).items():
        a, b = request.topics
        assert (a.name, a.count, [x.broker_ids for x in a.assignments]) == ("a", 4, [[1], [2]])
        assert (b.name, b.count, b.assignments) == ("b", 2, None)
        assert request.validate_only and request.timeout_ms == 2000
    complete([answer("admin:CreatePartitions", 3, results=[{"name": "a", "error_code": 0},
                                                           {"name": "b", "error_code": 37, "error_message": "no"}])])
    assert futures["a"].result(0) is None and error_code(futures["b"]) == KafkaError.INVALID_PARTITIONS


def test_describe_topics(planner: Planner) -> None:
    futures = planner.client.describe_topics(TopicCollection(["a", "b"]), include_authorized_operations=True)
    _op, calls, _options, complete = planner.last()
    for version, request in encoded("admin:Metadata", calls[0]["args"]).items():
        assert [t.name for t in request.topics] == ["a", "b"]
        assert request.allow_auto_topic_creation is (version < 4)  # v4+ says "do not create"; below, not sent
        assert request.include_topic_authorized_operations is (version >= 8)
    topic_id = bytes(range(16))
    complete([answer("admin:Metadata", 12, brokers=[{"node_id": 1, "host": "h1", "port": 1, "rack": "r"},
                                                    {"node_id": 2, "host": "h2", "port": 2}],
                     controller_id=1, cluster_id="c",
                     topics=[{"name": "a", "error_code": 0, "topic_id": topic_id, "is_internal": False,
                              "topic_authorized_operations": (1 << 3) | (1 << 8),
                              "partitions": [{"partition_index": 1, "leader_id": 2, "replica_nodes": [2, 1],
                                              "isr_nodes": [2]},
                                             {"partition_index": 0, "leader_id": 1, "replica_nodes": [1, 2],
                                              "isr_nodes": [1, 2]}]},
                             {"name": "b", "error_code": 3, "partitions": []}])])
    described = futures["a"].result(0)
    assert described.name == "a" and str(described.topic_id) == str(kqactors.Uuid(
        int.from_bytes(topic_id[:8], "big", signed=True), int.from_bytes(topic_id[8:], "big", signed=True)))
    assert [p.id for p in described.partitions] == [0, 1]
    first = described.partitions[0]
    assert (first.leader.id, first.leader.host, first.leader.rack) == (1, "h1", "r")
    assert [n.id for n in first.replicas] == [1, 2] and [n.id for n in described.partitions[1].isr] == [2]
    assert described.authorized_operations == [ka.AclOperation.READ, ka.AclOperation.DESCRIBE]
    assert error_code(futures["b"]) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_describe_cluster(planner: Planner) -> None:
    future = planner.client.describe_cluster()
    _op, calls, _options, complete = planner.last()
    assert encoded("admin:Metadata", calls[0]["args"])[12].topics == []
    complete([answer("admin:Metadata", 10, brokers=[{"node_id": 1, "host": "h", "port": 9}], controller_id=1,
                     cluster_id="cid", cluster_authorized_operations=-2147483648)])
    result = future.result(0)
    assert (result.cluster_id, result.controller.id, [n.port for n in result.nodes]) == ("cid", 1, [9])
    assert result.authorized_operations is None


def test_delete_records(planner: Planner) -> None:
    futures = planner.client.delete_records([TopicPartition("a", 0, 5), TopicPartition("a", 1, -1),
                                             TopicPartition("b", 0, 7)], operation_timeout=3)
    _op, calls, _options, complete = planner.last()
    call = calls[0]
    assert call["target"] == ["leaders"] and call["rows"] == [["a", 0, 5], ["a", 1, -1], ["b", 0, 7]]
    args = rows_args(call["kind"], call["args"], call["rows"])
    for _version, request in encoded("admin:DeleteRecords", args).items():
        assert [(t.name, [(p.partition_index, p.offset) for p in t.partitions]) for t in request.topics] == \
            [("a", [(0, 5), (1, -1)]), ("b", [(0, 7)])]
        assert request.timeout_ms == 3000
    complete([aops.outcome(0, "", {"rows": [["a", 0, 0, 5], ["a", 1, 0, 9], ["b", 0, 6]]})])
    assert futures[TopicPartition("a", 0)].result(0).low_watermark == 5
    assert futures[TopicPartition("a", 1)].result(0).low_watermark == 9
    assert error_code(futures[TopicPartition("b", 0)]) == KafkaError.NOT_LEADER_OR_FOLLOWER


def test_list_offsets(planner: Planner) -> None:
    asked = {TopicPartition("a", 0): ka.OffsetSpec.earliest(), TopicPartition("a", 1): ka.OffsetSpec.latest(),
             TopicPartition("a", 2): ka.OffsetSpec.max_timestamp(), TopicPartition("b", 0): ka.OffsetSpec(1000)}
    futures = planner.client.list_offsets(asked, isolation_level=kqactors.IsolationLevel.READ_COMMITTED)
    assert [tp.offset for tp in futures] == [-2, -1, -3, 1000]  # confluent-kafka's keys carry the spec's value
    _op, calls, _options, complete = planner.last()
    call = calls[0]
    args = rows_args(call["kind"], call["args"], call["rows"])
    for _version, request in encoded("ListOffsets", args, low=2).items():  # v1: no isolation level
        assert request.isolation_level == 1
        assert [(t.name, [(p.partition_index, p.timestamp) for p in t.partitions]) for t in request.topics] == \
            [("a", [(0, -2), (1, -1), (2, -3)]), ("b", [(0, 1000)])]
    complete([aops.outcome(0, "", {"rows": [["a", 0, 0, 0, -1, 3], ["a", 1, 0, 10, -1, 3], ["a", 2, 0, 4, 99, -1],
                                            ["b", 0, 3]]})])
    results = {(tp.topic, tp.partition): f for tp, f in futures.items()}
    assert (results[("a", 1)].result(0).offset, results[("a", 1)].result(0).leader_epoch) == (10, 3)
    info = results[("a", 2)].result(0)
    assert (info.offset, info.timestamp, info.leader_epoch) == (4, 99, None)
    assert error_code(results[("b", 0)]) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_elect_leaders(planner: Planner) -> None:
    future = planner.client.elect_leaders(kqactors.ElectionType.UNCLEAN, [TopicPartition("a", 0), TopicPartition("a", 1)],
                                          operation_timeout=4)
    _op, calls, _options, complete = planner.last()
    kind = REQUEST_KINDS["admin:ElectLeaders"]
    request_cls, _ = _classes("admin:ElectLeaders")
    for version in (1, 2):  # v0 has no election type: only a PREFERRED election encodes at v0
        body = b"".join(kind.encode(version, calls[0]["args"], []))
        request = request_cls.decode(body, version)
        assert request.election_type == 1 and request.timeout_ms == 4000
        assert [(t.topic, t.partitions) for t in request.topic_partitions] == [("a", [0, 1])]
    with pytest.raises(Exception):  # noqa: B017 - the codec refuses an UNCLEAN election at v0
        kind.encode(0, calls[0]["args"], [])
    complete([answer("admin:ElectLeaders", 1, error_code=0, replica_election_results=[
        {"topic": "a", "partition_result": [{"partition_id": 0, "error_code": 0},
                                            {"partition_id": 1, "error_code": 84, "error_message": "none"}]}])])
    result = future.result(0)
    assert result[TopicPartition("a", 0)] is None
    assert result[TopicPartition("a", 1)].code() == KafkaError.ELECTION_NOT_NEEDED
    whole = planner.client.elect_leaders(kqactors.ElectionType.PREFERRED)
    assert encoded("admin:ElectLeaders", planner.last()[1][0]["args"])[2].topic_partitions is None
    planner.last()[3]([answer("admin:ElectLeaders", 2, error_code=41)])
    assert error_code(whole) == KafkaError.NOT_CONTROLLER


# ---- configs ------------------------------------------------------------------------------------------------

def test_describe_configs_routes_and_reads_sources(planner: Planner) -> None:
    topic, broker = ka.ConfigResource("topic", "t"), ka.ConfigResource("broker", "2")
    futures = planner.client.describe_configs([topic, broker])
    _op, calls, _options, complete = planner.last()
    assert calls[0]["target"] == ["broker", 2]  # a BROKER resource: the whole request goes to that broker
    for version, request in encoded("admin:DescribeConfigs", calls[0]["args"]).items():
        assert [(r.resource_type, r.resource_name, r.configuration_keys) for r in request.resources] == \
            [(2, "t", None), (4, "2", None)]
        assert request.include_synonyms is (version >= 1)
    complete([answer("admin:DescribeConfigs", 1, results=[
        {"error_code": 0, "resource_type": 2, "resource_name": "t", "configs": [
            {"name": "retention.ms", "value": "5", "read_only": False, "config_source": 1, "is_sensitive": False,
             "synonyms": [{"name": "retention.ms", "value": "5", "source": 1},
                          {"name": "log.retention.ms", "value": None, "source": 5}]},
            {"name": "cleanup.policy", "value": "delete", "read_only": True, "config_source": 5}]},
        {"error_code": 29, "error_message": "denied", "resource_type": 4, "resource_name": "2"}])])
    configs = futures[topic].result(0)
    entry = configs["retention.ms"]
    assert (entry.value, entry.source, entry.is_default, entry.is_read_only) == ("5", 1, False, False)
    assert set(entry.synonyms) == {"retention.ms", "log.retention.ms"}
    assert entry.synonyms["log.retention.ms"].is_synonym and entry.synonyms["log.retention.ms"].source == 5
    assert configs["cleanup.policy"].is_default and configs["cleanup.policy"].is_read_only
    assert error_code(futures[broker]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    futures = planner.client.describe_configs([topic], broker=3)
    assert planner.last()[1][0]["target"] == ["broker", 3]
    planner.client.describe_configs([topic])
    assert planner.last()[1][0]["target"] == ["controller"]
    futures = planner.client.describe_configs([topic])
    planner.last()[3]([answer("admin:DescribeConfigs", 0, results=[
        {"error_code": 0, "resource_type": 2, "resource_name": "t",
         "configs": [{"name": "a", "value": "1", "is_default": True}]}])])
    assert futures[topic].result(0)["a"].source == ka.CONFIG_SOURCE_DEFAULT_CONFIG  # v0: is_default → DEFAULT


def test_alter_configs(planner: Planner) -> None:
    resource = ka.ConfigResource("topic", "t", set_config={"retention.ms": "10"})
    with pytest.warns(DeprecationWarning):
        futures = planner.client.alter_configs([resource], validate_only=True)
    _op, calls, _options, complete = planner.last()
    for _version, request in encoded("admin:AlterConfigs", calls[0]["args"]).items():
        assert request.validate_only
        assert [(r.resource_type, r.resource_name, [(c.name, c.value) for c in r.configs])
                for r in request.resources] == [(2, "t", [("retention.ms", "10")])]
    complete([answer("admin:AlterConfigs", 1, responses=[{"error_code": 0, "resource_type": 2,
                                                          "resource_name": "t"}])])
    assert futures[resource].result(0) is None


def test_incremental_alter_configs(planner: Planner) -> None:
    resource = ka.ConfigResource("broker", "1", incremental_configs=[
        ka.ConfigEntry("log.cleaner.threads", "2", incremental_operation=ka.AlterConfigOpType.SET),
        ka.ConfigEntry("x", "ignored", incremental_operation=ka.AlterConfigOpType.DELETE)])
    futures = planner.client.incremental_alter_configs([resource])
    _op, calls, _options, complete = planner.last()
    assert calls[0]["target"] == ["broker", 1]
    for _version, request in encoded("admin:IncrementalAlterConfigs", calls[0]["args"]).items():
        assert [(c.name, c.config_operation, c.value) for c in request.resources[0].configs] == \
            [("log.cleaner.threads", 0, "2"), ("x", 1, None)]
    complete([answer("admin:IncrementalAlterConfigs", 1, responses=[
        {"error_code": 40, "error_message": "bad", "resource_type": 4, "resource_name": "1"}])])
    assert error_code(futures[resource]) == KafkaError.INVALID_CONFIG


# ---- groups -------------------------------------------------------------------------------------------------

def test_list_consumer_groups(planner: Planner) -> None:
    future = planner.client.list_consumer_groups(states={kqactors.ConsumerGroupState.STABLE,
                                                         kqactors.ConsumerGroupState.EMPTY},
                                                 types={kqactors.ConsumerGroupType.CONSUMER})
    _op, calls, _options, complete = planner.last()
    assert calls[0]["target"] == ["all"]
    request = encoded("admin:ListGroups", calls[0]["args"], low=5)[5]  # v4 filters by state, v5 by type too
    assert (request.states_filter, request.types_filter) == (["Empty", "Stable"], ["consumer"])
    one = answer("admin:ListGroups", 5, error_code=0, groups=[
        {"group_id": "g1", "protocol_type": "consumer", "group_state": "Stable", "group_type": "classic"},
        {"group_id": "s", "protocol_type": "", "group_state": "Empty", "group_type": "Classic"},
        {"group_id": "connect", "protocol_type": "connect", "group_state": "Stable", "group_type": "classic"}])
    two = answer("admin:ListGroups", 4, error_code=0, groups=[{"group_id": "g2", "protocol_type": "consumer",
                                                               "group_state": "PreparingRebalance"}])
    complete([aops.outcome(0, "", [[1, 0, "", one["result"]], [2, 0, "", two["result"]],
                                   [3, KafkaError._TRANSPORT, "down", None]])])
    result = future.result(0)
    listed = {g.group_id: g for g in result.valid}
    assert set(listed) == {"g1", "s", "g2"}  # not a consumer group: not listed
    assert listed["s"].is_simple_consumer_group and not listed["g1"].is_simple_consumer_group
    assert (listed["g1"].state, listed["g1"].type) == (kqactors.ConsumerGroupState.STABLE,
                                                       kqactors.ConsumerGroupType.CLASSIC)
    assert listed["g2"].type == kqactors.ConsumerGroupType.UNKNOWN  # v4 has no type
    assert listed["g2"].state == kqactors.ConsumerGroupState.PREPARING_REBALANCING
    assert [e.code() for e in result.errors] == [KafkaError._TRANSPORT]


def _assignment(partitions: list[tuple[str, int]]) -> bytes:
    from kqactors.core.group.member_metadata import encode_assignment

    return encode_assignment(partitions)


def test_describe_consumer_groups_falls_back_to_classic(planner: Planner) -> None:
    futures = planner.client.describe_consumer_groups(["new", "old", "gone"], include_authorized_operations=True)
    _op, calls, options, complete = planner.last()
    assert [c["target"] for c in calls] == [["coordinator", "new"], ["coordinator", "old"], ["coordinator", "gone"]]
    assert encoded("admin:ConsumerGroupDescribe", calls[0]["args"])[0].group_ids == ["new"]
    new = answer("admin:ConsumerGroupDescribe", 0, groups=[{
        "group_id": "new", "group_state": "Stable", "assignor_name": "uniform", "authorized_operations": 1 << 8,
        "members": [{"member_id": "m", "client_id": "c", "client_host": "/h", "instance_id": None,
                     "assignment": {"topic_partitions": [{"topic_id": bytes(16), "topic_name": "t", "partitions": [0, 1]}]},
                     "target_assignment": {"topic_partitions": []}}]}])
    old = answer("admin:ConsumerGroupDescribe", 0, groups=[{"group_id": "old", "error_code": 69}])
    complete([new, old, failed(KafkaError._UNSUPPORTED_FEATURE, "broker 1 does not support it")])
    described = futures["new"].result(0)
    assert (described.type, described.state, described.partition_assignor) == (
        kqactors.ConsumerGroupType.CONSUMER, kqactors.ConsumerGroupState.STABLE, "uniform")
    assert [(tp.topic, tp.partition) for tp in described.members[0].assignment.topic_partitions] == [("t", 0), ("t", 1)]
    assert described.members[0].target_assignment.topic_partitions == []
    assert described.coordinator.host == "h" and described.authorized_operations == [ka.AclOperation.DESCRIBE]
    _op, classic_calls, _options, classic_complete = planner.last()
    assert [c["kind"] for c in classic_calls] == ["admin:DescribeGroups"] * 2
    assert [c["target"] for c in classic_calls] == [["coordinator", "old"], ["coordinator", "gone"]]
    for version, request in encoded("admin:DescribeGroups", classic_calls[0]["args"]).items():
        assert request.groups == ["old"] and request.include_authorized_operations is (version >= 3)
    old_classic = answer("admin:DescribeGroups", 4, groups=[{
        "error_code": 0, "group_id": "old", "group_state": "Stable", "protocol_type": "consumer",
        "protocol_data": "range", "authorized_operations": -2147483648,
        "members": [{"member_id": "m1", "group_instance_id": "i1", "client_id": "c1", "client_host": "/h1",
                     "member_metadata": b"", "member_assignment": _assignment([("t", 2)])}]}])
    gone = answer("admin:DescribeGroups", 4, groups=[{"error_code": 0, "group_id": "gone", "group_state": "Dead",
                                                     "protocol_type": "", "protocol_data": "", "members": []}])
    classic_complete([old_classic, gone])
    old_described = futures["old"].result(0)
    assert (old_described.type, old_described.partition_assignor) == (kqactors.ConsumerGroupType.CLASSIC, "range")
    member = old_described.members[0]
    assert (member.member_id, member.group_instance_id, member.host) == ("m1", "i1", "/h1")
    assert [(tp.topic, tp.partition) for tp in member.assignment.topic_partitions] == [("t", 2)]
    assert old_described.authorized_operations is None
    assert futures["gone"].result(0).state == kqactors.ConsumerGroupState.DEAD


def test_delete_consumer_groups(planner: Planner) -> None:
    futures = planner.client.delete_consumer_groups(["a", "b"])
    _op, calls, _options, complete = planner.last()
    assert [encoded("admin:DeleteGroups", c["args"])[2].groups_names for c in calls] == [["a"], ["b"]]
    complete([answer("admin:DeleteGroups", 2, results=[{"group_id": "a", "error_code": 0}]),
              answer("admin:DeleteGroups", 2, results=[{"group_id": "b", "error_code": 68}])])
    assert futures["a"].result(0) is None and error_code(futures["b"]) == KafkaError.NON_EMPTY_GROUP


def test_list_consumer_group_offsets(planner: Planner) -> None:
    request = [ConsumerGroupTopicPartitions("g", [TopicPartition("a", 0), TopicPartition("a", 1)])]
    futures = planner.client.list_consumer_group_offsets(request, require_stable=True)
    _op, calls, _options, complete = planner.last()
    for version, fetch in encoded("admin:OffsetFetch", calls[0]["args"]).items():
        group, topics = (fetch.groups[0].group_id, fetch.groups[0].topics) if version >= 8 else \
            (fetch.group_id, fetch.topics)
        assert group == "g" and [(t.name, t.partition_indexes) for t in topics] == [("a", [0, 1])]
        assert fetch.require_stable is (version >= 7)
    complete([answer("admin:OffsetFetch", 7, error_code=0, topics=[{"name": "a", "partitions": [
        {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": 2, "metadata": "m", "error_code": 0},
        {"partition_index": 1, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
         "error_code": 0}]}])])
    result = futures["g"].result(0)
    assert result.group_id == "g"
    first, second = result.topic_partitions
    assert (first.offset, first.leader_epoch, first.metadata, first.error) == (5, 2, "m", None)
    assert second.offset == ka.OFFSET_INVALID and second.leader_epoch is None
    everything = planner.client.list_consumer_group_offsets([ConsumerGroupTopicPartitions("g")])
    every = encoded("admin:OffsetFetch", planner.last()[1][0]["args"], low=2)  # v1: no "all"
    assert every[7].topics is None and every[9].groups[0].topics is None
    planner.last()[3]([answer("admin:OffsetFetch", 7, error_code=16)])
    assert error_code(everything["g"]) == KafkaError.NOT_COORDINATOR
    batched = planner.client.list_consumer_group_offsets([ConsumerGroupTopicPartitions("g")])
    planner.last()[3]([answer("admin:OffsetFetch", 9, groups=[{"group_id": "g", "error_code": 0, "topics": [
        {"name": "a", "partitions": [{"partition_index": 3, "committed_offset": 8, "committed_leader_epoch": -1,
                                      "metadata": None, "error_code": 0}]}]}])])
    assert [(tp.topic, tp.partition, tp.offset) for tp in batched["g"].result(0).topic_partitions] == [("a", 3, 8)]


def test_alter_consumer_group_offsets(planner: Planner) -> None:
    partition = TopicPartition("a", 0, 7)
    partition.leader_epoch = 3
    futures = planner.client.alter_consumer_group_offsets([ConsumerGroupTopicPartitions("g", [
        partition, TopicPartition("a", 1, 9)])])
    _op, calls, _options, complete = planner.last()
    for version, commit in encoded("admin:OffsetCommit", calls[0]["args"]).items():
        assert commit.group_id == "g" and commit.generation_id_or_member_epoch == -1 and commit.member_id == ""
        parts = commit.topics[0].partitions
        assert [(p.partition_index, p.committed_offset) for p in parts] == [(0, 7), (1, 9)]
        assert parts[0].committed_leader_epoch == (3 if version >= 6 else -1)
    complete([answer("admin:OffsetCommit", 8, topics=[{"name": "a", "partitions": [
        {"partition_index": 0, "error_code": 0}, {"partition_index": 1, "error_code": 3}]}])])
    result = futures["g"].result(0)
    assert [(tp.partition, tp.offset, tp.error) for tp in result.topic_partitions][0] == (0, 7, None)
    assert result.topic_partitions[1].error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


# ---- ACLs and SCRAM -----------------------------------------------------------------------------------------

def _binding(**kw: Any) -> ka.AclBinding:
    fields = {"restype": ka.ResourceType.TOPIC, "name": "t", "pattern": ka.ResourcePatternType.PREFIXED,
              "principal": "User:a", "host": "*", "operation": ka.AclOperation.WRITE,
              "permission": ka.AclPermissionType.DENY, **kw}
    return ka.AclBinding(*fields.values())


def test_acls(planner: Planner) -> None:
    first, second = _binding(), _binding(name="u")
    futures = planner.client.create_acls([first, second])
    _op, calls, _options, complete = planner.last()
    request = encoded("admin:CreateAcls", calls[0]["args"], low=1)[3]  # v0: LITERAL patterns only
    assert [(c.resource_type, c.resource_name, c.resource_pattern_type, c.operation, c.permission_type)
            for c in request.creations] == [(2, "t", 4, 4, 2), (2, "u", 4, 4, 2)]
    complete([answer("admin:CreateAcls", 3, results=[{"error_code": 0}, {"error_code": 31, "error_message": "no"}])])
    assert futures[first].result(0) is None and error_code(futures[second]) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    futures = planner.client.create_acls([first])
    planner.last()[3]([answer("admin:CreateAcls", 3, results=[])])  # a broker answering no result
    assert error_code(futures[first]) == KafkaError._BAD_MSG

    match = ka.AclBindingFilter(ka.ResourceType.ANY, None, ka.ResourcePatternType.MATCH, "User:a", None,
                                ka.AclOperation.ANY, ka.AclPermissionType.ANY)
    described = planner.client.describe_acls(match)
    request = encoded("admin:DescribeAcls", planner.last()[1][0]["args"], low=1)[3]
    assert (request.resource_type_filter, request.resource_name_filter, request.pattern_type_filter,
            request.principal_filter, request.host_filter, request.operation) == (1, None, 2, "User:a", None, 1)
    planner.last()[3]([answer("admin:DescribeAcls", 3, error_code=0, resources=[
        {"resource_type": 2, "resource_name": "t", "pattern_type": 4,
         "acls": [{"principal": "User:a", "host": "*", "operation": 4, "permission_type": 2}]}])])
    assert described.result(0) == [first]

    deleted = planner.client.delete_acls([match])
    request = encoded("admin:DeleteAcls", planner.last()[1][0]["args"], low=1)[3]
    assert request.filters[0].pattern_type_filter == 2
    planner.last()[3]([answer("admin:DeleteAcls", 3, filter_results=[{"error_code": 0, "matching_acls": [
        {"error_code": 0, "resource_type": 2, "resource_name": "u", "pattern_type": 4, "principal": "User:a",
         "host": "*", "operation": 4, "permission_type": 2}]}])])
    assert deleted[match].result(0) == [second]


def test_scram(planner: Planner) -> None:
    info = ka.ScramCredentialInfo(ka.ScramMechanism.SCRAM_SHA_512, 8192)
    futures = planner.client.alter_user_scram_credentials([
        ka.UserScramCredentialUpsertion("alice", info, b"secret", b"salt"),
        ka.UserScramCredentialUpsertion("bob", info, b"pw"),
        ka.UserScramCredentialDeletion("carol", ka.ScramMechanism.SCRAM_SHA_256)])
    _op, calls, _options, complete = planner.last()
    request = encoded("admin:AlterUserScramCredentials", calls[0]["args"])[0]
    alice, bob = request.upsertions
    assert (alice.name, alice.mechanism, alice.iterations, alice.salt) == ("alice", 2, 8192, b"salt")
    assert alice.salted_password == salted_password(2, b"secret", b"salt", 8192)
    assert len(bob.salt) == 64 and b"pw" not in bob.salted_password  # a random salt; no password on the wire
    assert [(d.name, d.mechanism) for d in request.deletions] == [("carol", 1)]
    complete([answer("admin:AlterUserScramCredentials", 0, results=[
        {"user": "alice", "error_code": 0}, {"user": "bob", "error_code": 0},
        {"user": "carol", "error_code": 91, "error_message": "no such credential"}])])
    assert futures["alice"].result(0) is None and error_code(futures["carol"]) == KafkaError.RESOURCE_NOT_FOUND

    everyone = planner.client.describe_user_scram_credentials()
    assert encoded("admin:DescribeUserScramCredentials", planner.last()[1][0]["args"])[0].users is None
    planner.last()[3]([answer("admin:DescribeUserScramCredentials", 0, error_code=0, results=[
        {"user": "alice", "error_code": 0, "credential_infos": [{"mechanism": 2, "iterations": 8192}]}])])
    found = everyone.result(0)["alice"]
    assert [(i.mechanism, i.iterations) for i in found.scram_credential_infos] == [(ka.ScramMechanism.SCRAM_SHA_512,
                                                                                   8192)]
    some = planner.client.describe_user_scram_credentials(["alice", "zed"])
    planner.last()[3]([answer("admin:DescribeUserScramCredentials", 0, error_code=0, results=[
        {"user": "alice", "error_code": 0, "credential_infos": []},
        {"user": "zed", "error_code": 91, "error_message": "unknown"}])])
    assert some["alice"].result(0).user == "alice" and error_code(some["zed"]) == KafkaError.RESOURCE_NOT_FOUND


def test_salted_password_is_scram_hi() -> None:
    # RFC 7677's SCRAM-SHA-256 example: SaltedPassword of "pencil" with its salt and 4096 iterations
    import base64

    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    expected = "c4a49510323ab4f952cac1fa99441939e78ea74d6be81ddf7096e87513dc615d"
    assert salted_password(1, b"pencil", salt, 4096).hex() == expected
