"""ProducerSettings parsing/validation, retry backoff arithmetic and the Produce error table."""

from __future__ import annotations

import pytest

from kqactors.core.producer.classify import (
    NOT_PERSISTED,
    PERMANENT,
    POSSIBLY_PERSISTED,
    REFRESH,
    RETRY,
    classify_produce_error,
)
from kqactors.core.producer.settings import ProducerSettings, retry_backoff_ms
from kqactors.errors import ERROR_CODES, KafkaError


def test_defaults_are_librdkafkas():
    s = ProducerSettings()
    assert (s.linger_ms, s.batch_size, s.batch_num_messages, s.message_timeout_ms, s.acks) == \
        (5.0, 1_000_000, 10_000, 300_000, -1)
    assert s.max_batch_bytes == 1_000_000 and s.in_flight_limit == 1_000_000


def test_aliases_and_string_values():
    s = ProducerSettings.from_config({"queue.buffering.max.ms": "20", "delivery.timeout.ms": 1234,
                                      "acks": "all", "compression.codec": "LZ4", "bootstrap.servers": "x"})
    assert (s.linger_ms, s.message_timeout_ms, s.acks, s.compression_type) == (20.0, 1234, -1, "lz4")
    assert ProducerSettings.from_config({"acks": "1"}).acks == 1


def test_idempotence_forces_acks_all_and_caps_in_flight():
    s = ProducerSettings.from_config({"enable.idempotence": "true"})
    assert s.idempotence and s.acks == -1 and s.in_flight_limit == 5
    with pytest.raises(ValueError, match="acks"):
        ProducerSettings.from_config({"enable.idempotence": True, "acks": 1})
    with pytest.raises(ValueError, match="max.in.flight"):
        ProducerSettings.from_config({"enable.idempotence": True, "max.in.flight": 6})


@pytest.mark.parametrize("prop,value", [("linger.ms", -1), ("batch.num.messages", 0), ("acks", "some"),
                                        ("compression.type", "brotli"), ("enable.idempotence", "maybe"),
                                        ("retries", True), ("message.max.bytes", 10)])
def test_bad_values_raise_value_error(prop, value):
    with pytest.raises(ValueError):
        ProducerSettings.from_config({prop: value})


def test_settings_dict_round_trip():
    s = ProducerSettings.from_config({"linger.ms": 7, "enable.idempotence": True})
    assert ProducerSettings.from_dict(s.to_dict()) == s


def test_backoff_doubles_caps_and_jitters():
    mid = lambda: 0.5  # noqa: E731  (jitter factor exactly 1.0)
    assert [retry_backoff_ms(n, 100, 1000, mid) for n in (1, 2, 3, 4, 5)] == [100, 200, 400, 800, 1000]
    assert retry_backoff_ms(1, 100, 1000, lambda: 0.0) == pytest.approx(80)
    assert retry_backoff_ms(1, 100, 1000, lambda: 1.0) == pytest.approx(120)
    assert retry_backoff_ms(10, 100, 1000, lambda: 1.0) == 1000


@pytest.mark.parametrize("name,flags,counted", [
    ("NOT_LEADER_FOR_PARTITION", REFRESH | NOT_PERSISTED, False),
    ("LEADER_NOT_AVAILABLE", REFRESH | NOT_PERSISTED, False),
    ("UNKNOWN_TOPIC_OR_PART", REFRESH | NOT_PERSISTED, False),
    ("_TRANSPORT", REFRESH | POSSIBLY_PERSISTED, True),
    ("KAFKA_STORAGE_ERROR", REFRESH | RETRY | NOT_PERSISTED, True),
    ("REQUEST_TIMED_OUT", RETRY | POSSIBLY_PERSISTED, True),
    ("NOT_ENOUGH_REPLICAS_AFTER_APPEND", RETRY | POSSIBLY_PERSISTED, True),
    ("NOT_ENOUGH_REPLICAS", RETRY | NOT_PERSISTED, True),
    ("_MSG_TIMED_OUT", PERMANENT | POSSIBLY_PERSISTED, True),
    ("TOPIC_AUTHORIZATION_FAILED", PERMANENT | NOT_PERSISTED, True),
    ("MSG_SIZE_TOO_LARGE", PERMANENT | NOT_PERSISTED, True),
    ("INVALID_REQUIRED_ACKS", PERMANENT | NOT_PERSISTED, True),
])
def test_produce_error_table(name, flags, counted):
    action = classify_produce_error(ERROR_CODES[name])
    assert action.flags == flags
    assert action.count_retry == counted
    assert action.retriable == bool(flags & (RETRY | REFRESH))


def test_every_known_code_is_classified_and_unknown_codes_are_permanent():
    for code in set(ERROR_CODES.values()):
        action = classify_produce_error(code)
        assert action.flags & (RETRY | REFRESH | PERMANENT)
        assert not (action.retriable and action.flags & PERMANENT)
    assert classify_produce_error(9999).flags == PERMANENT | NOT_PERSISTED


def test_unsent_request_retry_is_free_and_not_persisted():
    action = classify_produce_error(KafkaError.REQUEST_TIMED_OUT, request_sent=False)
    assert action.flags == RETRY | NOT_PERSISTED and not action.count_retry
