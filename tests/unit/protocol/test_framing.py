"""Runs in: tests. Framing, zero-copy hot paths, negotiation and malformed-input handling."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kqactors.errors import KafkaError, KafkaException
from kqactors.protocol.api import (
    CLIENT_VERSIONS,
    api_info,
    decode_response,
    encode_request,
    encode_request_chunks,
    negotiate,
    request_header_version,
    response_header_version,
)
from kqactors.protocol.errors import EncodeError, ProtocolError, UnsupportedVersionError
from kqactors.protocol.generated.api_versions import ApiVersion, ApiVersionsResponse
from kqactors.protocol.generated.fetch import FetchableTopicResponse, FetchResponse, PartitionData
from kqactors.protocol.generated.metadata import (
    MetadataRequest,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from kqactors.protocol.generated.produce import PartitionProduceData, ProduceRequest, TopicProduceData
from kqactors.protocol.handshake import advertised_api_versions_max


def _produce_request(batch) -> ProduceRequest:
    return ProduceRequest(acks=-1, timeout_ms=30000, topic_data=[
        TopicProduceData(name="orders", partition_data=[PartitionProduceData(index=4, records=batch)])])


@pytest.mark.parametrize("version", [3, 9, 11])
def test_produce_chunks_reference_the_batch_without_copying(version):
    batch = memoryview(bytes(range(256)) * 40)  # 10 KiB pre-encoded "record batch"
    request = _produce_request(batch)
    chunks = encode_request_chunks(0, version, 99, "app", request)
    assert any(chunk is batch for chunk in chunks), "the batch must ride as its own buffer"
    joined = b"".join(bytes(c) for c in chunks)
    assert joined == encode_request(0, version, 99, "app", request)
    (size,) = struct.unpack_from(">i", joined, 0)
    assert size == len(joined) - 4


def test_fetch_records_are_zero_copy_slices_of_the_response():
    batch = b"\x00" * 61 + b"RECORDS" * 10
    response = FetchResponse(responses=[FetchableTopicResponse(topic="t", partitions=[
        PartitionData(partition_index=0, high_watermark=10, records=batch)])])
    for version in (4, 11, 12):
        frame = struct.pack(">i", 5) + response.encode(version)  # correlation id + body (header v0)
        if response_header_version(1, version) == 1:
            frame = frame[:4] + b"\x00" + frame[4:]
        buffer = bytearray(frame)
        correlation_id, decoded = decode_response(buffer, 1, version)
        records = decoded.responses[0].partitions[0].records
        assert correlation_id == 5
        assert isinstance(records, memoryview) and records.obj is buffer
        assert bytes(records) == batch


def test_header_version_rules():
    assert request_header_version(3, 8) == 1 and request_header_version(3, 9) == 2
    assert response_header_version(3, 8) == 0 and response_header_version(3, 9) == 1
    assert request_header_version(18, 3) == 2 and response_header_version(18, 3) == 0


def test_registry_lookup_by_name_and_key():
    info = api_info("Fetch")
    assert info.key == 1 and info.request.__name__ == "FetchRequest" and info is api_info(1)
    assert CLIENT_VERSIONS[1] == (info.min_version, info.max_version)
    with pytest.raises(UnsupportedVersionError):
        api_info(9999)


def test_negotiate_picks_highest_common_version_and_marks_unsupported():
    broker = {3: (0, 8), 18: (0, 2), 0: (3, 7), 12: (9, 12)}
    versions = negotiate(broker)
    assert versions[3] == 8 and versions[18] == 2 and versions[0] == 7
    assert 12 not in versions and "no common version" in versions.unsupported[12]
    assert 1 not in versions and versions.unsupported[1] == "not offered by the broker"
    with pytest.raises(KafkaException) as info:
        versions.version_for("Fetch")
    assert info.value.error.code() == KafkaError.UNSUPPORTED_VERSION
    assert versions.version_for("Metadata") == 8


def test_negotiate_accepts_an_api_versions_response_and_client_caps():
    response = ApiVersionsResponse(api_keys=[ApiVersion(api_key=3, min_version=0, max_version=12),
                                             ApiVersion(api_key=1, min_version=0, max_version=16)])
    capped = negotiate(response, {3: (0, 9), 1: (4, 13)})
    assert dict(capped) == {3: 9, 1: 13}


def test_unsupported_version_is_a_clear_error():
    with pytest.raises(UnsupportedVersionError):
        MetadataRequest().encode(99)
    with pytest.raises(UnsupportedVersionError):
        MetadataResponse.decode(b"", 99)


def test_encode_bad_values_raise_encode_error():
    with pytest.raises(EncodeError, match="v3"):
        MetadataRequest(allow_auto_topic_creation=False).encode(3)  # not ignorable, absent before v4
    with pytest.raises(EncodeError):
        MetadataResponse(throttle_time_ms=1 << 40).encode(5)
    with pytest.raises(EncodeError):
        MetadataRequest(topics=["not a struct"]).encode(5)


def _metadata_response() -> MetadataResponse:
    return MetadataResponse(
        brokers=[MetadataResponseBroker(node_id=1, host="h", port=9092, rack="r")],
        cluster_id="c", controller_id=1,
        topics=[MetadataResponseTopic(name="t", partitions=[
            MetadataResponsePartition(partition_index=0, leader_id=1, replica_nodes=[1], isr_nodes=[1])])])


@pytest.mark.parametrize("version", [1, 8, 12])
def test_every_truncation_raises_protocol_error(version):
    encoded = _metadata_response().encode(version)
    # a response may end without its top-level tagged-field section (librdkafka and kqactors accept that)
    last = len(encoded) - 1 if MetadataResponse.is_flexible(version) else len(encoded)
    if last < len(encoded):
        assert MetadataResponse.decode(encoded[:last], version) == _metadata_response()
    for cut in range(last):
        with pytest.raises(ProtocolError) as info:
            MetadataResponse.decode(encoded[:cut], version)
        assert info.value.error.code() == KafkaError._BAD_MSG


@settings(max_examples=150, deadline=None)
@given(garbage=st.binary(max_size=80), version=st.sampled_from([4, 12, 16]))
def test_garbage_never_leaks_other_exceptions(garbage, version):
    try:
        FetchResponse.decode(garbage, version)
    except ProtocolError:
        pass


def test_huge_array_count_fails_fast():
    body = b"\x00\x00\x00\x00" + b"\x7f\xff\xff\xff"  # throttle time, then 2^31-1 brokers
    with pytest.raises(ProtocolError, match="exceeds"):
        MetadataResponse.decode(body, 3)


def test_advertised_api_versions_max_reads_kafka_and_mock_layouts():
    # Kafka (KIP-511): error 35 and a v0-layout body listing ApiVersions 0..3.
    kafka = ApiVersionsResponse(error_code=35, api_keys=[ApiVersion(api_key=18, min_version=0, max_version=3)])
    assert advertised_api_versions_max(memoryview(kafka.encode(0)), 0, 4) == 3
    # librdkafka mock cluster, as captured: error 35, a one-byte count, then (18, 0, 2) and padding.
    mock = bytes.fromhex("0023" "01" "0012" "0000" "0002" "00000000")
    assert advertised_api_versions_max(memoryview(mock), 0, 4) == 2
    assert advertised_api_versions_max(memoryview(b"\x00\x23"), 0, 4) is None
