"""Unit tests for kqactors.errors: the code table, KafkaError semantics, serialisation, retriability."""

from __future__ import annotations

import pickle
from pathlib import Path

import msgpack
import pytest

from kqactors.errors import (
    ERROR_CODES,
    KafkaError,
    KafkaException,
    error_description,
    error_from_broker_code,
    error_name,
    is_retriable_code,
)

TSV = Path("/work/shared/librdkafka-docs/error-codes.tsv")
PREFIX = "RD_KAFKA_RESP_ERR_"


def _tsv_rows() -> list[tuple[int, str]]:
    if not TSV.exists():
        pytest.skip(f"{TSV} not available")
    rows = []
    for line in TSV.read_text().splitlines():
        number, full_name = line.split("\t")[:2]
        rows.append((int(number), full_name[len(PREFIX):]))
    return rows


def test_every_librdkafka_code_is_exposed_with_its_number():
    for number, name in _tsv_rows():
        if name in ("_BEGIN", "_END"):  # range markers, not errors (confluent-kafka omits them too)
            continue
        assert getattr(KafkaError, name) == number, name  # local errors keep one leading underscore
        assert error_name(number) == name
        assert error_description(number) != f"Err-{number}?"


def test_names_match_confluent_kafka():
    ck = pytest.importorskip("confluent_kafka")
    theirs = {n for n in dir(ck.KafkaError) if n.isupper() or (n.startswith("_") and n[1:2].isupper())}
    assert theirs, "confluent_kafka.KafkaError has no error-code names"
    for name in theirs:
        assert getattr(KafkaError, name) == getattr(ck.KafkaError, name), name
        assert KafkaError(getattr(KafkaError, name)).name() == ck.KafkaError(getattr(ck.KafkaError, name)).name()


def test_alias_not_leader_or_follower():
    assert KafkaError.NOT_LEADER_OR_FOLLOWER == KafkaError.NOT_LEADER_FOR_PARTITION == 6
    assert KafkaError.NOT_LEADER_OR_FOLLOWER == 6


def test_descriptions_carry_local_or_broker_prefix():
    assert KafkaError(KafkaError._MSG_TIMED_OUT).str().startswith("Local: ")
    assert KafkaError(KafkaError.REQUEST_TIMED_OUT).str().startswith("Broker: ")
    assert KafkaError(0).str() == "Success"


def test_repr_format_matches_confluent_kafka_shape():
    err = KafkaError(KafkaError._MSG_TIMED_OUT)
    assert repr(err) == f'KafkaError{{code=_MSG_TIMED_OUT,val=-192,str="{err.str()}"}}'
    fatal = KafkaError(6, "custom reason", fatal=True)
    assert str(fatal) == 'KafkaError{FATAL,code=NOT_LEADER_FOR_PARTITION,val=6,str="custom reason"}'
    unknown = KafkaError(12345)
    assert repr(unknown) == 'KafkaError{code=ERR_12345?,val=12345,str="Err-12345?"}'


def test_repr_matches_confluent_for_reason_and_unknown():
    ck = pytest.importorskip("confluent_kafka")
    for args in [(6, "custom reason"), (12345,), (-186, "x y")]:
        assert repr(KafkaError(*args)) == repr(ck.KafkaError(*args))


def test_flags_and_accessors():
    err = KafkaError(48, "bad state", fatal=True, retriable=True, txn_requires_abort=True)
    assert (err.code(), err.name(), err.str()) == (48, "INVALID_TXN_STATE", "bad state")
    assert err.fatal() and err.retriable() and err.txn_requires_abort()
    plain = KafkaError(48)
    assert not plain.fatal() and not plain.retriable() and not plain.txn_requires_abort()


def test_equality_ordering_and_hash():
    err = KafkaError(KafkaError._PARTITION_EOF, "eof")
    assert err == KafkaError._PARTITION_EOF
    assert err == KafkaError(KafkaError._PARTITION_EOF)
    assert err != KafkaError._MSG_TIMED_OUT
    assert err != "eof"
    assert KafkaError(3) < KafkaError(5) and KafkaError(3) > 2
    assert hash(err) == hash(KafkaError(-191)) == hash(-191)
    assert len({KafkaError(3), KafkaError(3, "other"), KafkaError(4)}) == 2


def test_bad_code_type_raises_type_error():
    with pytest.raises(TypeError):
        KafkaError("oops")
    with pytest.raises(TypeError):
        KafkaError(True)
    with pytest.raises(TypeError):
        KafkaError(3, reason=5)


@pytest.mark.parametrize("err", [KafkaError(3), KafkaError(-186, "why", True, True, True), KafkaError(999, "")])
def test_pickle_and_tuple_round_trip(err):
    again = pickle.loads(pickle.dumps(err))
    assert again.to_tuple() == err.to_tuple()
    via_msgpack = KafkaError.from_tuple(msgpack.unpackb(msgpack.packb(err.to_tuple())))
    assert via_msgpack.to_tuple() == err.to_tuple()
    assert repr(via_msgpack) == repr(err)


def test_kafka_exception_carries_error():
    err = KafkaError(KafkaError._INVALID_ARG, "nope")
    exc = KafkaException(err)
    assert exc.args[0] is err and exc.error is err
    assert str(exc) == repr(err)
    assert KafkaException(6, "x").error == 6
    assert KafkaException(6, "x").error.str() == "x"
    assert KafkaException("text").error.str() == "text"
    with pytest.raises(KafkaException) as info:
        raise exc
    assert info.value.args[0].code() == -186
    assert pickle.loads(pickle.dumps(exc)).args[0] == err


def test_retriable_classification():
    for code in (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.REQUEST_TIMED_OUT,
                 KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                 KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.NOT_COORDINATOR, KafkaError.INVALID_MSG,
                 KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._TIMED_OUT_QUEUE):
        assert is_retriable_code(code), error_name(code)
    for code in (KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.INVALID_REQUIRED_ACKS,
                 KafkaError.RECORD_LIST_TOO_LARGE, KafkaError._MSG_TIMED_OUT, KafkaError.PRODUCER_FENCED,
                 KafkaError.BROKER_NOT_AVAILABLE, KafkaError.UNKNOWN, 0):
        assert not is_retriable_code(code), error_name(code)


def test_retriable_broker_codes_agree_with_kafka_python():
    kerrors = pytest.importorskip("kafka.errors")
    for cls in vars(kerrors).values():
        if isinstance(cls, type) and issubclass(cls, kerrors.BrokerResponseError) and cls.errno in ERROR_CODES.values():
            if cls.errno > 0:
                assert is_retriable_code(cls.errno) == cls.retriable or cls.errno in (2, 124, 133), cls.__name__


def test_error_from_broker_code():
    err = error_from_broker_code(6, "moved")
    assert err == 6 and err.retriable() and err.str() == "moved" and not err.fatal()
    assert not error_from_broker_code(10).retriable()
    assert error_from_broker_code(0) == KafkaError.NO_ERROR
