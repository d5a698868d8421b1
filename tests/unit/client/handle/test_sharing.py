"""Runs in: unit tests. Which attached clients share a group of actors: producers whose actor-side settings are
the same; app-side settings may differ; consumers, admin clients, transactional and OAUTHBEARER clients never."""

from __future__ import annotations

from typing import Any

import pytest

from kqactors.client.handle.sharing import APP_SIDE_ONLY, PRODUCER_MAIN_FACTORY, group_key
from kqactors.config import Config


def _key(kind: str = "producer", main: str = PRODUCER_MAIN_FACTORY, **settings: Any) -> str | None:
    conf = Config({"bootstrap.servers": "b:9092", **{k.replace("_", "."): v for k, v in settings.items()}},
                  kind="consumer" if kind == "consumer" else "producer")
    return group_key(kind, conf.to_dict(), main)


def test_same_settings_same_group_and_the_key_reveals_no_secret() -> None:
    a = Config({"bootstrap.servers": "b:9092", "sasl.password": "s3cret"}, kind="producer").to_dict()
    b = Config({"bootstrap.servers": "b:9092", "sasl.password": "s3cret"}, kind="producer").to_dict()
    assert group_key("producer", a, PRODUCER_MAIN_FACTORY) == group_key("producer", b, PRODUCER_MAIN_FACTORY)
    assert "s3cret" not in str(group_key("producer", a, PRODUCER_MAIN_FACTORY))


@pytest.mark.parametrize("setting, value", [
    ("linger.ms", 50), ("acks", 1), ("compression.type", "zstd"), ("enable.idempotence", True),
    ("batch.size", 4096), ("client.id", "other"), ("bootstrap.servers", "c:9092"), ("message.timeout.ms", 1234),
    ("security.protocol", "ssl"), ("sasl.password", "x"),
])
def test_a_setting_the_actors_act_on_splits_groups(setting: str, value: Any) -> None:
    base = Config({"bootstrap.servers": "b:9092"}, kind="producer").to_dict()
    other = dict(base, **{setting: value})
    assert group_key("producer", base, PRODUCER_MAIN_FACTORY) != group_key("producer", other, PRODUCER_MAIN_FACTORY)


@pytest.mark.parametrize("setting, value", [
    ("queue.buffering.max.messages", 10), ("partitioner", "murmur2"), ("delivery.report.only.error", True),
    ("sticky.partitioning.linger.ms", 3), ("topic.metadata.propagation.max.ms", 5),
])
def test_app_side_settings_do_not_split_groups(setting: str, value: Any) -> None:
    assert setting in APP_SIDE_ONLY
    base = Config({"bootstrap.servers": "b:9092"}, kind="producer")
    other = Config({"bootstrap.servers": "b:9092", setting: value}, kind="producer")
    assert group_key("producer", base.to_dict(), PRODUCER_MAIN_FACTORY) == \
        group_key("producer", other.to_dict(), PRODUCER_MAIN_FACTORY)


def test_clients_that_keep_their_own_actors() -> None:
    assert _key() is not None
    assert _key(kind="consumer", main="kqactors.actors.consumer_main:ConsumerMainActor", group_id="g") is None
    assert _key(main="kqactors.actors.admin:AdminMainActor") is None  # an AdminClient's handle
    assert _key(transactional_id="tx") is None
    oauth = Config({"bootstrap.servers": "b:9092", "security.protocol": "sasl_plaintext",
                    "sasl.mechanisms": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": True,
                    "sasl.oauthbearer.config": "principal=me"}, kind="producer")
    assert group_key("producer", oauth.to_dict(), PRODUCER_MAIN_FACTORY) is None
