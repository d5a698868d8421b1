"""Pure producer logic shared by the app facade and toppar actors (no processes, no sockets).

Runs in: the app process (packing, settings) and toppar hosts (partition core). Owns message packing,
batching, retry/backoff and timeout bookkeeping, idempotent sequences/epochs and Produce error
classification; ``kqactors.actors.toppar`` and ``kqactors.producer`` wire it to the runtime.
"""

from kqactors.producer_core.batch import Batch, Chunk
from kqactors.producer_core.classify import ProduceErrorAction, classify_produce_error
from kqactors.producer_core.idempotence import IdempotenceState
from kqactors.producer_core.packing import MessagePacker, pack_messages, unpack_messages
from kqactors.producer_core.partition import DrRow, Effects, PartitionProducer
from kqactors.producer_core.settings import ProducerSettings, retry_backoff_ms

__all__ = [
    "Batch",
    "Chunk",
    "ProduceErrorAction",
    "classify_produce_error",
    "IdempotenceState",
    "MessagePacker",
    "pack_messages",
    "unpack_messages",
    "DrRow",
    "Effects",
    "PartitionProducer",
    "ProducerSettings",
    "retry_backoff_ms",
]
