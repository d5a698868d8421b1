"""Driver-side offset look-ups: which partitions a query reads and where each starts and ends.

Runs in: Spark's driver side, in the Python processes the JVM starts to plan a read (a batch read's
``partitions()``) and in the long-lived runner of a streaming source. Owns one kqactors AdminClient per
planner (Metadata for the partitions, ListOffsets for earliest / latest / by-timestamp offsets, at the
isolation level the task consumers read with) and the resolution of the ``startingOffsets`` /
``endingOffsets`` family of options into numbers, with the data-loss checks Spark's Kafka connector makes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kqactors.spark.options import EARLIEST, LATEST, KafkaOptionError, OffsetBound, SourceOptions
from kqactors.spark.ranges import DataLossError, data_loss_hint

__all__ = ["OffsetLookup", "PlanningError"]

TopicPartitionKey = tuple[str, int]

_log = logging.getLogger("kqactors.spark")
_TIMEOUT_S = 30.0


class PlanningError(RuntimeError):
    """The cluster could not answer what the plan needs (metadata or offsets)."""


def _names(tps: Iterable[TopicPartitionKey]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in sorted(tps))


class OffsetLookup:
    """Partitions and offsets for one query's options. ``admin`` may be given (tests); otherwise a kqactors
    AdminClient is started on first use with the query's ``kafka.*`` options. ``warn`` receives the
    data-loss notices that ``failOnDataLoss=false`` turns from errors into warnings."""

    def __init__(self, options: SourceOptions, admin: Any = None, warn: Callable[[str], None] | None = None):
        self.options = options
        self._admin = admin
        self._own_admin = admin is None
        self._warn = warn or _log.warning
        self._warned: set[str] = set()

    def warn(self, message: str) -> None:
        """Each notice once: a stream asks for its partitions at every trigger."""
        if message not in self._warned:
            self._warned.add(message)
            self._warn(message)

    # ---- the client ---------------------------------------------------------------------------------------
    def _admin_key(self) -> Any:
        from kqactors.spark.pool import config_key

        return config_key("admin", self._admin_conf())

    def _admin_conf(self) -> dict[str, str]:
        return {k: v for k, v in self.options.client.items() if k not in ("group.id", "isolation.level")}

    @property
    def admin(self) -> Any:
        if self._admin is None:
            from kqactors.admin import AdminClient
            from kqactors.spark.pool import ADMINS

            admin = ADMINS.take(self._admin_key())  # (an AdminClient with no pending request is falsy: len 0)
            self._admin = admin if admin is not None else AdminClient(self._admin_conf())
        return self._admin

    def close(self, keep: bool = True) -> None:
        """Done with the client: back to the process's pool (Spark reuses its planner workers, and an
        AdminClient takes a few hundred milliseconds to start and to stop), or closed when ``keep`` is false."""
        admin, self._admin = self._admin, None
        if admin is None or not self._own_admin:
            return
        if keep:
            from kqactors.spark.pool import ADMINS

            ADMINS.give(self._admin_key(), admin)
        else:
            admin.__exit__(None, None, None)  # confluent-kafka's AdminClient has no close(); kqactors' context exit


    # ---- partitions ---------------------------------------------------------------------------------------
    def partitions(self) -> list[TopicPartitionKey]:
        """The partitions the subscription reads now. An unknown topic or partition named by ``subscribe`` or
        ``assign`` is an error while ``failOnDataLoss`` is true (a warning, and skipped, when false)."""
        sub = self.options.subscription
        try:
            cluster = self.admin.list_topics(timeout=_TIMEOUT_S)
        except Exception as exc:
            raise PlanningError(f"Could not fetch metadata from {self.options.client.get('bootstrap.servers')}: "
                                f"{exc}") from exc
        counts = {name: len(meta.partitions) for name, meta in cluster.topics.items()
                  if meta.error is None or meta.partitions}
        wanted: list[TopicPartitionKey] = []
        missing: list[str] = []
        if sub.kind == "subscribe":
            for topic in sub.topics:
                if counts.get(topic):
                    wanted.extend((topic, p) for p in range(counts[topic]))
                else:
                    missing.append(f"topic '{topic}'")
        elif sub.kind == "subscribePattern":
            for topic in sorted(counts):
                if sub.matches(topic):
                    wanted.extend((topic, p) for p in range(counts[topic]))
        else:
            for topic, part in sub.partitions:
                if part < counts.get(topic, 0):
                    wanted.append((topic, part))
                elif topic not in counts:
                    missing.append(f"topic '{topic}'")
                else:
                    missing.append(f"partition {topic}-{part} (the topic has {counts[topic]})")
        if missing:
            message = (f"Option '{sub.kind}' names {', '.join(dict.fromkeys(missing))}, which does not exist on "
                       f"the cluster.")
            if self.options.fail_on_data_loss:
                raise KafkaOptionError(message + " Create it first, or set the source option 'failOnDataLoss' "
                                                 "to 'false' to read what exists.")
            self.warn(message + " Skipped because 'failOnDataLoss' is false.")
        return sorted(wanted)

    # ---- offsets ------------------------------------------------------------------------------------------
    def _list_offsets(self, specs: Mapping[TopicPartitionKey, Any]) -> dict[TopicPartitionKey, int]:
        if not specs:
            return {}
        from kqactors import IsolationLevel, TopicPartition

        level = IsolationLevel.READ_COMMITTED if self.options.read_committed else IsolationLevel.READ_UNCOMMITTED
        request = {TopicPartition(t, p): spec for (t, p), spec in specs.items()}
        try:
            futures = self.admin.list_offsets(request, isolation_level=level, request_timeout=_TIMEOUT_S)
            return {(tp.topic, tp.partition): future.result().offset for tp, future in futures.items()}
        except Exception as exc:
            raise PlanningError(f"Could not list offsets of {_names(specs)}: {exc}") from exc

    def earliest(self, tps: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        from kqactors.admin import OffsetSpec

        return self._list_offsets({tp: OffsetSpec.earliest() for tp in tps})

    def latest(self, tps: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        from kqactors.admin import OffsetSpec

        return self._list_offsets({tp: OffsetSpec.latest() for tp in tps})

    def for_times(self, stamps: Mapping[TopicPartitionKey, int]) -> dict[TopicPartitionKey, int]:
        """Per partition, the first offset whose timestamp is >= the given one (ms); -1 when there is none."""
        from kqactors.admin import OffsetSpec

        return self._list_offsets({tp: OffsetSpec.for_timestamp(ts) for tp, ts in stamps.items()})

    def resolve(self, bound: OffsetBound, tps: list[TopicPartitionKey], starting: bool,
                earliest: Mapping[TopicPartitionKey, int] | None = None,
                latest: Mapping[TopicPartitionKey, int] | None = None) -> dict[TopicPartitionKey, int]:
        """``bound`` as offsets for ``tps``. Specific starting offsets outside [earliest, latest] are data loss
        (an error, or moved to the nearest valid offset when ``failOnDataLoss`` is false); a timestamp no record
        reaches gives latest for an end, and for a start what ``startingOffsetsByTimestampStrategy`` says."""
        if bound.kind == "earliest":
            return dict(earliest) if earliest is not None else self.earliest(tps)
        if bound.kind == "latest":
            return dict(latest) if latest is not None else self.latest(tps)
        if bound.kind in ("offsets", "timestamps"):
            given, expected = set(bound.offsets), set(tps)
            if given != expected:
                parts = []
                if expected - given:
                    parts.append(f"missing {_names(expected - given)}")
                if given - expected:
                    parts.append(f"not read by the query: {_names(given - expected)}")
                raise KafkaOptionError(f"Option '{bound.option}' must give every partition the query reads "
                                       f"({'; '.join(parts)})")
        earliest = dict(earliest) if earliest is not None else self.earliest(tps)
        latest = dict(latest) if latest is not None else self.latest(tps)
        if bound.kind == "offsets":
            out = {}
            for tp in tps:
                value = bound.offsets[tp]
                if value == EARLIEST:
                    out[tp] = earliest[tp]
                elif value == LATEST:
                    out[tp] = latest[tp]
                elif starting:
                    out[tp] = self._check_specific(bound.option, tp, value, earliest[tp], latest[tp])
                else:
                    # An end past the latest offset is taken as given (as Spark does): the tasks wait for the
                    # records, and report data loss if the partition's log ends below it.
                    out[tp] = value
            return out
        stamps = bound.offsets if bound.kind == "timestamps" else {tp: bound.timestamp for tp in tps}
        found = self.for_times(stamps)
        out = {}
        for tp in tps:
            offset = found.get(tp, -1)
            if offset is None or offset < 0:
                if starting and self.options.starting_timestamp_strategy == "error":
                    raise KafkaOptionError(
                        f"Option '{bound.option}': no offset of {tp[0]}-{tp[1]} has a timestamp at or after "
                        f"{stamps[tp]}. Set 'startingOffsetsByTimestampStrategy' to 'latest' to start such "
                        f"partitions at their latest offset.")
                offset = latest[tp]
            out[tp] = offset
        return out

    def _check_specific(self, option: str, tp: TopicPartitionKey, value: int, first: int, last: int) -> int:
        if first <= value <= last:
            return value
        where = (f"before the earliest available offset {first}" if value < first
                 else f"after the latest offset {last}")
        message = f"Option '{option}' gives offset {value} for {tp[0]}-{tp[1]}, {where}."
        if self.options.fail_on_data_loss:
            raise DataLossError(message + data_loss_hint(True))
        self.warn(message + data_loss_hint(False))
        return first if value < first else last
