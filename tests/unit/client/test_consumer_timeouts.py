"""poll()/consume() timeouts as confluent-kafka passes them to librdkafka: whole milliseconds, truncated
(kqactors.client.consumer.consumer.whole_ms)."""

from __future__ import annotations

import pytest

from kqactors.client.consumer.consumer import Consumer, whole_ms


@pytest.mark.parametrize(("seconds", "expected"), [
    (0.0007, 0.0),      # under a millisecond: what is there, at once (confluent-kafka: int(0.7) == 0 ms)
    (0.0019, 0.001),
    (0.25, 0.25),
    (1.0, 1.0),
    (0.0, 0.0),
    (float("inf"), float("inf")),  # None / -1: wait for ever
])
def test_whole_ms_truncates_like_confluent_kafka(seconds: float, expected: float) -> None:
    assert whole_ms(seconds) == pytest.approx(expected)


def test_poll_and_consume_pass_whole_milliseconds() -> None:
    consumer = Consumer.__new__(Consumer)  # no processes: only the argument handling is looked at
    consumer._closed = False
    seen: list[tuple[int, float]] = []
    consumer._consume = lambda limit, timeout: seen.append((limit, timeout)) or []  # type: ignore[method-assign]
    assert consumer.poll(0.0004) is None
    assert consumer.consume(100, 0.0027) == []
    consumer.consume(5, -1)
    consumer.poll(None)
    assert seen[0] == (1, 0.0)
    assert seen[1] == (100, pytest.approx(0.002))
    assert seen[2] == (5, float("inf")) and seen[3] == (1, float("inf"))
