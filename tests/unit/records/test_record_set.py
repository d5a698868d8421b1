"""Runs in: unit tests. Header scanning of fetched record sets (truncated tails, mixed magic)."""

from __future__ import annotations

import pytest

from kqactors.records import (
    LZ4,
    ZSTD,
    CorruptRecordError,
    build_batch,
    build_control_batch,
    decode_record_set,
    iter_batch_headers,
    scan_record_set,
)

from .legacy_format import legacy_message

TS = 1_700_000_000_000


def make_batch(base_offset: int, count: int, codec: int = 0, **options) -> bytes:
    messages = [(TS + i, b"k", b"value %d" % i, None) for i in range(count)]
    return bytes(build_batch(messages, base_offset=base_offset, codec=codec, **options))


def test_scan_complete_batches_without_decoding() -> None:
    first = make_batch(0, 3, producer_id=7, producer_epoch=1, base_sequence=0)
    second = make_batch(3, 5, codec=ZSTD)
    control = bytes(build_control_batch(True, producer_id=7, producer_epoch=1, base_offset=8))
    scan = scan_record_set(first + second + control)
    assert [(b.base_offset, b.last_offset, b.record_count) for b in scan.batches] == [
        (0, 2, 3),
        (3, 7, 5),
        (8, 8, 1),
    ]
    assert [b.position for b in scan.batches] == [0, len(first), len(first) + len(second)]
    assert [b.size for b in scan.batches] == [len(first), len(second), len(control)]
    assert scan.batches[0].producer_id == 7 and scan.batches[1].codec == ZSTD
    assert scan.batches[2].is_control
    assert all(b.records is None for b in scan.batches)
    assert scan.consumed == len(first) + len(second) + len(control)
    assert not scan.is_truncated and scan.next_offset(0) == 9


@pytest.mark.parametrize("cut", [1, 11, 12, 17, 40, 61, 100])
def test_truncated_trailing_batch_is_ignored(cut: int) -> None:
    first = make_batch(10, 4)
    second = make_batch(14, 20, codec=LZ4)
    data = first + second[:cut]
    scan = scan_record_set(memoryview(data))
    assert [b.base_offset for b in scan.batches] == [10]
    assert scan.consumed == len(first)
    assert scan.next_offset(0) == 14
    assert scan.partial_size == (len(second) if cut >= 12 else 0)
    assert [r[0] for b in decode_record_set(bytearray(data)) for r in b.records] == [10, 11, 12, 13]


def test_only_a_partial_batch() -> None:
    big = make_batch(100, 50)
    scan = scan_record_set(big[:200])
    assert scan.batches == [] and scan.is_truncated and scan.partial_size == len(big)
    assert scan.next_offset(100) == 100
    assert decode_record_set(big[:200]) == []
    assert scan_record_set(b"").batches == []


def test_mixed_legacy_and_v2() -> None:
    data = (
        legacy_message(5, 0, b"a", b"b") + legacy_message(6, 1, None, b"c", timestamp=TS) + make_batch(7, 2)
    )
    headers = list(iter_batch_headers(data))
    assert [(h.magic, h.base_offset, h.last_offset, h.record_count) for h in headers] == [
        (0, 5, 5, 1),
        (1, 6, 6, 1),
        (2, 7, 8, 2),
    ]
    assert [h.timestamp_type for h in headers] == [-1, 0, 0]
    records = [r for b in decode_record_set(data) for r in b.records]
    assert records == [
        (5, -1, b"a", b"b", ()),
        (6, TS, None, b"c", ()),
        (7, TS, b"k", b"value 0", ()),
        (8, TS + 1, b"k", b"value 1", ()),
    ]


def test_impossible_length_raises() -> None:
    batch = bytearray(make_batch(0, 1))
    batch[8:12] = (5).to_bytes(4, "big")
    with pytest.raises(CorruptRecordError, match="impossible entry length 5"):
        scan_record_set(bytes(batch))
    batch[8:12] = (-1).to_bytes(4, "big", signed=True)
    with pytest.raises(CorruptRecordError, match="impossible entry length -1"):
        scan_record_set(bytes(batch))


def test_v2_shorter_than_header_raises() -> None:
    batch = bytearray(make_batch(0, 1))
    batch[8:12] = (30).to_bytes(4, "big")
    with pytest.raises(CorruptRecordError, match="shorter than its 61-byte header"):
        scan_record_set(bytes(batch))
