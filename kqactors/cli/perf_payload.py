"""Message payloads and topic set-up shared by ``kqactors perf`` and the benchmark harness.

Runs in: the perf command's process and the benchmark processes (never the client itself). Owns the test
payloads (deterministic, log-line-like text so that lz4/zstd see realistic ratios rather than a run of one
repeated byte) and creating a topic with a chosen partition count through the blocking protocol client.
"""

from __future__ import annotations

import random

from kqactors.errors import KafkaError, KafkaException

__all__ = ["make_payloads", "create_topic", "TopicSetup", "MAX_PAYLOAD_BYTES"]

MAX_PAYLOAD_BYTES = 16 * 1024 * 1024
"""The distinct payloads of a run take at most this much together (fewer of them for large messages)."""

_WORDS = (
    "order", "payment", "user", "session", "click", "view", "cart", "checkout", "shipped", "refund",
    "status", "ok", "error", "retry", "latency", "region", "eu-west", "us-east", "ap-south", "mobile",
    "desktop", "tablet", "price", "currency", "EUR", "USD", "item", "sku", "quantity", "discount",
    "coupon", "account", "login", "logout", "search", "query", "result", "page", "banner", "campaign",
)


def make_payloads(size: int, distinct: int = 1024, seed: int = 42,
                  max_total_bytes: int = MAX_PAYLOAD_BYTES) -> list[bytes]:
    """``distinct`` different payloads of exactly ``size`` bytes each, identical for a given seed.

    1024 distinct values by default so that a batch (up to ~1 MB) seldom holds exact repeats, which would
    flatter the compressors: each 1 KiB value compresses about 2.3x on its own (zlib), a batch about 3.9x.
    Large messages get fewer distinct values, so that all of them take at most ``max_total_bytes`` (16 MiB:
    messages up to 16 KiB keep all 1024; 500 kB messages get 33, built in well under a second), still more
    than a batch holds.
    """
    if size < 0:
        raise ValueError(f"message size must be >= 0, got {size}")
    if distinct < 1:
        raise ValueError(f"need at least one distinct payload, got {distinct}")
    if size:
        distinct = min(distinct, max(2, max_total_bytes // size))
    rng = random.Random(seed)
    payloads = []
    for index in range(distinct):
        parts: list[str] = []
        length = 0
        while length < size:
            word = rng.choice(_WORDS)
            part = f'"{word}":{rng.randint(0, 99999)},' if rng.random() < 0.5 else f'"{word}":"{rng.choice(_WORDS)}",'
            parts.append(part)
            length += len(part)
        text = (f"{{\"seq\":{index}," + "".join(parts))[:size]
        payloads.append(text.encode("ascii").ljust(size, b" "))
    return payloads


class TopicSetup:
    """Outcome of :func:`create_topic`: ``created``, ``exists`` or ``skipped`` (with the reason)."""

    def __init__(self, status: str, reason: str = "") -> None:
        self.status = status
        self.reason = reason

    def __repr__(self) -> str:
        return f"TopicSetup({self.status!r}, {self.reason!r})"


def create_topic(bootstrap: str, topic: str, partitions: int, timeout: float = 10.0) -> TopicSetup:
    """Create ``topic`` with ``partitions`` partitions (broker-default replication) via CreateTopics.

    An existing topic is left as it is (``exists``). If the broker cannot be asked (no CreateTopics, a
    connection that needs SASL/TLS, ...) the result is ``skipped`` and the caller may rely on the broker's
    auto-creation; a broker that refuses the request outright raises KafkaException.
    """
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    # Imported here so that the payload helpers stay importable without the protocol package.
    from kqactors.protocol.blocking import BlockingConnection
    from kqactors.protocol.generated.create_topics import CreatableTopic, CreateTopicsRequest

    try:
        with BlockingConnection.from_bootstrap(bootstrap, timeout=timeout) as connection:
            version = connection.versions.version_for("CreateTopics")
            replication = -1 if version >= 4 else 1
            request = CreateTopicsRequest(
                topics=[CreatableTopic(name=topic, num_partitions=partitions, replication_factor=replication)],
                timeout_ms=int(timeout * 1000),
            )
            response = connection.request("CreateTopics", request, version=version)
    except (KafkaException, OSError, ValueError) as exc:
        return TopicSetup("skipped", f"CreateTopics not possible: {exc}")
    for result in response.topics:
        if result.name != topic:
            continue
        if result.error_code == 0:
            return TopicSetup("created")
        if result.error_code == KafkaError.TOPIC_ALREADY_EXISTS:
            return TopicSetup("exists")
        raise KafkaException(KafkaError(result.error_code,
                                        f"CreateTopics {topic!r}: {result.error_message or 'failed'}"))
    return TopicSetup("skipped", "CreateTopics response did not mention the topic")
