"""Runs in: tests. encode → decode → equal for every generated message class and every version."""

from __future__ import annotations

import importlib
import pkgutil

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import kqactors.protocol.generated as generated_pkg
from kqactors.protocol.base import Message

from .strategies import message_strategy


def _all_message_classes() -> list[type[Message]]:
    classes = []
    for info in pkgutil.iter_modules(generated_pkg.__path__):
        module = importlib.import_module(f"{generated_pkg.__name__}.{info.name}")
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Message) and value.__module__ == module.__name__:
                classes.append(value)
    return sorted(classes, key=lambda c: c.__name__)


MESSAGE_CLASSES = _all_message_classes()


def test_every_required_api_is_generated():
    names = {cls.__name__ for cls in MESSAGE_CLASSES}
    for api in ("ApiVersions", "Metadata", "Produce", "Fetch", "ConsumerGroupHeartbeat", "SaslAuthenticate",
                "TxnOffsetCommit", "AlterUserScramCredentials", "DescribeCluster"):
        assert f"{api}Request" in names and f"{api}Response" in names
    assert {"RequestHeader", "ResponseHeader", "ConsumerProtocolSubscription",
            "ConsumerProtocolAssignment"} <= names


@pytest.mark.parametrize("cls", MESSAGE_CLASSES, ids=lambda c: c.__name__)
# No shrink phase: a failure already names the class and version, and shrinking nested messages across
# every version is slow.
@settings(max_examples=6, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_roundtrip_all_versions(cls, data):
    low, high = cls.VALID_VERSIONS
    for version in range(low, high + 1):
        message = data.draw(message_strategy(cls, version), label=f"v{version}")
        encoded = message.encode(version)
        decoded = cls.decode(encoded, version)
        assert decoded == message, f"{cls.__name__} v{version}"
        # Re-encoding the decoded message must reproduce the bytes exactly.
        assert decoded.encode(version) == encoded
        # The chunked encoder produces the same bytes.
        assert b"".join(bytes(c) for c in message.encode_chunks(version)) == encoded
