"""Runs in: unit tests. v2 batches cross-checked against aiokafka's and kafka-python's codecs, per codec.

Theirs encodes -> ours decodes, and ours encodes -> theirs decodes (CRC validated on both sides).
"""

from __future__ import annotations

import pytest

from kqactors.records import GZIP, LZ4, NONE, SNAPPY, ZSTD, build_batch, decode_record_set

CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]
TS = 1_700_000_000_000
MESSAGES = [
    (TS + i * 3 - (40 if i == 5 else 0), b"key-%d" % i if i % 4 else None,
     (b"value %d;" % i) * (i * 7) if i % 5 else None, [("idx", str(i).encode()), ("nil", None)] if i % 2 else [])
    for i in range(40)
]  # fmt: skip


def _peers():
    from aiokafka.record import default_records as aio
    from kafka.record import default_records as kp

    return {
        "aiokafka-C": (aio.DefaultRecordBatchBuilder, aio.DefaultRecordBatch),
        "aiokafka-py": (aio._DefaultRecordBatchBuilderPy, aio._DefaultRecordBatchPy),
        "kafka-python": (kp.DefaultRecordBatchBuilder, kp.DefaultRecordBatch),
    }


PEERS = list(_peers())


def _expected(base_offset: int = 0):
    return [(base_offset + i, ts, k, v, tuple(h)) for i, (ts, k, v, h) in enumerate(MESSAGES)]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("peer", PEERS)
def test_peer_encodes_we_decode(peer: str, codec: int) -> None:
    builder_cls, _ = _peers()[peer]
    builder = builder_cls(2, codec, 1, 4242, 3, 17, 1 << 24)
    for offset, (ts, key, value, headers) in enumerate(MESSAGES):
        assert builder.append(offset, ts, key, value, list(headers)) is not None
    [batch] = decode_record_set(bytes(builder.build()))
    assert batch.records == _expected()
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (4242, 3, 17)
    assert batch.is_transactional and batch.codec == codec


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("peer", PEERS)
def test_we_encode_peer_decodes(peer: str, codec: int) -> None:
    _, reader_cls = _peers()[peer]
    data = bytes(build_batch(MESSAGES, codec=codec, base_offset=900, producer_id=4242, producer_epoch=3,
                             base_sequence=17))  # fmt: skip
    batch = reader_cls(data)
    assert batch.validate_crc()
    assert (batch.base_offset, batch.producer_id, batch.producer_epoch, batch.base_sequence) == (
        900,
        4242,
        3,
        17,
    )
    assert batch.compression_type == codec
    got = [(r.offset, r.timestamp, r.key, r.value, tuple(tuple(h) for h in r.headers)) for r in batch]
    assert got == _expected(900)
