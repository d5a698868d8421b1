"""Unit tests for reading throttle_time_ms from responses and librdkafka's throttle event rule
(kqactors.actors.broker.throttle)."""

from __future__ import annotations

import pytest

from kqactors.actors.broker.throttle import (
    FIRST_FIELD_FROM,
    WITHOUT_FIELD,
    ThrottleReporter,
    _response_class,
    throttle_time_ms,
)
from kqactors.protocol.generated import API_TABLE
from kqactors.protocol.generated.fetch import FetchResponse
from kqactors.protocol.generated.metadata import MetadataResponse
from kqactors.protocol.generated.produce import (
    PartitionProduceResponse,
    ProduceResponse,
    TopicProduceResponse,
)
from kqactors.protocol.requests import REQUEST_KINDS


def produce_response(throttle_ms: int) -> ProduceResponse:
    return ProduceResponse(responses=[TopicProduceResponse(name="t", partition_responses=[
        PartitionProduceResponse(index=0, error_code=0, base_offset=7)])], throttle_time_ms=throttle_ms)


@pytest.mark.parametrize("version", [1, 7, 12])
def test_fetch_throttle_is_read_from_the_first_field(version):
    body = FetchResponse(throttle_time_ms=250, responses=[]).encode(version)
    assert throttle_time_ms(1, version, body) == 250
    assert throttle_time_ms(1, 0, FetchResponse(responses=[]).encode(0)) == 0  # v0 has no such field


@pytest.mark.parametrize("version", [3, 8, 9, 10])
def test_produce_throttle_follows_the_results(version):
    body = produce_response(1500).encode(version)
    assert throttle_time_ms(0, version, body) == 1500
    assert throttle_time_ms(0, version, produce_response(0).encode(version)) == 0


def test_produce_throttle_of_flexible_versions_is_skipped_unless_wanted():
    body = produce_response(900).encode(10)
    assert throttle_time_ms(0, 10, body, decode_later=False) == 0
    assert throttle_time_ms(0, 8, produce_response(900).encode(8), decode_later=False) == 0


def test_metadata_and_malformed_bodies():
    assert throttle_time_ms(3, 12, MetadataResponse(throttle_time_ms=42).encode(12)) == 42
    assert throttle_time_ms(3, 12, b"\x00") == 0
    assert throttle_time_ms(0, 9, b"garbage") == 0
    assert throttle_time_ms(999, 0, b"\x00\x00\x00\x05") == 0  # an API without the field


def test_every_request_kind_sent_has_a_known_throttle_position():
    for kind in REQUEST_KINDS.values():
        if kind.name == "ApiVersions":
            continue  # answered inside the handshake
        assert kind.api_key in FIRST_FIELD_FROM or kind.api_key in WITHOUT_FIELD or kind.api_key == 0, kind.name
    for api_key in FIRST_FIELD_FROM:
        assert api_key in API_TABLE
    for api_key in WITHOUT_FIELD:  # checked against the specs: no field of that name
        assert "throttle_time_ms" not in _response_class(api_key).__slots__


def test_reporter_reports_throttling_and_the_return_to_zero_once():
    reporter = ThrottleReporter()
    assert reporter.observe(0) is None
    assert reporter.observe(100) == 100
    assert reporter.observe(50) == 50
    assert reporter.observe(0) == 0  # "no longer throttled"
    assert reporter.observe(0) is None
