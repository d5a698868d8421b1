"""kqactors.ingest: the ingestion daemon behind ``kqactors ingest``.

Runs in: the daemon's supervisor process and its worker processes. Lines from files (tailed, with rotation and
copytruncate followed), stdin, TCP/UDP line listeners and an HTTP POST endpoint become one Kafka message each,
produced with the public ``kqactors.Producer`` API only; a file's position is checkpointed after the delivery
reports of every line before it (at-least-once across SIGKILL).

Modules:
- ``config``: the TOML file and the command line → an ``IngestConfig`` of ``SourceSpec``s, grouped per worker.
- ``transform``: per-source line transforms, the key taken from a JSON field, static headers, rate limits.
- ``checkpoint``: delivery tracking in read order (``Chunk``, ``StreamTracker``) and the state files.
- ``tail``: one file path followed across appends, rename rotation and copytruncate.
- ``filesource``: a file source's paths and globs, read in turn on the worker's loop.
- ``emit``: lines → ``Producer.produce`` with backpressure, delivery-error retries and counters.
- ``netsources``: the stdin, TCP, UDP and HTTP sources (asyncio).
- ``worker``: one worker process (its own Producer, its source group, checkpoints, metric reports).
- ``supervisor``: the daemon (workers, signals, reload, Prometheus, progress line).
- ``metrics``, ``logs``: metric snapshots and their Prometheus collector; JSON logs.
"""

from kqactors.ingest.config import ConfigError, IngestConfig, SourceSpec, load_config

__all__ = ["ConfigError", "IngestConfig", "SourceSpec", "load_config"]
