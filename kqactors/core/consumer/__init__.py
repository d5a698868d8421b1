"""Pure consumer fetch-pipeline logic (no processes, no sockets), wired to ops by the consumer actors.

Runs in: broker actors (``FetchPlanner``: Fetch request building and response interpretation), toppar hosts
(``SliceDecoder``: decode, aborted-transaction filtering, packing; ``PrefetchCredit``; ``VersionGate``) and
the app process (``MessageBatch``: lazy unpacking; ``CreditReturner``; ``PositionTable``).

Flow: app PositionTable (versions) → toppar VersionGate → broker FetchPlanner.start/seek; the planner's
FetchedSlice (payload + raw records frame) → toppar SliceDecoder → DecodedBatch frame (counted by
PrefetchCredit, which opens/closes the planner's flow) → app MessageBatch.take() → CreditReturner → toppar.
"""

from kqactors.core.consumer.classify import FetchErrorAction, classify_fetch_error
from kqactors.core.consumer.decoder import DecodedBatch, FetchedSlice, SliceDecoder, decode_records_into
from kqactors.core.consumer.packing import MessageBatch, MessageBatchWriter
from kqactors.core.consumer.planner import (
    FetchOutcome,
    FetchPlan,
    FetchPlanner,
    FetchTarget,
    OffsetReset,
    PartitionError,
)
from kqactors.core.consumer.position import PartitionPosition, PositionTable, VersionGate
from kqactors.core.consumer.prefetch import CreditReturner, PrefetchCredit, partition_limits
from kqactors.core.consumer.settings import FetchSettings

__all__ = [
    "FetchErrorAction", "classify_fetch_error",
    "DecodedBatch", "FetchedSlice", "SliceDecoder", "decode_records_into",
    "MessageBatch", "MessageBatchWriter",
    "FetchOutcome", "FetchPlan", "FetchPlanner", "FetchTarget", "OffsetReset", "PartitionError",
    "PartitionPosition", "PositionTable", "VersionGate",
    "CreditReturner", "PrefetchCredit", "partition_limits",
    "FetchSettings",
]  # fmt: skip
