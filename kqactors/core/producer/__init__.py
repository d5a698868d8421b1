"""Pure producer logic shared by the app facade and toppar actors (no processes, no sockets).

Runs in: the app process (packing, settings) and toppar hosts (partition core). Owns message packing,
batching, retry/backoff and timeout bookkeeping, idempotent sequences/epochs and Produce error
classification; ``kqactors.actors.toppar`` and ``kqactors.client.producer.producer`` wire it to the runtime.
"""
