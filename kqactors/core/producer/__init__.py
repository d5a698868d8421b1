"""Pure producer logic shared by the app facade and toppar actors (no processes, no sockets).

Runs in: the app process (packing, settings) and toppar hosts (partition core). Owns message packing,
batching, retry/backoff and timeout bookkeeping, idempotent sequences/epochs and Produce error
classification; ``kqactors.actors.toppar`` and ``kqactors.client.producer.producer`` wire it to the runtime.
"""

from kqactors.core.producer.batch import Batch, Chunk
from kqactors.core.producer.classify import ProduceErrorAction, classify_produce_error
from kqactors.core.producer.idempotence import IdempotenceState
from kqactors.core.producer.packing import MessagePacker, pack_messages, unpack_messages
from kqactors.core.producer.partition import DrRow, Effects, PartitionProducer
from kqactors.core.producer.settings import ProducerSettings, retry_backoff_ms

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
