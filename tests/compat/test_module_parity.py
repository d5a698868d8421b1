"""Module-level names side by side with confluent-kafka: partition functions, constants, value types,
kqactors.error and kqactors.serialization."""

from __future__ import annotations

import math
import pickle

import pytest

import kqactors
import kqactors.error
import kqactors.serialization

ck = pytest.importorskip("confluent_kafka")
import confluent_kafka.error  # noqa: E402
import confluent_kafka.serialization  # noqa: E402

KEYS = [b"", b"a", b"abc", b"user_12345", bytes(range(256)), b"\xff" * 33]


@pytest.mark.parametrize("name", ["murmur2", "consistent", "fnv1a"])
def test_partition_functions_match(name):
    ours, theirs = getattr(kqactors, name), getattr(ck, name)
    for key in KEYS:
        for count in (1, 2, 3, 7, 10, 1000, 2**31 - 1):
            assert ours(key, count) == theirs(key, count), (key, count)
    for args in (("abc", 10), (b"a", 0), (b"a", -1), (None, 3), (b"a", "3"), (bytearray(b"abc"), 10)):
        with pytest.raises(Exception) as mine:
            ours(*args)
        with pytest.raises(Exception) as other:
            theirs(*args)
        assert type(mine.value) is type(other.value), args


def test_constants_match():
    names = [n for n in dir(ck) if n.startswith(("OFFSET_", "TIMESTAMP_"))]
    assert names
    for name in names:
        assert getattr(kqactors, name) == getattr(ck, name), name


def test_versions_are_string_int_pairs():
    for fn in (kqactors.version, kqactors.libversion):
        text, number = fn()
        assert text == kqactors.__version__ and isinstance(number, int) and number > 0
    assert isinstance(ck.libversion()[0], str) and isinstance(ck.libversion()[1], int)


@pytest.mark.parametrize("name", ["IsolationLevel", "ConsumerGroupState", "ConsumerGroupType", "ElectionType"])
def test_enums_match(name):
    ours, theirs = getattr(kqactors, name), getattr(ck, name)
    assert [(m.name, m.value) for m in ours] == [(m.name, m.value) for m in theirs]
    assert sorted(ours, reverse=True) == sorted(sorted(ours, reverse=True))[::-1]
    for member in theirs:
        assert ours[member.name].value == member.value


def test_value_types_match():
    for cls_name, args in (("Node", (1, "h", 2, "r")), ("Node", (1, "h", 2)), ("TopicCollection", (["a"],)),
                           ("ConsumerGroupTopicPartitions", ("g", None)), ("ThrottleEvent", ("b", 1, 0.5))):
        ours, theirs = getattr(kqactors, cls_name)(*args), getattr(ck, cls_name)(*args)
        assert vars(ours) == vars(theirs), cls_name
        if cls_name in ("Node", "ThrottleEvent"):  # the others keep object's default str()
            assert str(ours) == str(theirs), cls_name
    node = kqactors.Node(1, "h", 2)
    info = kqactors.TopicPartitionInfo(0, node, [node], [node])
    assert (info.id, info.leader, info.replicas, info.isr) == (0, node, [node], [node])


@pytest.mark.parametrize("bits", [(1, 2), (-1, -2), (0, 0), (2**63 - 1, -(2**63))])
def test_uuid_matches(bits):
    ours, theirs = kqactors.Uuid(*bits), ck.Uuid(*bits)
    assert str(ours) == str(theirs) and repr(ours) == repr(theirs)
    assert ours.get_most_significant_bits() == theirs.get_most_significant_bits()
    assert ours.get_least_significant_bits() == theirs.get_least_significant_bits()
    assert (ours == kqactors.Uuid(*bits)) == (theirs == ck.Uuid(*bits))
    with pytest.raises(TypeError):
        kqactors.Uuid("a", 1)


def test_error_module_names_and_shapes():
    public = {n for n in dir(confluent_kafka.error) if not n.startswith("_") and n != "Optional"}
    assert public <= set(dir(kqactors.error))
    exc = ValueError("boom")
    for name in ("KeySerializationError", "ValueSerializationError"):
        ours, theirs = getattr(kqactors.error, name)(exc), getattr(confluent_kafka.error, name)(exc)
        assert (ours.code, ours.name, ours.args[0].str(), ours.exception) == (
            theirs.code, theirs.name, theirs.args[0].str(), theirs.exception)
        assert isinstance(ours, kqactors.serialization.SerializationError)
        assert isinstance(ours, kqactors.error.ProduceError) and isinstance(ours, kqactors.KafkaException)
    msg = kqactors.Message("t")
    for name in ("KeyDeserializationError", "ValueDeserializationError"):
        ours = getattr(kqactors.error, name)(exception=exc, kafka_message=msg)
        theirs = getattr(confluent_kafka.error, name)(exception=exc, kafka_message=ck.Message("t"))
        assert (ours.code, ours.name, ours.args[0].str()) == (theirs.code, theirs.name, theirs.args[0].str())
        assert ours.kafka_message is msg and isinstance(ours, kqactors.error.ConsumeError)
    err = kqactors.error.ConsumeError(kqactors.KafkaError(kqactors.KafkaError._PARTITION_EOF))
    assert err.code == kqactors.KafkaError._PARTITION_EOF and err.exception is None and err.kafka_message is None


# ---- serialization ----------------------------------------------------------------------------------

def _run(serde, value):
    try:
        return ("ok", serde(value, None))
    except Exception as exc:  # noqa: BLE001 - the exception type is compared
        return ("raise", type(exc).__name__)


SERDE_CASES = [
    ("StringSerializer", (), ["", "héllo", None, 5]), ("StringSerializer", ("ascii",), ["abc", "é"]),
    ("StringSerializer", ("utf_16",), ["abc"]), ("StringDeserializer", (), [b"h\xc3\xa9", b"\xff", None]),
    ("StringDeserializer", ("latin_1",), [b"\xff"]),
    ("IntegerSerializer", (), [0, 1, -1, 2**31 - 1, -(2**31), 2**31, None, "x"]),
    ("IntegerDeserializer", (), [b"\x00\x00\x00\x01", b"\xff\xff\xff\xff", b"\x00", None]),
    ("DoubleSerializer", (), [0.0, -1.5, 1e308, math.inf, 3, None, "x"]),
    ("DoubleDeserializer", (), [b"\x3f\xf0" + b"\x00" * 6, b"\x00", None]),
]


@pytest.mark.parametrize("name,args,values", SERDE_CASES, ids=[f"{c[0]}{c[1]}" for c in SERDE_CASES])
def test_serdes_match_byte_for_byte(name, args, values):
    ours = getattr(kqactors.serialization, name)(*args)
    theirs = getattr(confluent_kafka.serialization, name)(*args)
    for value in values:
        got, expected = _run(ours, value), _run(theirs, value)
        if expected[1] == "SerializationError":
            assert got == ("raise", "SerializationError"), value
        else:
            assert got == expected, value


def test_serialization_error_is_a_kafka_exception_and_pickles():
    with pytest.raises(kqactors.KafkaException):
        kqactors.serialization.StringSerializer("ascii")("é")
    err = kqactors.serialization.SerializationError("x")
    assert pickle.loads(pickle.dumps(err)).args == ("x",)


def test_context_and_field():
    ours, theirs = kqactors.serialization, confluent_kafka.serialization
    assert [(m.name, m.value, str(m)) for m in ours.MessageField] == [
        (m.name, m.value, str(m)) for m in theirs.MessageField]
    ctx = ours.SerializationContext("t", ours.MessageField.KEY, [("h", b"1")])
    assert (ctx.topic, ctx.field, ctx.headers) == ("t", "key", [("h", b"1")])
    for base in (ours.Serializer(), ours.Deserializer()):
        with pytest.raises(NotImplementedError):
            base(b"x", None)
        base.close()
        base.set_cluster_id_resolver(lambda: "c")
