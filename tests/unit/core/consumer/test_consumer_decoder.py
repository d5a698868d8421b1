"""Runs in: unit tests. Toppar-side decoding: fetch-offset skipping, control records, aborted transactions
(read_committed vs read_uncommitted), corrupt batches as in-order error events, and EOF events."""

from __future__ import annotations

import struct

import pytest

from kqactors.core.consumer.decoder import FetchedSlice, SliceDecoder
from kqactors.core.consumer.packing import MessageBatch
from kqactors.core.consumer.settings import FetchSettings
from kqactors.errors import KafkaError
from kqactors.message import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME
from kqactors.records import LZ4, ZSTD, build_batch, build_control_batch

TS = 1_700_000_000_000


def data(base: int, count: int, *, pid: int = -1, txn: bool = False, codec: int = 0, tag: str = "m",
         **options) -> bytes:
    messages = [(TS + i, f"k{base + i}".encode(), f"{tag}{base + i}".encode(), None) for i in range(count)]
    if pid >= 0:
        options.update(producer_id=pid, producer_epoch=0, base_sequence=0)
    return bytes(build_batch(messages, base_offset=base, codec=codec, transactional=txn, **options))


def marker(offset: int, pid: int, commit: bool, epoch: int = -1) -> bytes:
    return bytes(build_control_batch(commit, producer_id=pid, producer_epoch=0, base_offset=offset, timestamp=TS,
                                     partition_leader_epoch=epoch))


def decode(records: bytes, fetch_offset: int = 0, *, aborted=(), read_committed=True, check_crcs=False,
           eof_offset=-1):
    settings = FetchSettings(read_committed=read_committed, check_crcs=check_crcs)
    sl = FetchedSlice("t", 3, 7, fetch_offset, fetch_offset, records, aborted=aborted, eof_offset=eof_offset)
    decoded = SliceDecoder(settings).decode(sl)
    batch = MessageBatch("t", 3, decoded.frame, decoded.version)
    messages, _count, _nbytes = batch.take()
    return decoded, messages


def values(messages) -> list[bytes]:
    return [m.value() for m in messages if m.error() is None]


def test_plain_batches_decode_in_order_with_metadata() -> None:
    records = data(0, 3) + data(3, 2, codec=ZSTD)
    decoded, messages = decode(records)
    assert [m.offset() for m in messages] == [0, 1, 2, 3, 4]
    assert values(messages) == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    assert messages[1].key() == b"k1"
    assert messages[1].timestamp() == (TIMESTAMP_CREATE_TIME, TS + 1)
    assert all(m.topic() == "t" and m.partition() == 3 for m in messages)
    assert decoded.messages == 5 and decoded.version == 7


def test_records_before_the_fetch_offset_are_skipped_even_inside_a_compressed_batch() -> None:
    records = data(10, 6, codec=LZ4) + data(16, 2)
    decoded, messages = decode(records, fetch_offset=13)
    assert [m.offset() for m in messages] == [13, 14, 15, 16, 17]
    assert decoded.messages == 5


def test_batches_wholly_before_the_fetch_offset_are_not_delivered() -> None:
    _, messages = decode(data(0, 3) + data(3, 3), fetch_offset=3)
    assert [m.offset() for m in messages] == [3, 4, 5]


def test_log_append_time_and_leader_epoch_reach_the_message() -> None:
    records = data(0, 2, timestamp_type=1, partition_leader_epoch=4)
    _, messages = decode(records)
    assert messages[0].timestamp()[0] == TIMESTAMP_LOG_APPEND_TIME
    assert messages[0].leader_epoch() == 4


def test_control_records_are_never_delivered() -> None:
    records = data(0, 2, pid=5, txn=True) + marker(2, 5, commit=True) + data(3, 1)
    for read_committed in (True, False):
        decoded, messages = decode(records, read_committed=read_committed)
        assert [m.offset() for m in messages] == [0, 1, 3]
        assert decoded.skipped_control == 1


def test_read_committed_hides_an_aborted_transaction_and_keeps_the_committed_one() -> None:
    # producer 5 commits offsets 0-1, producer 6 aborts 2-4, interleaved with non-transactional data.
    records = (data(0, 2, pid=5, txn=True, tag="c") + data(2, 3, pid=6, txn=True, tag="a")
               + data(5, 1, tag="n") + marker(6, 5, commit=True) + marker(7, 6, commit=False) + data(8, 1, tag="n"))
    decoded, messages = decode(records, aborted=[(6, 2)])
    assert values(messages) == [b"c0", b"c1", b"n5", b"n8"]
    assert decoded.skipped_aborted == 3 and decoded.skipped_control == 2


def test_read_uncommitted_delivers_aborted_records_and_ignores_the_aborted_list() -> None:
    records = data(0, 3, pid=6, txn=True, tag="a") + marker(3, 6, commit=False) + data(4, 1, tag="n")
    _, messages = decode(records, aborted=[(6, 0)], read_committed=False)
    assert values(messages) == [b"a0", b"a1", b"a2", b"n4"]


def test_same_producer_aborts_then_commits_only_the_aborted_range_is_hidden() -> None:
    records = (data(0, 2, pid=9, txn=True, tag="x") + marker(2, 9, commit=False)
               + data(3, 2, pid=9, txn=True, tag="y") + marker(5, 9, commit=True)
               + data(6, 1, pid=9, txn=True, tag="z") + marker(7, 9, commit=False))
    _, messages = decode(records, aborted=[(9, 0), (9, 6)])
    assert values(messages) == [b"y3", b"y4"]


def test_aborted_transaction_started_before_the_fetch_offset_stays_hidden() -> None:
    # The broker lists a transaction that began before this fetch (first offset 0) because it overlaps it.
    records = data(4, 3, pid=3, txn=True, tag="a") + marker(7, 3, commit=False) + data(8, 2, tag="n")
    _, messages = decode(records, fetch_offset=4, aborted=[(3, 0)])
    assert values(messages) == [b"n8", b"n9"]


def test_transaction_aborted_after_this_slice_is_hidden_from_its_first_offset() -> None:
    # The abort marker is not in this fetch yet the broker already lists the aborted range (below the LSO).
    records = data(0, 2, pid=4, txn=True, tag="a") + data(2, 1, tag="n")
    _, messages = decode(records, aborted=[(4, 0)])
    assert values(messages) == [b"n2"]


def test_a_corrupt_batch_becomes_an_error_event_in_order_and_decoding_continues() -> None:
    bad = bytearray(data(2, 2))
    bad[-1] ^= 0xFF  # payload byte: the CRC no longer matches
    records = data(0, 2) + bytes(bad) + data(4, 1)
    decoded, messages = decode(records, check_crcs=True)
    assert [(m.offset(), m.error() is not None) for m in messages] == [(0, False), (1, False), (2, True),
                                                                       (4, False)]
    assert messages[2].error() == KafkaError._BAD_MSG
    assert "CRC" in messages[2].error().str()
    assert decoded.errors == 1 and decoded.messages == 3


def test_without_check_crcs_a_payload_flip_is_not_detected_by_crc() -> None:
    bad = bytearray(data(0, 1))
    bad[-2] ^= 0x01  # last byte of the value (the final byte is the header count)
    _, messages = decode(bytes(bad), check_crcs=False)
    assert messages[0].error() is None and messages[0].value() == b"m1"


def test_check_crcs_also_checks_control_batches() -> None:
    bad = bytearray(marker(2, pid=9, commit=True))
    bad[-1] ^= 0xFF  # inside the control record: the batch CRC no longer matches
    records = data(0, 2, pid=9, txn=True) + bytes(bad) + data(3, 1)
    _, checked = decode(records, check_crcs=True)
    assert [(m.offset(), m.error() is not None) for m in checked] == [(0, False), (1, False), (2, True), (3, False)]
    assert "CRC" in checked[2].error().str()
    _, unchecked = decode(records, check_crcs=False)
    assert [m.offset() for m in unchecked] == [0, 1, 3] and all(m.error() is None for m in unchecked)


def test_an_impossible_entry_ends_the_slice_with_an_error() -> None:
    garbage = struct.pack(">qi", 5, 3) + b"\x02" * 20  # entry length 3 cannot hold a batch
    _, messages = decode(data(0, 2) + garbage)
    assert [m.offset() for m in messages[:2]] == [0, 1]
    assert messages[2].error() == KafkaError._BAD_MSG and messages[2].offset() == 5


def test_eof_event_follows_the_messages() -> None:
    _, messages = decode(data(0, 2), eof_offset=2)
    assert [m.offset() for m in messages] == [0, 1, 2]
    assert messages[-1].error() == KafkaError._PARTITION_EOF


def test_empty_slice_with_eof_only() -> None:
    decoded, messages = decode(b"", fetch_offset=9, eof_offset=9)
    assert decoded.messages == 0 and not decoded.is_empty
    assert len(messages) == 1 and messages[0].offset() == 9


def test_nothing_visible_still_moves_the_position_past_the_hidden_records() -> None:
    decoded, messages = decode(data(0, 2, pid=1, txn=True) + marker(2, 1, commit=False), aborted=[(1, 0)])
    assert messages == [] and decoded.messages == 0 and not decoded.is_empty
    assert skipped_after_take(decoded) == (2, -1)


def test_empty_record_set_gives_an_empty_batch() -> None:
    decoded, messages = decode(b"", fetch_offset=4)
    assert decoded.is_empty and messages == [] and skipped_after_take(decoded) is None


def skipped_after_take(decoded, max_count=None):
    batch = MessageBatch("t", 3, decoded.frame, decoded.version)
    batch.take(max_count)
    return batch.skipped


def test_a_trailing_control_record_leaves_a_skip_entry_after_the_messages() -> None:
    records = data(0, 2, pid=5, txn=True, partition_leader_epoch=3) + marker(2, 5, commit=True, epoch=3)
    for read_committed in (True, False):
        decoded, messages = decode(records, read_committed=read_committed, eof_offset=3)
        assert [m.offset() for m in messages] == [0, 1, 3]  # the messages, then the EOF; no Message for 2
        assert decoded.messages == 2 and decoded.entries == 4
        assert skipped_after_take(decoded) == (2, 3)


def test_a_control_record_followed_by_a_message_needs_no_skip_entry() -> None:
    decoded, _ = decode(data(0, 1, pid=5, txn=True) + marker(1, 5, commit=True) + data(2, 1))
    assert decoded.entries == 2 and skipped_after_take(decoded) is None


def test_a_lone_marker_slice_moves_the_position() -> None:
    # The mock cluster answers one batch per Fetch: a commit marker often arrives on its own.
    decoded, messages = decode(marker(7, 5, commit=True), fetch_offset=7)
    assert messages == [] and not decoded.is_empty and skipped_after_take(decoded) == (7, -1)


def test_hidden_aborted_tail_skips_to_its_last_record() -> None:
    # Aborted data whose ABORT marker is in a later fetch: the position may already move past it.
    records = data(0, 1) + data(1, 3, pid=4, txn=True, tag="a")
    decoded, messages = decode(records, aborted=[(4, 1)])
    assert values(messages) == [b"m0"] and skipped_after_take(decoded) == (3, -1)
    decoded, messages = decode(records, aborted=[(4, 1)], read_committed=False)
    assert len(values(messages)) == 4 and skipped_after_take(decoded) is None


def test_a_marker_before_the_fetch_offset_is_not_a_skip() -> None:
    decoded, messages = decode(data(0, 2, pid=5, txn=True) + marker(2, 5, commit=True), fetch_offset=3)
    assert decoded.is_empty and messages == []


def test_the_skip_entry_comes_before_a_later_corrupt_batch_error() -> None:
    bad = bytearray(data(3, 2))
    bad[-1] ^= 0xFF
    decoded, messages = decode(data(0, 2, pid=5, txn=True) + marker(2, 5, commit=True) + bytes(bad),
                               check_crcs=True)
    assert [m.offset() for m in messages] == [0, 1, 3] and messages[2].error() == KafkaError._BAD_MSG
    assert skipped_after_take(decoded, 3) == (2, -1)  # taken with the messages, before the error


def test_slice_payload_round_trips() -> None:
    sl = FetchedSlice("t", 1, 4, 10, 20, b"xyz", high_watermark=30, last_stable_offset=25, log_start_offset=2,
                      aborted=[(7, 11)], eof_offset=-1)
    again = FetchedSlice.from_payload(sl.payload(), sl.records)
    assert again.payload() == sl.payload() and again.records == b"xyz"
    assert again.aborted == [(7, 11)]


@pytest.mark.parametrize("codec", [0, LZ4, ZSTD])
def test_headers_and_null_key_value(codec: int) -> None:
    batch = bytes(build_batch([(TS, None, None, [("h", b"1"), ("n", None)]), (TS, b"", b"", None)], codec=codec))
    _, messages = decode(batch)
    assert messages[0].key() is None and messages[0].value() is None
    assert messages[0].headers() == [("h", b"1"), ("n", None)]
    assert messages[1].key() == b"" and messages[1].value() == b"" and messages[1].headers() is None


def _corrupt_middle() -> bytes:
    bad = bytearray(data(2, 2))
    bad[-1] ^= 0xFF
    return data(0, 2) + bytes(bad) + data(4, 1)


_CHUNKING_CASES = {
    "plain": (data(0, 3) + data(3, 2, codec=ZSTD) + data(5, 4, codec=LZ4), {}),
    "fetch offset inside": (data(10, 6, codec=LZ4) + data(16, 2), {"fetch_offset": 13}),
    "aborted and markers": (data(0, 2, pid=5, txn=True, tag="c") + data(2, 3, pid=6, txn=True, tag="a")
                            + data(5, 1, tag="n") + marker(6, 5, commit=True) + marker(7, 6, commit=False)
                            + data(8, 1, tag="n"), {"aborted": [(6, 2)]}),
    "trailing marker and eof": (data(0, 2, pid=5, txn=True) + marker(2, 5, commit=True), {"eof_offset": 3}),
    "corrupt batch": (_corrupt_middle(), {"check_crcs": True}),
}


def _decode_all(records: bytes, chunk_bytes: int, fetch_offset: int = 0, aborted=(), check_crcs=False,
                eof_offset=-1):
    """Every chunk of a slice, taken as the app would: (messages as tuples, final position, counts, chunks)."""
    settings = FetchSettings(check_crcs=check_crcs)
    sl = FetchedSlice("t", 3, 7, fetch_offset, fetch_offset, records, aborted=aborted, eof_offset=eof_offset)
    taken, position, chunks = [], -1, 0
    totals = {"messages": 0, "aborted": 0, "control": 0, "errors": 0}
    for decoded in SliceDecoder(settings).decode_chunks(sl, chunk_bytes):
        chunks += 1
        totals["messages"] += decoded.messages
        totals["aborted"] += decoded.skipped_aborted
        totals["control"] += decoded.skipped_control
        totals["errors"] += decoded.errors
        batch = MessageBatch("t", 3, decoded.frame, decoded.version)
        messages, _count, _nbytes = batch.take()
        for m in messages:
            taken.append((m.offset(), m.value(), m.error().code() if m.error() else None))
            if m.error() is None:
                position = max(position, m.offset())
        if batch.skipped is not None:
            position = max(position, batch.skipped[0])
    return taken, position, totals, chunks


@pytest.mark.parametrize("case", sorted(_CHUNKING_CASES))
def test_decoding_in_chunks_delivers_exactly_what_one_piece_does(case: str) -> None:
    """The ctoppar sends a large slice in frames of about DECODE_STEP_BYTES; one byte per chunk makes
    every batch its own frame, the hardest split for skips, aborted ranges, errors and the EOF."""
    records, options = _CHUNKING_CASES[case]
    whole = _decode_all(records, 0, **options)
    split = _decode_all(records, 1, **options)
    assert whole[3] == 1
    assert split[3] > 1
    assert split[:3] == whole[:3]


def test_chunks_hold_about_chunk_bytes_and_only_the_last_has_the_eof() -> None:
    records = b"".join(data(base, 10, codec=ZSTD) for base in range(0, 200, 10))
    sl = FetchedSlice("t", 3, 7, 0, 200, records, eof_offset=200)
    chunks = list(SliceDecoder(FetchSettings()).decode_chunks(sl, 300))
    assert len(chunks) > 3
    assert sum(c.messages for c in chunks) == 200
    frames = [MessageBatch("t", 3, c.frame, c.version).take()[0] for c in chunks]
    eofs = [i for i, messages in enumerate(frames) for m in messages if m.error() is not None]
    assert eofs == [len(chunks) - 1]
    # A chunk closes at the first batch boundary past the limit: never more than one batch over it.
    one_batch = len(SliceDecoder(FetchSettings()).decode(FetchedSlice("t", 3, 7, 0, 10, data(0, 10))).frame)
    assert all(c.nbytes < 300 + one_batch for c in chunks)


@pytest.mark.parametrize("check_crcs", [False, True])
def test_a_slice_given_as_a_view_decodes_as_its_bytes_do(check_crcs: bool) -> None:
    """A broker actor hands over views of its Fetch answer (the decoder reads them in place, copying only for
    control markers): a view of a buffer decodes exactly as the same bytes, markers and aborted data included."""
    records = (data(0, 3) + data(3, 2, codec=ZSTD) + data(5, 2, pid=9, txn=True) + marker(7, 9, commit=False)
               + data(8, 2, codec=LZ4) + data(10, 1, pid=9, txn=True) + marker(11, 9, commit=True))
    as_bytes, from_bytes = decode(records, 1, aborted=[(9, 5)], check_crcs=check_crcs)
    backing = bytearray(b"\xff" * 5 + records + b"\xff" * 3)
    as_view, from_view = decode(memoryview(backing)[5:5 + len(records)], 1, aborted=[(9, 5)],
                                check_crcs=check_crcs)
    assert bytes(as_view.frame) == bytes(as_bytes.frame)
    assert values(from_view) == values(from_bytes) == [b"m1", b"m2", b"m3", b"m4", b"m8", b"m9", b"m10"]
