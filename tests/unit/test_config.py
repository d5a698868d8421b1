"""Unit tests for kqactors.config: parsing, validation messages, aliases, cross-property rules, shipping."""

from __future__ import annotations

import logging
import pickle
import re
from pathlib import Path

import msgpack
import pytest

from kqactors.config import ALIASES, LIBRDKAFKA_ONLY, PROPERTIES, Config
from kqactors.config.properties import DEDICATED
from kqactors.errors import KafkaError, KafkaException

CONFIGURATION_MD = Path("/work/shared/librdkafka-docs/CONFIGURATION.md")


def _error(conf, kind="producer") -> str:
    with pytest.raises(KafkaException) as info:
        Config(conf, kind=kind)
    err = info.value.args[0]
    assert err.code() == KafkaError._INVALID_ARG
    return err.str()


def test_defaults_and_typed_values_from_strings():
    c = Config({"bootstrap.servers": "h:1", "linger.ms": "20", "batch.num.messages": " 500 ",
                "enable.idempotence": "TRUE", "socket.keepalive.enable": "1", "acks": "all",
                "compression.type": "LZ4", "debug": "broker, topic,broker"})
    assert c["metadata.broker.list"] == "h:1" == c["bootstrap.servers"]
    assert c["queue.buffering.max.ms"] == 20.0 and c["batch.num.messages"] == 500
    assert c["enable.idempotence"] is True and c["socket.keepalive.enable"] is True
    assert c["acks"] == -1 and c["compression.codec"] == "lz4"
    assert c["debug"] == ["broker", "topic"]
    assert c["message.max.bytes"] == 1000000 and c["client.id"] == "rdkafka"
    assert c["kqactors.hosts"] == -1  # adaptive placement: toppar hosts join as the rate climbs
    assert c.is_set("linger.ms") and not c.is_set("batch.size")


def test_python_typed_values_accepted():
    c = Config({"linger.ms": 0.5, "retries": 3, "enable.auto.commit": False, "client.id": 5}, kind="consumer")
    assert c["linger.ms"] == 0.5 and c["retries"] == 3 and c["enable.auto.commit"] is False
    assert c["client.id"] == "5"


def test_kwargs_override_conf_like_confluent():
    c = Config({"linger.ms": 1}, **{"batch.size": 1000})
    assert c["batch.size"] == 1000 and c["linger.ms"] == 1


def test_aliases_resolve_last_setting_wins():
    c = Config({"queue.buffering.max.ms": "10", "linger.ms": 20})
    assert c["queue.buffering.max.ms"] == 20
    for alias, target in ALIASES.items():
        assert target in PROPERTIES, alias


def test_unknown_property_message():
    assert _error({"foo": 1}) == 'No such configuration property: "foo"'
    assert _error({"default.topic.config": {"nope": 5}}) == 'No such configuration property: "nope"'
    # like confluent-kafka, default.topic.config takes any property, not only topic-level ones
    assert Config({"default.topic.config": {"linger.ms": 5}})["linger.ms"] == 5


@pytest.mark.parametrize("conf,message", [
    ({"linger.ms": -5}, 'Configuration property "queue.buffering.max.ms" value -5 is outside allowed range '
                        '0..900000\n'),
    ({"session.timeout.ms": 0}, 'Configuration property "session.timeout.ms" value 0 is outside allowed range'),
    ({"batch.size": "abc"}, 'Invalid value for configuration property "batch.size"'),
    ({"batch.size": True}, 'Invalid value for configuration property "batch.size"'),
    ({"batch.size": None}, 'Integer configuration property "batch.size" cannot be set to empty value'),
    ({"linger.ms": None}, 'Float configuration property "queue.buffering.max.ms" cannot be set to empty value'),
    ({"linger.ms": float("nan")}, 'Invalid value for configuration property "queue.buffering.max.ms"'),
    ({"compression.type": "brotli"}, 'Invalid value "brotli" for configuration property "compression.codec"'),
    ({"enable.idempotence": "maybe"}, 'Expected bool value for "enable.idempotence": true or false'),
    ({"enable.idempotence": 2}, 'Expected bool value for "enable.idempotence": true or false'),
    ({"acks": "bogus"}, 'Invalid value for configuration property "request.required.acks"'),
    ({"socket.max.fails": -5}, 'Configuration property "socket.max.fails" value -5 is outside allowed range'),
    ({"metadata.recovery.strategy": "x"}, 'Invalid value "x" for configuration property "metadata.recovery'),
    ({"dr_msg_cb": print}, 'Property "dr_msg_cb" must be set through dedicated .._set_..() function'),
    ({"opaque": 1}, 'Property "opaque" must be set through dedicated .._set_..() function'),
    ({"ssl_key": 1}, 'Internal property "ssl_key" not settable'),
    ({"enable.gapless.guarantee": True}, "Failed to create producer: `enable.gapless.guarantee` requires"),
    ({"debug": "bogus"}, 'Invalid value "bogus" for configuration property "debug"'),
    ({"partitioner": "bogus"}, 'Invalid value for configuration property "partitioner": bogus'),
    ({"on_delivery": "x"}, "on_delivery requires a callable object"),
    ({"default.topic.config": 5}, '"default.topic.config" must be a dict'),
    ({5: 1}, "Configuration property names must be strings"),
])
def test_invalid_values_name_property_and_problem(conf, message):
    assert _error(conf, kind="consumer" if "session" in str(conf) else "producer").startswith(message)


def test_callback_type_errors_like_confluent_kafka():
    with pytest.raises(TypeError, match="expected error_cb property as a callable function"):
        Config({"error_cb": 5})
    with pytest.raises(ValueError, match="expected throttle_cb property as a callable function"):
        Config({"throttle_cb": None})
    assert Config({"client.id": ["x"]})["client.id"] == "['x']"  # str() of anything, like confluent-kafka
    assert Config({"retries": "10abc"})["retries"] == 10  # strtol(): the numeric prefix


def test_config_must_be_a_mapping():
    with pytest.raises(TypeError):
        Config([("a", 1)])
    with pytest.raises(ValueError):
        Config({}, kind="streams")


def test_security_protocols_are_accepted():
    # the security rules themselves are tested in tests/unit/config/test_security.py
    assert Config({"security.protocol": "PLAINTEXT"})["security.protocol"] == "plaintext"
    assert Config({"security.protocol": "SSL"})["security.protocol"] == "ssl"
    conf = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "u",
            "sasl.password": "p"}
    assert Config(conf)["sasl.mechanisms"] == "PLAIN"


def test_unimplemented_librdkafka_properties_are_ignored_with_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="kqactors.config"):
        c = Config({"socket.max.fails": 3, "sasl.kerberos.keytab": "/x", "queuing.strategy": "fifo"})
    assert c.ignored == {"socket.max.fails": 3, "sasl.kerberos.keytab": "/x", "queuing.strategy": "fifo"}
    assert "socket.max.fails is not supported by kqactors" in caplog.text
    assert "socket.max.fails" not in c.to_dict()


def test_callbacks_are_accepted_without_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="kqactors.config"):
        c = Config({"throttle_cb": print, "stats_cb": print, "error_cb": print})
    assert caplog.text == ""  # every one of them is called
    assert c.to_dict()["kqactors.throttle_cb"] is True  # broker actors then report throttling
    assert Config({}).to_dict()["kqactors.throttle_cb"] is False


def test_warnings_go_to_configured_logger():
    records = []

    class ListLogger:
        def log(self, level, msg):
            records.append((level, msg))

    Config({"group.id": "g", "logger": ListLogger()}, kind="producer")
    assert records == [(logging.WARNING, "Configuration property group.id is a consumer property and will be "
                                         "ignored by this producer instance")]


def test_default_topic_config_merges_and_top_level_wins():
    c = Config({"default.topic.config": {"acks": 1, "message.timeout.ms": 1000, "auto.offset.reset": "earliest"},
                "request.timeout.ms": 500, "acks": 0})
    assert c["acks"] == 0 and c["message.timeout.ms"] == 1000 and c["request.timeout.ms"] == 500
    assert c["auto.offset.reset"] == "earliest"
    assert _error({"default.topic.config": {"acks": "x"}}) == ('Invalid value for configuration property '
                                                             '"request.required.acks"')


# ---- cross-property rules ----------------------------------------------------------------------------

def test_idempotence_forces_acks_inflight_and_checks_conflicts():
    c = Config({"enable.idempotence": True})
    assert c["acks"] == -1 and c["max.in.flight"] == 5 and c["retries"] > 0
    assert Config({"enable.idempotence": True, "max.in.flight": 3})["max.in.flight"] == 3
    assert _error({"enable.idempotence": True, "acks": 1}) == \
        "Failed to create producer: `acks` must be set to `all` when `enable.idempotence` is true"
    assert _error({"enable.idempotence": True, "max.in.flight": 6}) == \
        "Failed to create producer: `max.in.flight` must be set <= 5 when `enable.idempotence` is true"
    assert _error({"enable.idempotence": True, "retries": 0}) == \
        "Failed to create producer: `retries` must be set >= 1 when `enable.idempotence` is true"


def test_transactional_id_rules():
    c = Config({"transactional.id": "tx", "transaction.timeout.ms": 20000})
    assert c["enable.idempotence"] is True and c["message.timeout.ms"] == 20000
    assert _error({"transactional.id": "tx", "enable.idempotence": False}) == \
        "Failed to create producer: `transactional.id` requires `enable.idempotence=true`"
    assert "`message.timeout.ms` must be set <= `transaction.timeout.ms`" in _error(
        {"transactional.id": "tx", "message.timeout.ms": 100000, "transaction.timeout.ms": 60000})


def test_linger_related_rules():
    assert Config({"linger.ms": 100})["sticky.partitioning.linger.ms"] == 200
    assert Config({"linger.ms": 100, "sticky.partitioning.linger.ms": 0})["sticky.partitioning.linger.ms"] == 0
    assert "`message.timeout.ms` must be greater than `linger.ms`" in _error({"linger.ms": 100, "message.timeout.ms": 50})
    assert Config({"linger.ms": 100, "message.timeout.ms": 0})["message.timeout.ms"] == 0


def test_backoff_and_metadata_rules():
    assert "`reconnect.backoff.max.ms` must be >= `reconnect.backoff.ms`" in _error(
        {"reconnect.backoff.ms": 5000, "reconnect.backoff.max.ms": 100})
    assert Config({"topic.metadata.refresh.interval.ms": 1000})["metadata.max.age.ms"] == 3000
    assert Config({"topic.metadata.refresh.interval.ms": 1000, "metadata.max.age.ms": 5})["metadata.max.age.ms"] == 5


def test_consumer_rules():
    base = {"group.id": "g"}
    assert "`fetch.max.bytes` must be >= `message.max.bytes`" in _error(
        {**base, "fetch.max.bytes": 1000, "message.max.bytes": 2000}, "consumer")
    assert "`receive.message.max.bytes` must be >= `fetch.max.bytes` + 512" in _error(
        {**base, "fetch.max.bytes": 100000000, "receive.message.max.bytes": 1000000}, "consumer")
    assert Config({**base, "fetch.max.bytes": 100000000}, kind="consumer")["receive.message.max.bytes"] == 100000512
    assert "`max.poll.interval.ms`must be >= `session.timeout.ms`" in _error(
        {**base, "max.poll.interval.ms": 1000}, "consumer")
    assert "`heartbeat.interval.ms` is not supported for `group.protocol=consumer`" in _error(
        {**base, "group.protocol": "consumer", "heartbeat.interval.ms": 100}, "consumer")
    assert "`group.protocol.type` is not supported for `group.protocol=consumer`" in _error(
        {**base, "group.protocol": "consumer", "group.protocol.type": "consumer"}, "consumer")
    assert "Use `group.remote.assignor` instead" in _error(
        {**base, "group.protocol": "consumer", "partition.assignment.strategy": "range"}, "consumer")
    assert "must have the same protocol type" in _error(
        {**base, "partition.assignment.strategy": "cooperative-sticky,range"}, "consumer")
    assert _error({**base, "partition.assignment.strategy": "range,bogus"}, "consumer") == (
        "Failed to create consumer: Unsupported partition.assignment.strategy: bogus")
    c = Config({**base, "auto.offset.reset": "EARLIEST", "partition.assignment.strategy": "cooperative-sticky"},
               kind="consumer")
    assert c["auto.offset.reset"] == "earliest" and c["partition.assignment.strategy"] == ["cooperative-sticky"]


# ---- shipping to actor processes -------------------------------------------------------------------

def test_to_dict_is_msgpack_and_pickle_safe_and_round_trips():
    def on_delivery(err, msg):
        pass

    def my_partitioner(key, count, available):
        return 0

    c = Config({"bootstrap.servers": "h:1", "linger.ms": 7, "on_delivery": on_delivery, "error_cb": print,
                "partitioner": my_partitioner, "logger": logging.getLogger("x"), "debug": "all"})
    shipped = c.to_dict()
    assert "on_delivery" not in shipped and "error_cb" not in shipped and "logger" not in shipped
    assert shipped["partitioner"] == "custom"
    wire = msgpack.unpackb(msgpack.packb(shipped))
    pickle.loads(pickle.dumps(shipped))
    again = Config.from_dict(wire)
    assert again.kind == "producer"
    assert again["linger.ms"] == 7 and again["debug"] == ["all"] and again.is_set("linger.ms")
    assert not again.is_set("batch.size") and again["batch.size"] == 1000000
    assert c.callbacks() == {"on_delivery": on_delivery, "error_cb": print, "partitioner": my_partitioner,
                             "logger": c["logger"]}
    assert again.callbacks() == {}


def test_mapping_interface():
    c = Config({"linger.ms": 3})
    assert "linger.ms" in c and "bootstrap.servers" in c and "nope" not in c
    assert c.get("nope", 42) == 42
    with pytest.raises(KeyError):
        c["nope"]
    assert len(list(c)) == len(PROPERTIES)
    assert "queue.buffering.max.ms" in repr(c)


def test_table_facts_agree_with_librdkafka_configuration_md():
    if not CONFIGURATION_MD.exists():
        pytest.skip("CONFIGURATION.md not available")
    facts = {}
    for line in CONFIGURATION_MD.read_text().splitlines():
        cells = [cell.strip() for cell in line.split("|")]
        if len(cells) >= 4 and re.fullmatch(r"[a-z_.]+", cells[0]) and cells[0] not in facts:
            facts[cells[0]] = (cells[2], cells[3])
    own = {"on_delivery", "on_commit", "logger", "kqactors.hosts", "client.id", "partition.assignment.strategy",
           "debug", "compression.codec", "enable.auto.commit", "auto.commit.interval.ms", "auto.offset.reset"}
    for name, prop in PROPERTIES.items():
        if name in own or name not in facts or prop.type in ("callback", "pointer"):
            continue
        range_text, default_text = facts[name]
        if prop.min is not None:
            assert range_text == f"{prop.min} .. {prop.max}", name
        if prop.type == "bool":
            assert default_text == str(prop.default).lower(), name
        elif prop.type in ("int", "float"):
            assert float(default_text) == prop.default, name
        elif prop.type in ("enum", "string", "partitioner"):
            assert default_text == str(prop.default), name
    for name in LIBRDKAFKA_ONLY:
        assert name not in PROPERTIES
    unknown = set(facts) - set(PROPERTIES) - set(ALIASES) - LIBRDKAFKA_ONLY - DEDICATED
    assert not unknown, f"librdkafka properties neither implemented nor listed as ignored: {sorted(unknown)}"


def test_properties_whose_effect_cannot_apply_are_named_in_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="kqactors.config"):
        Config({"api.version.request": True, "fetch.queue.backoff.ms": 1000}, kind="producer")
    assert "not applied" not in caplog.text  # true is what kqactors does; the consumer property is only
    assert "fetch.queue.backoff.ms is a consumer property" in caplog.text  # named as such for a producer
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kqactors.config"):
        Config({"api.version.request": "false", "fetch.queue.backoff.ms": 10, "group.id": "g"}, kind="consumer")
    assert "api.version.request is not applied by kqactors: kqactors always asks brokers" in caplog.text
    assert "fetch.queue.backoff.ms is not applied by kqactors: fetching of a partition resumes" in caplog.text


def test_allow_auto_create_topics_defaults_to_true_for_producers_only():
    assert Config({}, kind="producer")["allow.auto.create.topics"] is True
    assert Config({"group.id": "g"}, kind="consumer")["allow.auto.create.topics"] is False
    assert Config({"allow.auto.create.topics": False}, kind="producer")["allow.auto.create.topics"] is False
    assert Config({}, kind="producer").to_dict()["allow.auto.create.topics"] is True


def test_default_topic_config_accepts_every_topic_level_librdkafka_property():
    from kqactors.config.librdkafka_table import TABLE

    samples = {"bool": True, "float": 1.0}
    accepted = 0
    for name, (kind, _scope, lo, _hi, choices, topic) in TABLE.items():
        if not topic or name in DEDICATED:
            continue
        value = choices[0] if choices else (lo if kind == "int" else samples.get(kind, "x"))
        if name == "partitioner":
            value = "murmur2"
        elif name in ("request.required.acks", "acks"):
            value = 1
        Config({"group.id": "g", "default.topic.config": {name: value}}, kind="consumer")
        accepted += 1
    assert accepted >= 12
    for name in ("partitioner_cb", "msg_order_cmp", "opaque"):  # librdkafka's dedicated setters, refused there too
        assert "must be set through dedicated" in _error({"default.topic.config": {name: print}})


def test_group_protocol_type_other_than_consumer_is_refused_as_librdkafka_does():
    # "consumer" is the only protocol type of the built-in assignors (and what JoinGroup sends)
    assert _error({"group.id": "g", "group.protocol.type": "other"}, "consumer") == (
        "Failed to create consumer: Unsupported partition.assignment.strategy: range")
