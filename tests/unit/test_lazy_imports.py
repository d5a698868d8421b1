"""Runs in: pytest, which starts fresh interpreters. A plaintext, non-transactional producer's main host loads no
TLS/SASL machinery, no consumer fetch planner, no transaction manager and no codec library it does not use:
each is imported at its first use (start-up time of every client, benchmarks/bench_startup.py). The other
side is checked too: the configuration or the codec that needs a module does load it, so the lists below
cannot go stale unnoticed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import kqactors
from kqactors.runtime.host_launch import host_interpreter

pytestmark = pytest.mark.timeout(120)

# what a plain producer's main host runs: the host process, the main actor, a broker actor, the toppar
# (adaptive placement starts it on the main host) and the log forwarder, each made as the host makes it
_PLAIN_PRODUCER_HOST = textwrap.dedent("""
    import json, sys
    import kqactors.runtime.host_process
    import kqactors.actors.broker.actor
    import kqactors.actors.log
    from kqactors.actors.broker.security import BrokerSecurity
    from kqactors.actors.main import MainActor, broker_connection_config
    from kqactors.actors.toppar import TopparActor
    from kqactors.records.batch_v2 import RecordBatchBuilder
    from kqactors.records.compression import codec_id

    config = json.loads(sys.argv[1])
    security = BrokerSecurity(broker_connection_config(config))
    security.transport((2, 1, 0, ("127.0.0.1", 9)), "localhost", True).close()
    assert kqactors.actors.broker.transport.numeric_address("127.0.0.1", 9092)  # a broker's IP literal
    builder = RecordBatchBuilder(codec=codec_id(config.get("compression.codec", "none")))
    builder.append(1, b"key", b"value")
    builder.build()
    print(json.dumps(sorted(sys.modules)))
""")

_SECURITY = ["ssl", "kqactors.core.tls", "kqactors.core.sasl", "kqactors.core.sasl.steps",
             "kqactors.core.sasl.mechanisms", "kqactors.core.sasl.oauthbearer", "kqactors.actors.broker.tls_transport"]
_CONSUMER = ["kqactors.actors.broker.source", "kqactors.core.consumer.planner", "kqactors.core.consumer.settings",
             "kqactors.records.record_set", "kqactors.records.reader_v2"]
_TRANSACTIONS = ["kqactors.core.producer.txn"]
# the protocol tables of kinds a plain producer never sends (each is imported by its kind's encode/decode)
_PROTOCOL = ["kqactors.protocol.generated.fetch", "kqactors.protocol.generated.list_offsets",
             "kqactors.protocol.generated.txn_offset_commit", "kqactors.protocol.generated.add_partitions_to_txn",
             "kqactors.protocol.generated.end_txn", "kqactors.protocol.generated.sasl_authenticate",
             "kqactors.protocol.generated.sasl_handshake"]
_CODECS = ["cramjam", "lz4", "lz4.frame", "zstandard"]
_HEAVY = ["crc32c", "importlib.metadata", "email", "kqactors.config.properties", "kqactors.config.config",
          "encodings.idna", "argparse", "gettext",
          # the package's app-side names (kqactors/__init__.py loads each at first use)
          "kqactors.partitioner", "kqactors._model", "kqactors.serialization", "kqactors.error"]
# the app's run-dir helpers (transport_zmq imports them where used); checked only where a host starts without
# site, whose .pth hooks may load them
_APP_SIDE = ["shutil", "tempfile", "bz2", "lzma"]


def _host_modules(config: dict) -> tuple[set[str], bool]:
    # started as the supervisor starts a host (host_launch.py: without site where it can)
    options, env = host_interpreter(os.path.dirname(os.path.dirname(os.path.abspath(kqactors.__file__))),
                                    os.environ)
    done = subprocess.run([sys.executable, *options, "-c", _PLAIN_PRODUCER_HOST, json.dumps(config)],
                          capture_output=True, text=True, timeout=90, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return set(json.loads(done.stdout.strip().splitlines()[-1])), options == ["-S"]


def test_a_plaintext_producers_main_host_loads_only_what_it_uses() -> None:
    modules, without_site = _host_modules({"bootstrap.servers": "localhost:9092", "security.protocol": "plaintext"})
    assert "kqactors.records.batch_v2" in modules and "kqactors.core.connection" in modules  # the probe ran
    loaded = [name for name in _SECURITY + _CONSUMER + _TRANSACTIONS + _PROTOCOL + _CODECS + _HEAVY
              + (_APP_SIDE if without_site else []) if name in modules]
    assert not loaded, f"loaded at start-up though a plain producer does not use them: {loaded}"


def test_the_configuration_that_needs_them_loads_them() -> None:
    modules, _ = _host_modules({"bootstrap.servers": "localhost:9092", "security.protocol": "sasl_ssl",
                             "sasl.mechanisms": "PLAIN", "sasl.username": "u", "sasl.password": "p",
                             "compression.codec": "zstd"})
    wanted = ["ssl", "kqactors.core.tls", "kqactors.core.sasl.steps", "kqactors.actors.broker.tls_transport",
              "zstandard"]  # (OAUTHBEARER's token type only with that mechanism)
    missing = [name for name in wanted if name not in modules]
    assert not missing, f"not loaded though configured: {missing}"
    assert "cramjam" not in modules and "lz4" not in modules  # only the codec in use


def test_records_names_still_resolve_from_the_package() -> None:
    """``kqactors.records`` loads its names lazily (PEP 562): every exported name resolves, unknown ones do not."""
    import kqactors.records as records

    for name in records.__all__:
        assert getattr(records, name) is not None
    with pytest.raises(AttributeError):
        records.no_such_name  # noqa: B018


def test_the_packages_names_still_resolve() -> None:
    """``kqactors`` loads its public names lazily too: each resolves, aliases and submodules included."""
    import kqactors
    import kqactors.error
    import kqactors.partitioner

    for name in kqactors.__all__:
        assert getattr(kqactors, name) is not None, name
    assert kqactors.murmur2 is kqactors.partitioner.murmur2_partition
    assert kqactors.consistent is kqactors.partitioner.consistent_partition
    assert kqactors.error is sys.modules["kqactors.error"]
    assert set(kqactors.__all__) <= set(dir(kqactors))
    with pytest.raises(AttributeError):
        kqactors.no_such_name  # noqa: B018


def test_the_crc_is_crc32c() -> None:
    from kqactors.records.crc import crc32c

    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    assert crc32c(memoryview(b"\x00" * 32)) == 0x8A9136AA
