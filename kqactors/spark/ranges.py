"""Offset ranges: the unit of work of a Spark task, and the arithmetic that makes them.

Runs in: Spark's planner workers and the streaming source's runner (driver side); pure, no clients. Owns how a
query's per-partition [start, end) offsets become Spark partitions (split for ``minPartitions`` and
``maxRecordsPerPartition`` as Spark's Kafka connector splits them), how ``maxOffsetsPerTrigger`` spreads a
micro-batch's budget over the partitions with a backlog, and the data-loss checks between two micro-batches'
offsets.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["OffsetRange", "split_ranges", "rate_limit", "stream_ranges", "DataLossError"]

TopicPartitionKey = tuple[str, int]


class DataLossError(RuntimeError):
    """Offsets the query should read are gone (deleted, truncated, or the partition or topic was removed)
    while ``failOnDataLoss`` is true. The message names the partition and the offsets."""


def data_loss_hint(fail_on_data_loss: bool) -> str:
    if fail_on_data_loss:
        return (" Some data may have been lost: it is no longer available in Kafka (aged out by retention, "
                "truncated, or the topic was deleted) or the offsets are not valid. If the query should go on "
                "in such cases, set the source option 'failOnDataLoss' to 'false'.")
    return " Some data may have been lost; going on because 'failOnDataLoss' is false."


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Offsets [start, end) of one Kafka partition, read by one Spark task."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition} [{self.start}, {self.end})"


def _divide(r: OffsetRange, parts: int) -> list[OffsetRange]:
    parts = max(1, min(parts, r.size))
    return [OffsetRange(r.topic, r.partition, r.start + r.size * i // parts, r.start + r.size * (i + 1) // parts)
            for i in range(parts)]


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None = None,
                 max_records_per_partition: int | None = None) -> list[OffsetRange]:
    """Empty ranges dropped; ranges over ``max_records_per_partition`` cut into equal pieces under it; then,
    when fewer than ``min_partitions`` remain, each range cut into a share of ``min_partitions`` proportional
    to its size (at least one), as Spark's KafkaOffsetRangeCalculator does."""
    out = [r for r in ranges if r.size > 0]
    if max_records_per_partition is not None:
        out = [piece for r in out for piece in _divide(r, -(-r.size // max_records_per_partition))]
    if min_partitions is not None and len(out) < min_partitions:
        total = sum(r.size for r in out)
        out = [piece for r in out
               for piece in _divide(r, max(int(r.size / total * min_partitions + 0.5), 1))]
    return out


def rate_limit(limit: int, start: Mapping[TopicPartitionKey, int],
               latest: Mapping[TopicPartitionKey, int]) -> dict[TopicPartitionKey, int]:
    """End offsets that read about ``limit`` records past ``start``: each partition with a backlog gets a share
    proportional to it (rounded down, but at least one record so no partition starves, as Spark's Kafka source
    does); partitions missing from ``start`` count from the offset given for them in ``start``'s caller (they
    must be present), and ``latest`` caps every end."""
    sizes = {tp: end - start[tp] for tp, end in latest.items() if tp in start and end - start[tp] > 0}
    total = sum(sizes.values())
    if total < 1:
        return dict(latest)
    out = dict(latest)
    for tp, size in sizes.items():
        share = limit * size / total
        step = int(-(-share // 1)) if share < 1 else int(share)
        out[tp] = min(latest[tp], start[tp] + step)
    return out


def stream_ranges(start: Mapping[TopicPartitionKey, int], end: Mapping[TopicPartitionKey, int],
                  earliest_of: Callable[[list[TopicPartitionKey]], Mapping[TopicPartitionKey, int]],
                  fail_on_data_loss: bool, warn: Callable[[str], None]) -> list[OffsetRange]:
    """A micro-batch's ranges from its start and end offsets (Spark's checks between two offsets): a
    partition new in ``end`` starts at its earliest offset, a partition gone from ``end`` and an end below its
    start are data loss. Raises DataLossError when ``fail_on_data_loss``; otherwise ``warn`` and skip."""

    def lost(message: str) -> None:
        if fail_on_data_loss:
            raise DataLossError(message + data_loss_hint(True))
        warn(message + data_loss_hint(False))

    new = sorted(tp for tp in end if tp not in start)
    first = dict(earliest_of(new)) if new else {}
    missing = [tp for tp in new if tp not in first]
    if missing:
        lost(f"Cannot find the earliest offsets of new partitions {_names(missing)}.")
    gone = sorted(tp for tp in start if tp not in end)
    if gone:
        lost(f"Partitions {_names(gone)} are gone.")
    ranges = []
    for tp in sorted(end):
        begin = start.get(tp, first.get(tp))
        if begin is None:
            continue
        if end[tp] < begin:
            lost(f"Partition {tp[0]}-{tp[1]}'s offset went back from {begin} to {end[tp]}.")
            continue
        ranges.append(OffsetRange(tp[0], tp[1], begin, end[tp]))
    return ranges


def _names(tps: list[TopicPartitionKey]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in tps)
