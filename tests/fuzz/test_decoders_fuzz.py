"""Fuzzing every decoder broker bytes reach: any input gives the typed decode error, never another exception.

Runs in: the pytest process (Hypothesis), and one child process under an address-space limit for the
deterministic sweep. Targets (tests/support/fuzz_inputs.py): each request kind of kqactors/protocol/requests.py
at every version it speaks, the raw group kinds' generated response classes, record sets (RecordBatch v2 with
every codec, a control batch, legacy v0/v1 plain and compressed) through the record-set decoder with and without
CRC checks, and v2 records through the consumer's packing on the Python and the C path. The protocol's typed
error is ProtocolError (KafkaException, _BAD_MSG); the records' CorruptRecordError (_BAD_MSG) or
CompressionError (_BAD_COMPRESSION). The long run is benchmarks/fuzz_decoders.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import fuzz_inputs as F

from kqactors.native import NATIVE_DISABLED, records_module
from kqactors.protocol.requests import REQUEST_KINDS
from kqactors.records import compression as comp

NATIVE = None if NATIVE_DISABLED else records_module()
PROTOCOL = F.protocol_targets()
RECORDS = F.record_targets(NATIVE) + F.codec_targets()
FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TESTS_DIR = Path(__file__).resolve().parents[1]


def test_every_request_kind_is_fuzzed_at_every_version() -> None:
    names = {t.name for t in PROTOCOL}
    missing = [f"{kind.name} v{v}" for kind in REQUEST_KINDS.values()
               for v in range(kind.min_version, kind.max_version + 1) if f"{kind.name} v{v}" not in names]
    assert not missing, missing


def test_the_c_path_is_fuzzed_when_built() -> None:
    if NATIVE is None:
        pytest.skip("kqactors.native._native_records is not built or KQACTORS_NATIVE=0")
    assert any(t.name.endswith("(C)") for t in RECORDS)


@pytest.mark.parametrize("targets", [PROTOCOL, RECORDS], ids=["protocol", "records"])
def test_valid_inputs_decode(targets) -> None:
    for target in targets:
        target.decode(target.valid)  # the mutations start from inputs the decoders accept


@FUZZ
@given(st.sampled_from(PROTOCOL), st.randoms(use_true_random=False))
def test_mutated_responses_raise_only_protocol_error(target, rng) -> None:
    data = F.mutate(target.valid, rng)
    assert F.check(target, data) is None, (target.name, data)


@FUZZ
@given(st.sampled_from(PROTOCOL), st.binary(max_size=80))
def test_random_response_bodies_raise_only_protocol_error(target, data) -> None:
    assert F.check(target, data) is None, (target.name, data)


@FUZZ
@given(st.sampled_from(RECORDS), st.randoms(use_true_random=False), st.booleans())
def test_mutated_record_sets_raise_only_corrupt_record_error(target, rng, fix_crc) -> None:
    data = F.mutate(target.valid, rng)
    if fix_crc and target.fix is not None:
        data = bytes(target.fix(bytearray(data)))  # so the mutation reaches the codec and the record parser
    assert F.check(target, data) is None, (target.name, data)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([t for t in RECORDS if t.name.startswith("pack v2")]), st.randoms(use_true_random=False))
def test_c_and_python_packing_agree_on_mutated_batches(target, rng) -> None:
    """The C twin and the Python one index the same records or both refuse the batch."""
    if NATIVE is None:
        pytest.skip("no C path")
    data = bytes(F.fix_v2_crc(bytearray(F.mutate(target.valid, rng))))
    outcomes = []
    for native in (None, NATIVE):
        try:
            outcomes.append(F._pack_v2(native)(data))
        except F.RECORD_ERRORS:
            outcomes.append("refused")
    assert outcomes[0] == outcomes[1], (target.name, outcomes, data)


def _lz4_with_content_size(size: int) -> bytes:
    import lz4.frame

    frame = bytearray(lz4.frame.compress(b"a" * 100, store_size=True))
    frame[6:14] = size.to_bytes(8, "little")
    frame[comp.lz4_frame_descriptor_end(bytes(frame))] = comp.lz4_header_checksum(bytes(frame))
    return bytes(frame)


def _zstd_with_content_size(size: int) -> bytes:
    # frame header: magic, descriptor (8-byte content size, single segment), the size, then an empty raw block
    return b"\x28\xb5\x2f\xfd" + bytes([0xE0]) + size.to_bytes(8, "little") + b"\x01\x00\x00"


BOMBS = {
    "snappy preamble 4 GiB": (comp.SNAPPY, b"\xff\xff\xff\xff\x0f" + b"\x00" * 8),
    "snappy preamble 2 GiB": (comp.SNAPPY, b"\xff\xff\xff\xff\x07" + b"\x00" * 8),
    "xerial block claiming 2 GiB": (comp.SNAPPY, comp.XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01"
                                     + b"\x00\x00\x00\x06\xff\xff\xff\xff\x07\x00"),
    "lz4 content size 2 GiB": (comp.LZ4, _lz4_with_content_size(2 ** 31)),
    "zstd content size 1 TiB": (comp.ZSTD, _zstd_with_content_size(2 ** 40)),
}


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_a_declared_size_beyond_the_bound_is_refused_without_allocating(name) -> None:
    import tracemalloc

    codec, data = BOMBS[name]
    tracemalloc.start()
    try:
        with pytest.raises(comp.CompressionError):
            comp.decompress(codec, data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2 ** 20, peak


@pytest.mark.parametrize("codec", [comp.GZIP, comp.SNAPPY, comp.LZ4, comp.ZSTD], ids=["gzip", "snappy", "lz4", "zstd"])
@pytest.mark.parametrize("declared", [True, False], ids=["size-declared", "streamed"])
def test_real_output_beyond_the_bound_is_refused(monkeypatch, codec, declared) -> None:
    """A payload that really expands past MAX_DECOMPRESSED_BYTES (a decompression bomb) is refused."""
    import lz4.frame
    import zstandard

    data = b"\x00" * (3 * 2 ** 20)
    if codec == comp.LZ4:
        payload = lz4.frame.compress(data, store_size=declared)
    elif codec == comp.ZSTD:
        payload = zstandard.ZstdCompressor(write_content_size=declared).compress(data)
    else:
        payload = comp.compress(codec, data)
    assert comp.decompress(codec, payload) == data
    monkeypatch.setattr(comp, "MAX_DECOMPRESSED_BYTES", 2 ** 20)
    with pytest.raises(comp.CompressionError):
        comp.decompress(codec, payload)


def test_a_magic_0_lz4_frame_with_a_long_descriptor_is_a_compression_error() -> None:
    """Found by the sweep: content-size and dictionary flags make the descriptor 18 bytes, which the legacy
    checksum repair could not hash (a bare ValueError escaped the record decoder)."""
    frame = bytearray(comp.compress(comp.LZ4, b"inner"))
    frame[4] |= 0x09  # FLG: content size and dictionary id present
    with pytest.raises(comp.CompressionError):
        comp.lz4_decompress_legacy(bytes(frame) + b"\x00" * 12)


SWEEP = textwrap.dedent("""
    import resource, sys
    def vm():
        for line in open("/proc/self/status"):
            if line.startswith("VmSize"):
                return int(line.split()[1]) * 1024
    from support import fuzz_inputs as F
    from kqactors.native import NATIVE_DISABLED, records_module
    sys.path.insert(0, sys.argv[1])
    from fuzz.test_decoders_fuzz import BOMBS
    from kqactors.records import compression as comp
    targets = F.protocol_targets() + F.record_targets(None if NATIVE_DISABLED else records_module()) \\
        + F.codec_targets()
    # every 2 GiB length must fail before it is allocated: allow 256 MiB more than the start-up needs
    resource.setrlimit(resource.RLIMIT_AS, (vm() + 256 * 2 ** 20, resource.RLIM_INFINITY))
    count = 0
    findings = []
    for target in targets:
        for data in F.sweep(target.valid):
            if target.fix is not None:
                data = bytes(target.fix(bytearray(data)))
            count += 1
            error = F.check(target, data)
            if error is not None:
                findings.append(f"{target.name}: {type(error).__name__}: {error} <- {data[:60]!r}")
    for name, (codec, data) in BOMBS.items():
        count += 1
        try:
            comp.decompress(codec, data)
            findings.append(f"{name}: accepted")
        except comp.CompressionError:
            pass
        except BaseException as error:
            findings.append(f"{name}: {type(error).__name__}: {error}")
    print("inputs", count, "findings", len(findings))
    print("\\n".join(findings[:30]))
""")


@pytest.mark.timeout(240)
def test_sweep_of_huge_lengths_and_cuts_under_a_memory_limit() -> None:
    """Every truncation of every valid input, and at every offset a 2 GiB / negative int32 length, a huge int16
    and huge varints, decoded in a child whose address space is capped at start-up + 256 MiB: only typed
    errors, and nothing tries to allocate what a length field claims (a MemoryError or an abort would show)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", SWEEP, str(TESTS_DIR)], capture_output=True, text=True,
                          timeout=220, env=env)
    assert done.returncode == 0, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    head, _, findings = done.stdout.partition("\n")
    assert head.startswith("inputs ") and head.endswith("findings 0"), done.stdout[-3000:]
    assert int(head.split()[1]) > 100_000
