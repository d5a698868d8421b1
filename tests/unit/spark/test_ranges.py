"""kqactors.spark.ranges: splitting offset ranges, rate limiting, micro-batch data-loss checks."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kqactors.spark.ranges import DataLossError, OffsetRange, rate_limit, split_ranges, stream_ranges


def test_one_task_per_partition_and_empty_ranges_dropped() -> None:
    ranges = [OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 5, 5), OffsetRange("t", 2, 3, 4)]
    assert split_ranges(ranges) == [ranges[0], ranges[2]]
    assert split_ranges(ranges, min_partitions=2) == [ranges[0], ranges[2]]


def test_min_partitions_splits_in_proportion_to_size() -> None:
    ranges = [OffsetRange("t", 0, 0, 300), OffsetRange("t", 1, 100, 200)]
    out = split_ranges(ranges, min_partitions=4)
    assert [(r.partition, r.start, r.end) for r in out] == [(0, 0, 100), (0, 100, 200), (0, 200, 300),
                                                            (1, 100, 200)]


def test_max_records_per_partition() -> None:
    out = split_ranges([OffsetRange("t", 0, 0, 10)], max_records_per_partition=4)
    assert [(r.start, r.end) for r in out] == [(0, 3), (3, 6), (6, 10)]


@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 5000)), min_size=1, max_size=6),
       st.integers(1, 40), st.one_of(st.none(), st.integers(1, 2000)))
def test_splits_cover_each_range_exactly(spans, min_partitions, max_records) -> None:
    ranges = [OffsetRange("t", i, start, start + size) for i, (start, size) in enumerate(spans)]
    out = split_ranges(ranges, min_partitions, max_records)
    for r in ranges:
        pieces = [p for p in out if p.partition == r.partition]
        if r.size == 0:
            assert not pieces
            continue
        assert pieces[0].start == r.start and pieces[-1].end == r.end
        assert all(a.end == b.start for a, b in zip(pieces, pieces[1:], strict=False))
        assert all(p.size > 0 for p in pieces)
        if max_records is not None and len([x for x in ranges if x.size]) >= min_partitions:
            assert all(p.size <= max_records for p in pieces)


def test_rate_limit_prorates_and_never_starves() -> None:
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 50}
    latest = {("t", 0): 1000, ("t", 1): 10, ("t", 2): 50}
    out = rate_limit(100, start, latest)
    assert out[("t", 0)] == 99 and out[("t", 1)] == 1 and out[("t", 2)] == 50
    assert rate_limit(5000, start, latest) == latest
    assert rate_limit(10, {("t", 0): 5}, {("t", 0): 5}) == {("t", 0): 5}


def test_stream_ranges_new_gone_and_reset_partitions() -> None:
    warnings: list[str] = []
    start = {("t", 0): 5, ("t", 1): 7}
    end = {("t", 0): 9, ("t", 2): 4}
    with pytest.raises(DataLossError, match=r"t-1.*gone"):
        stream_ranges(start, end, lambda tps: {tp: 0 for tp in tps}, True, warnings.append)
    ranges = stream_ranges(start, end, lambda tps: {tp: 1 for tp in tps}, False, warnings.append)
    assert ranges == [OffsetRange("t", 0, 5, 9), OffsetRange("t", 2, 1, 4)]
    assert any("t-1" in w and "failOnDataLoss" in w for w in warnings)
    with pytest.raises(DataLossError, match=r"t-0's offset went back from 5 to 3.*failOnDataLoss"):
        stream_ranges(start, {("t", 0): 3, ("t", 1): 7}, dict, True, warnings.append)
    assert stream_ranges(start, {("t", 0): 3, ("t", 1): 7}, dict, False, warnings.append) == [
        OffsetRange("t", 1, 7, 7)]
