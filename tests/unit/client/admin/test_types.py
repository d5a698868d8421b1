"""Runs in: pytest. kqactors.admin's value types against confluent-kafka's (the installed peer): the same
public names, enum members and values, constructors, attributes, str/repr, equality, hashing, ordering and
argument errors. No broker, no processes."""

from __future__ import annotations

import operator

import pytest

import kqactors
import kqactors.admin as ka

ck = pytest.importorskip("confluent_kafka")
ca = pytest.importorskip("confluent_kafka.admin")

ENUMS = ("AclOperation", "AclPermissionType", "AlterConfigOpType", "ConfigSource", "ResourcePatternType",
         "ResourceType", "ScramMechanism")


def _public(module) -> set[str]:
    typing_names = {"Any", "Dict", "List", "Optional", "Set", "Tuple", "Union", "concurrent", "string_type",
                    "warnings"}
    return {n for n in dir(module) if not n.startswith("_") and n not in typing_names}


def test_the_public_names_are_confluent_kafkas() -> None:
    assert _public(ca) <= set(ka.__all__) | {"AdminClient"}
    for name in ka.__all__:
        assert getattr(ka, name) is not None, name


@pytest.mark.parametrize("name", ENUMS)
def test_enum_members_and_values(name: str) -> None:
    ours, theirs = getattr(ka, name), getattr(ca, name)
    assert [(m.name, m.value) for m in ours] == [(m.name, m.value) for m in theirs]


def test_module_constants() -> None:
    for name in ka.__all__:
        if name.isupper():
            assert getattr(ka, name) == getattr(ca, name), name


def test_enums_order_by_value() -> None:
    assert ka.AclOperation.READ < ka.AclOperation.WRITE
    assert sorted([ka.ResourceType.BROKER, ka.ResourceType.TOPIC]) == [ka.ResourceType.TOPIC, ka.ResourceType.BROKER]
    assert ka.ScramMechanism.SCRAM_SHA_256 < ka.ScramMechanism.SCRAM_SHA_512


# ---- NewTopic / NewPartitions (C types in confluent-kafka) -------------------------------------------------

NEW_TOPIC_CASES = [
    ("t",), ("t", 3), ("t", 3, 2), ("t", -1, -1, [[1], [2]]), ("t", 1, 1, None, {"a": "b"}),
    (1,), ("t", 1.5), ("t", True), ("t", 2**40), ("t", -2**40), ("t", "3"), ("t", 1, 1, None, [1]), ("t\0x",), (),
]


def _outcome(fn, *args, **kwargs):
    try:
        value = fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the outcome under comparison
        return type(exc).__name__
    return ("ok", repr(value))


@pytest.mark.parametrize("args", NEW_TOPIC_CASES, ids=repr)
def test_new_topic_constructor(args) -> None:
    assert _outcome(ka.NewTopic, *args) == _outcome(ca.NewTopic, *args)


def test_new_topic_attributes_compare_and_hash() -> None:
    ours, theirs = ka.NewTopic("t", 3, 2, [[1]], {"k": "v"}), ca.NewTopic("t", 3, 2, [[1]], {"k": "v"})
    for attr in ("topic", "num_partitions", "replication_factor", "replica_assignment", "config"):
        assert getattr(ours, attr) == getattr(theirs, attr), attr
    assert (ka.NewTopic("t").config, ka.NewTopic("t").replica_assignment) == (None, None)
    for obj in (ours, theirs):
        with pytest.raises(AttributeError):
            obj.topic = "u"
        with pytest.raises(TypeError):
            obj.num_partitions = "x"
        with pytest.raises(NotImplementedError):
            _ = obj == 1
    pairs = [(("a", 1), ("a", 2)), (("a", 2), ("b", 1)), (("a", 1), ("a", 1))]
    for left, right in pairs:
        for op in (operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge):
            assert op(ka.NewTopic(*left), ka.NewTopic(*right)) == op(ca.NewTopic(*left), ca.NewTopic(*right))
    assert hash(ka.NewTopic("a", 3)) == hash(ca.NewTopic("a", 3))
    assert hash(ka.NewTopic("a")) == hash(ca.NewTopic("a"))
    assert len({ka.NewTopic("a", 1), ka.NewTopic("a", 1)}) == 1


@pytest.mark.parametrize("args", [("t", 4), ("t", 4, [[1], [2]]), ("t",), (1, 2), ("t", 1.0), ("t", None)],
                         ids=repr)
def test_new_partitions(args) -> None:
    assert _outcome(ka.NewPartitions, *args) == _outcome(ca.NewPartitions, *args)


def test_new_partitions_attributes() -> None:
    ours, theirs = ka.NewPartitions("t", 4, [[1]]), ca.NewPartitions("t", 4, [[1]])
    assert (ours.topic, ours.new_total_count, ours.replica_assignment) == \
        (theirs.topic, theirs.new_total_count, theirs.replica_assignment)
    assert hash(ours) == hash(theirs) and str(ours) == str(theirs)


# ---- ConfigResource / ConfigEntry -------------------------------------------------------------------------

@pytest.mark.parametrize("args", [("topic", "t"), ("TOPIC", "t"), (2, "t"), (ca.ResourceType.BROKER, "1"),
                                  ("nope", "t"), ("topic", None), (99, "t")], ids=repr)
def test_config_resource_constructor(args) -> None:
    def convert(value):
        return getattr(ka.ResourceType, value.name) if isinstance(value, ca.ResourceType) else value

    ours = _outcome(ka.ConfigResource, *[convert(a) for a in args])
    theirs = _outcome(ca.ConfigResource, *args)
    assert ours == theirs


def test_config_resource_behaviour() -> None:
    ours = ka.ConfigResource("topic", "t", set_config={"a": "1"})
    theirs = ca.ConfigResource("topic", "t", set_config={"a": "1"})
    assert (repr(ours), len(ours), ours.restype_int, ours.set_config_dict) == \
        (repr(theirs), len(theirs), theirs.restype_int, theirs.set_config_dict)
    for obj in (ours, theirs):
        obj.set_config("a", "2", overwrite=False)
        obj.set_config("b", "3")
    assert ours.set_config_dict == theirs.set_config_dict == {"a": "1", "b": "3"}
    assert ours == ka.ConfigResource(ka.ResourceType.TOPIC, "t") and hash(ours) == hash(ka.ConfigResource(2, "t"))
    assert ka.ConfigResource("topic", "a") < ka.ConfigResource("broker", "0")
    assert ca.ConfigResource("topic", "a") < ca.ConfigResource("broker", "0")
    assert repr(ka.ConfigResource("group", "g", error=ka.KafkaError(3))).startswith("ConfigResource(ResourceType.GROUP,g,")
    entry = ka.ConfigEntry("retention.ms", "1", incremental_operation=ka.AlterConfigOpType.SET)
    ours.add_incremental_config(entry)
    assert ours.incremental_configs == [entry]
    assert (str(entry), repr(entry)) == (str(ca.ConfigEntry("retention.ms", "1")), repr(ca.ConfigEntry("retention.ms", "1")))
    assert ka.ConfigEntry("a", None).synonyms == {} and ka.ConfigEntry("a", None).source == ka.ConfigSource.UNKNOWN_CONFIG


# ---- ACL bindings -----------------------------------------------------------------------------------------

def _acl_args(module, restype="TOPIC", name="t", pattern="LITERAL", principal="User:a", host="*", operation="READ",
              permission="ALLOW"):
    def member(enum, value):
        return getattr(getattr(module, enum), value) if isinstance(value, str) and value.isupper() else value
    return (member("ResourceType", restype), name, member("ResourcePatternType", pattern), principal, host,
            member("AclOperation", operation), member("AclPermissionType", permission))


ACL_CASES = [
    {}, {"restype": "ANY"}, {"restype": "UNKNOWN"}, {"pattern": "MATCH"}, {"pattern": "ANY"}, {"operation": "ANY"},
    {"permission": "ANY"}, {"name": None}, {"principal": None}, {"host": 5}, {"restype": "topic"}, {"restype": 2},
    {"operation": "nope"}, {"operation": 3.5}, {"permission": 3},
]


@pytest.mark.parametrize("case", ACL_CASES, ids=repr)
@pytest.mark.parametrize("cls", ["AclBinding", "AclBindingFilter"])
def test_acl_binding_constructor(cls: str, case: dict) -> None:
    ours = _outcome(getattr(ka, cls), *_acl_args(ka, **case))
    theirs = _outcome(getattr(ca, cls), *_acl_args(ca, **case))
    assert ours == theirs


def test_acl_bindings_compare_hash_and_sort() -> None:
    a, b = ka.AclBinding(*_acl_args(ka)), ka.AclBinding(*_acl_args(ka, name="u"))
    assert a == ka.AclBinding(*_acl_args(ka)) and hash(a) == hash(ka.AclBinding(*_acl_args(ka)))
    assert a < b and sorted([b, a]) == [a, b] and a != b
    assert repr(a) == repr(ca.AclBinding(*_acl_args(ca)))
    assert (a.restype_int, a.resource_pattern_type_int, a.operation_int, a.permission_type_int) == (2, 3, 3, 3)


# ---- list_offsets specs and the other result types ---------------------------------------------------------

def test_offset_specs() -> None:
    assert ka.OffsetSpec.earliest() is ka.OffsetSpec(-2) and ka.OffsetSpec.latest() is ka.OffsetSpec(-1)
    assert ka.OffsetSpec.max_timestamp() is ka.OffsetSpec(-3)
    for ours, theirs in ((ka.OffsetSpec.earliest(), ca.OffsetSpec.earliest()), (ka.OffsetSpec(7), ca.OffsetSpec(7)),
                         (ka.OffsetSpec.for_timestamp(5), ca.OffsetSpec.for_timestamp(5)),
                         (ka.OffsetSpec.max_timestamp(), ca.OffsetSpec.max_timestamp())):
        assert ours._value == theirs._value and type(ours).__name__ == type(theirs).__name__
    assert ka.OffsetSpec.max_timestamp() < ka.OffsetSpec.earliest() < ka.OffsetSpec.latest() < ka.OffsetSpec(0)
    info = ka.ListOffsetsResultInfo(5, 10, -1)
    assert (info.offset, info.timestamp, info.leader_epoch) == (5, 10, None)
    assert ka.ListOffsetsResultInfo(5, 10, 3).leader_epoch == 3


def test_result_types_take_confluent_kafkas_arguments() -> None:
    node = kqactors.Node(1, "h", 9092)
    listing = ka.ConsumerGroupListing("g", True, "stable", 2)
    assert (listing.state, listing.type) == (kqactors.ConsumerGroupState.STABLE, kqactors.ConsumerGroupType.CLASSIC)
    assert not hasattr(ka.ConsumerGroupListing("g", False), "state")
    desc = ka.ConsumerGroupDescription("g", False, [], "range", "EMPTY", node, [3, "write"])
    assert desc.authorized_operations == [ka.AclOperation.READ, ka.AclOperation.WRITE]
    assert desc.type == kqactors.ConsumerGroupType.UNKNOWN and desc.state == kqactors.ConsumerGroupState.EMPTY
    assert ka.ConsumerGroupDescription("g", False, [], "", None, node, []).authorized_operations is None
    assert ka.MemberAssignment(None).topic_partitions == []
    member = ka.MemberDescription("m", "c", "h", ka.MemberAssignment([]))
    assert (member.group_instance_id, member.target_assignment) == (None, None)
    cluster = ka.DescribeClusterResult(node, [node], "id", ["ALTER"])
    assert cluster.authorized_operations == [ka.AclOperation.ALTER]
    topic = ka.TopicDescription("t", kqactors.Uuid(1, 2), False, [], None)
    assert topic.authorized_operations is None
    assert ka.DeletedRecords(4).low_watermark == 4
    assert ka.ListConsumerGroupsResult().valid is None
    upsertion = ka.UserScramCredentialUpsertion("u", ka.ScramCredentialInfo(ka.ScramMechanism.SCRAM_SHA_256, 10), b"p")
    assert upsertion.salt is None and isinstance(upsertion, ka.UserScramCredentialAlteration)
    assert str(ka.GroupMetadata()) == "None" and ka.GroupMember().assignment is None


def test_importing_the_types_starts_nothing() -> None:
    import subprocess
    import sys

    code = ("import sys, kqactors.admin; print(sorted(m for m in sys.modules if m.startswith('zmq') or "
            "m.startswith('kqactors.runtime') or m.startswith('kqactors.client')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"
