"""The long fuzzing run of every decoder broker bytes reach (the CI's is tests/fuzz/, ~60 s).

Runs in: this process (the decoders are pure functions; no broker). Targets and mutations are
tests/support/fuzz_inputs.py's: every request kind at every version, the raw group kinds' response classes,
record sets (v2 with each codec, control, legacy v0/v1 plain and compressed) with and without CRC checks, each
codec's decompress, and v2 records through the consumer's packing on the Python and the C path. A finding is an
exception other than the target's typed error; a crash or a sanitizer report ends the process.

    python benchmarks/fuzz_decoders.py --inputs 1000000                  # atheris when installed, else random
    python benchmarks/fuzz_decoders.py --engine random --inputs 1000000  # seeded random mutation of valid inputs
    bash benchmarks/asan/run_asan_fuzz.sh 1000000                        # the C path built with ASan

``--native-records PATH`` loads the C extension from PATH (the ASan build) instead of kqactors.native's.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from support import fuzz_inputs as F  # noqa: E402


def load_native(path: str | None):
    if path is None:
        from kqactors.native import NATIVE_DISABLED, records_module

        return None if NATIVE_DISABLED else records_module()
    spec = importlib.util.spec_from_file_location("kqactors.native._native_records", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def targets(native) -> list[F.Target]:
    return F.protocol_targets() + F.record_targets(native) + F.codec_targets()


def report(count: int, started: float, findings: dict[str, str], engine: str, native) -> None:
    elapsed = time.monotonic() - started
    print(f"engine={engine} inputs={count} seconds={elapsed:.1f} rate={count / elapsed:,.0f}/s "
          f"targets={len(TARGETS)} c_path={'yes' if native is not None else 'no'} "
          f"c_path_random_inputs={RUN['c_inputs']} findings={len(findings)}")
    for key, sample in list(findings.items())[:20]:
        print(f"  {key}  <- {sample}")


def run_random(count: int, seed: int, native) -> dict[str, str]:
    rng = random.Random(seed)
    findings: dict[str, str] = {}
    done = 0
    for target in TARGETS:  # the deterministic sweep first (truncations, huge lengths at every offset)
        for data in F.sweep(target.valid):
            if target.fix is not None:
                data = bytes(target.fix(bytearray(data)))
            error = F.check(target, data)
            done += 1
            if error is not None:
                findings.setdefault(f"{target.name}: {type(error).__name__}: {str(error)[:120]}", repr(data[:60]))
    # the protocol targets are many and cheap; the record decoders (and most of all the C path) get more turns
    weights = [40 if t.name.endswith("(C)") else 10 if t.errors is F.RECORD_ERRORS else 1 for t in TARGETS]
    while done < count:
        target = rng.choices(TARGETS, weights)[0]
        if target.name.endswith("(C)"):
            RUN["c_inputs"] += 1
        data = F.mutate(target.valid, rng)
        if target.fix is not None and rng.random() < 0.8:
            data = bytes(target.fix(bytearray(data)))
        error = F.check(target, data)
        done += 1
        if error is not None:
            findings.setdefault(f"{target.name}: {type(error).__name__}: {str(error)[:120]}", repr(data[:60]))
    RUN["count"] = done
    return findings


def run_atheris(count: int) -> None:
    import atheris

    findings: dict[str, str] = {}
    started = time.monotonic()

    def one_input(data: bytes) -> None:
        RUN["count"] += 1
        if len(data) < 2:
            return
        target = TARGETS[int.from_bytes(data[:2], "little") % len(TARGETS)]
        body = data[2:]
        if body[:1] == b"\x00":  # half the inputs: a mutation of the valid input, driven by the fuzzer's bytes
            body = F.mutate(target.valid, random.Random(body))
            if target.fix is not None:
                body = bytes(target.fix(bytearray(body)))
        error = F.check(target, body)
        if error is not None:
            findings.setdefault(f"{target.name}: {type(error).__name__}: {str(error)[:120]}", repr(body[:60]))
        if RUN["count"] >= count:
            report(RUN["count"], started, findings, "atheris", NATIVE)
            sys.stdout.flush()
            os._exit(1 if findings else 0)

    atheris.instrument_all()  # coverage of every loaded Python function guides the mutations
    atheris.Setup([sys.argv[0], f"-runs={count + 1}", "-max_len=4096", "-len_control=0"], one_input)
    atheris.Fuzz()


RUN = {"count": 0, "c_inputs": 0}
TARGETS: list[F.Target] = []
NATIVE = None


def main() -> int:
    global NATIVE
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inputs", type=int, default=1_000_000)
    parser.add_argument("--engine", choices=["auto", "atheris", "random"], default="auto")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--native-records", default=None, help="path of a _native_records build to fuzz")
    args = parser.parse_args()
    NATIVE = load_native(args.native_records)
    TARGETS[:] = targets(NATIVE)
    engine = args.engine
    if engine == "auto":
        engine = "atheris" if importlib.util.find_spec("atheris") else "random"
    if engine == "atheris":
        run_atheris(args.inputs)
        return 0
    started = time.monotonic()
    findings = run_random(args.inputs, args.seed, NATIVE)
    report(RUN["count"], started, findings, "random", NATIVE)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
