"""Message side by side with confluent-kafka's: constructor keywords and type errors, accessors of unset and
logical values, setters, len(), equality, hashing and pickling."""

from __future__ import annotations

import copy
import pickle

import pytest

import kqactors
from kqactors.errors import KafkaError

ck = pytest.importorskip("confluent_kafka")

ACCESSORS = ("topic", "partition", "offset", "key", "value", "headers", "timestamp", "latency", "leader_epoch",
             "delivery_count")
FULL = dict(topic="t", partition=1, offset=5, key=b"k", value=b"vv", headers=[("a", b"1")],
            timestamp=(1, 123), latency=0.5, leader_epoch=7, delivery_count=2)


def view(msg) -> tuple:
    out = [getattr(msg, name)() for name in ACCESSORS]
    try:
        out.append(len(msg))
    except TypeError as exc:
        out.append(("TypeError", str(exc)))
    return tuple(out)


def outcome(cls, *args, **kwargs):
    try:
        return ("ok", view(cls(*args, **kwargs)))
    except Exception as exc:  # noqa: BLE001 - the exception type is the thing compared
        return ("raise", type(exc).__name__)


@pytest.mark.parametrize("kwargs", [
    {}, FULL, {"topic": 5}, {"key": "s"}, {"key": 5}, {"value": "s"}, {"value": "é"}, {"value": bytearray(b"ab")},
    {"value": 5}, {"headers": {"a": b"1"}}, {"headers": 5}, {"partition": -1}, {"partition": -5},
    {"partition": True}, {"partition": "x"}, {"partition": 1.5}, {"offset": -1}, {"offset": -1001},
    {"offset": "x"}, {"latency": -1.0}, {"latency": 1}, {"latency": True}, {"latency": "x"},
    {"leader_epoch": -1}, {"leader_epoch": 0}, {"leader_epoch": "x"}, {"delivery_count": 0},
    {"delivery_count": -1}, {"timestamp": None}, {"timestamp": (0, 5)}, {"timestamp": (7, 5)},
    {"timestamp": 5}, {"timestamp": (1,)}, {"timestamp": (1, 2, 3)}, {"timestamp": [1, 2]}, {"foo": 1},
], ids=repr)
def test_constructor_matches(kwargs):
    assert outcome(kqactors.Message, **kwargs) == outcome(ck.Message, **kwargs)


def test_positional_order_matches():
    args = ("t", 1, 5, b"k", b"vv", [("a", b"1")], None, (1, 123), 0.5, 7, 3)
    assert view(kqactors.Message(*args)) == view(ck.Message(*args))
    assert outcome(kqactors.Message, *args, 1) == outcome(ck.Message, *args, 1)


@pytest.mark.parametrize("setter,value", [
    ("set_value", "abc"), ("set_value", 5), ("set_value", None), ("set_value", b"xy"),
    ("set_key", "abc"), ("set_key", 5), ("set_headers", {"a": b"1"}), ("set_headers", [("a", "s")]),
    ("set_headers", 5), ("set_headers", None), ("set_topic", "x"), ("set_topic", 5), ("set_topic", None),
    ("set_error", 5), ("set_error", None),
], ids=repr)
def test_setters_match(setter, value):
    ours, theirs = kqactors.Message(**FULL), ck.Message(**FULL)
    getattr(ours, setter)(value)
    getattr(theirs, setter)(value)
    assert view(ours) == view(theirs)


def test_set_error_with_errors():
    ours, theirs = kqactors.Message(), ck.Message()
    ours.set_error(KafkaError(1))
    theirs.set_error(ck.KafkaError(1))
    assert ours.error().code() == theirs.error().code() == 1


def test_deserialized_accessors():
    for cls in (kqactors.Message, ck.Message):
        msg = cls(key=b"k", value=b"v")
        msg.set_value({"x": 1})
        assert msg.deserialized_key() == b"k" and msg.deserialized_value() == {"x": 1}


@pytest.mark.parametrize("field,other", [
    ("topic", "u"), ("partition", 2), ("offset", 6), ("key", b"K"), ("value", b"V"), ("headers", [("b", b"")]),
    ("timestamp", (1, 124)), ("latency", 0.7), ("leader_epoch", 8), ("delivery_count", 5),
])
def test_equality_fields_match(field, other):
    for_ours = kqactors.Message(**FULL) == kqactors.Message(**{**FULL, field: other})
    for_theirs = ck.Message(**FULL) == ck.Message(**{**FULL, field: other})
    assert for_ours == for_theirs


def test_equality_with_logical_values_and_other_types():
    for cls in (kqactors.Message, ck.Message):
        assert cls(partition=-1) == cls()
        assert cls(offset=-5) == cls(offset=-1001)
        assert cls("t") != "t" and not (cls("t") == "t")
        with pytest.raises(TypeError):
            hash(cls("t"))
        with pytest.raises(TypeError):
            cls("a") < cls("b")  # noqa: B015 - the comparison itself is under test


@pytest.mark.parametrize("kwargs", [{}, FULL, {"topic": "t", "offset": -1001, "latency": -1.0}], ids=repr)
def test_pickle_and_copy_round_trip(kwargs):
    for cls in (kqactors.Message, ck.Message):
        original = cls(**kwargs)
        for again in (pickle.loads(pickle.dumps(original)), copy.copy(original), copy.deepcopy(original)):
            assert type(again) is cls and view(again) == view(original) and again == original
    assert view(pickle.loads(pickle.dumps(kqactors.Message(**kwargs)))) == view(
        pickle.loads(pickle.dumps(ck.Message(**kwargs))))


def test_pickle_keeps_the_error():
    msg = pickle.loads(pickle.dumps(kqactors.Message("t", error=KafkaError(KafkaError._MSG_TIMED_OUT, "late"))))
    assert msg.error().code() == KafkaError._MSG_TIMED_OUT and msg.error().str() == "late"


def test_c_built_messages_behave_the_same():
    native = pytest.importorskip("kqactors.native")
    if not native.NATIVE_AVAILABLE:
        pytest.skip("C extension not built")
    from kqactors.native import _native

    values = ("t", 1, 5, b"k", b"vv", None, None, (1, 9), 0.25, None)
    built = _native_message(_native, values)
    assert built.latency() >= 0  # a clock reading
    built._latency = values[8]
    assert view(built) == view(kqactors.Message(*values))
    assert built == kqactors.Message(*values) and built.delivery_count() is None
    assert view(pickle.loads(pickle.dumps(built))) == view(built)


def _native_message(module, values):
    """A Message built by the C report loop (complete_ok) for one pending entry."""
    from kqactors.client.producer.buffers import new_producer_buffers

    buffers = new_producer_buffers(1000, 1_000_000, native=module)
    buffers.append(values[0], values[1], values[3], values[4], values[5], values[7][1], None, len(values[4]))
    buffers.take_all()
    buffers.complete(values[0], values[1], [(1, 1, 0, values[2], -1)], print, False)
    return buffers.ready[0][2]
