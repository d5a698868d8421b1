"""Runs in: tests. Hand-derived wire bytes (from the protocol guide and the JSON specs) for a few messages.

Each expected byte string below was written out field by field from the spec, not produced by our encoder.
"""

from __future__ import annotations

from kqactors.protocol.api import decode_request, decode_response_header, encode_request
from kqactors.protocol.generated.api_versions import ApiVersion, ApiVersionsRequest, ApiVersionsResponse
from kqactors.protocol.generated.consumer_protocol import ConsumerProtocolSubscription
from kqactors.protocol.generated.metadata import MetadataRequest, MetadataRequestTopic

ZERO_UUID = bytes(16)


def test_metadata_v0_request_frame():
    frame = encode_request(3, 0, 7, "kq", MetadataRequest(topics=[MetadataRequestTopic(name="foo")]))
    expected = bytes.fromhex(
        "00000015"  # size 21
        "0003" "0000" "00000007"  # api key 3, version 0, correlation id 7
        "0002" "6b71"  # client id "kq" (int16 length)
        "00000001"  # topics: int32 count 1
        "0003" "666f6f"  # name "foo"
    )
    assert frame == expected


def test_metadata_v12_request_flexible_frame():
    frame = encode_request(3, 12, 7, "kq", MetadataRequest(topics=[MetadataRequestTopic(name="foo")]))
    expected = bytes.fromhex(
        "00000026"  # size 38 = 13 header + 25 body
        "0003" "000c" "00000007"  # api key 3, version 12, correlation id 7
        "0002" "6b71"  # client id stays a non-compact string in header v2
        "00"  # header tagged fields: none
        "02"  # topics: compact array, count + 1
        + "00" * 16  # topic id (zero uuid)
        + "04" "666f6f"  # name: compact nullable string, length + 1
        "00"  # topic tagged fields
        "01"  # allow_auto_topic_creation = true
        "00"  # include_topic_authorized_operations = false
        "00"  # message tagged fields
    )
    assert frame == expected


def test_metadata_v12_unknown_tagged_field_is_preserved():
    body = bytes.fromhex("02" + "00" * 16 + "04666f6f00" "01" "00" "01" "05" "02" "abcd")
    request = MetadataRequest.decode(body, 12)
    assert request.topics[0].name == "foo"
    assert request.unknown_tagged_fields == {5: b"\xab\xcd"}
    assert request.encode(12) == body


def test_api_versions_v3_request_uses_header_v2():
    request = ApiVersionsRequest(client_software_name="kq", client_software_version="1.0")
    frame = encode_request(18, 3, 1, "kqactors", request)
    expected = bytes.fromhex(
        "0000001b"  # size 27
        "0012" "0003" "00000001"  # api key 18, version 3, correlation id 1
        "0008" "6b71616374 6f7273".replace(" ", "")  # client id "kqactors"
        + "00"  # header tagged fields
        "03" "6b71"  # client software name, compact
        "04" "312e30"  # client software version "1.0", compact
        "00"  # body tagged fields
    )
    assert frame == expected
    api_key, version, correlation_id, client_id, decoded = decode_request(frame[4:])
    assert (api_key, version, correlation_id, client_id) == (18, 3, 1, "kqactors")
    assert decoded == request


def test_api_versions_v3_response_with_tagged_field():
    body = bytes.fromhex(
        "0000"  # error code
        "02" "0012" "0000" "0004" "00"  # one ApiVersion (18, 0..4) + its empty tag section
        "00000000"  # throttle time
        "01" "01" "08" "0000000000000005"  # one tagged field: tag 1 (FinalizedFeaturesEpoch), 8 bytes
    )
    response = ApiVersionsResponse.decode(body, 3)
    assert response.error_code == 0
    assert response.api_keys == [ApiVersion(api_key=18, min_version=0, max_version=4)]
    assert response.finalized_features_epoch == 5
    assert response.supported_features == [] and response.zk_migration_ready is False
    assert response.encode(3) == body


def test_response_header_versions():
    # ApiVersions: header v0 even for flexible versions (no tag byte).
    assert decode_response_header(bytes.fromhex("0000002a" "0000"), 18, 3) == (42, 4)
    # Metadata v12: flexible, header v1 has a tagged-field section after the correlation id.
    assert decode_response_header(bytes.fromhex("0000002a" "00" "0000"), 3, 12) == (42, 5)
    assert decode_response_header(bytes.fromhex("0000002a" "0000"), 3, 8) == (42, 4)


def test_consumer_protocol_subscription_version_prefix():
    payload = bytes.fromhex(
        "0001"  # version 1
        "00000001" "0001" "74"  # topics ["t"]
        "ffffffff"  # user data: null
        "00000000"  # owned partitions: empty
    )
    subscription, version = ConsumerProtocolSubscription.decode_versioned(payload)
    assert version == 1
    assert subscription.topics == ["t"] and subscription.user_data is None
    assert subscription.encode_versioned(1) == payload


def test_consumer_protocol_newer_version_is_read_as_newest_known():
    payload = bytes.fromhex(
        "0009"  # a future version
        "00000000"  # topics []
        "ffffffff"  # user data null
        "00000000"  # owned partitions []
        "00000005"  # generation id 5 (v2+)
        "ffff"  # rack id null (v3+)
        "cafe"  # fields from the future: ignored
    )
    subscription, version = ConsumerProtocolSubscription.decode_versioned(payload)
    assert version == 9
    assert subscription.generation_id == 5 and subscription.rack_id is None
