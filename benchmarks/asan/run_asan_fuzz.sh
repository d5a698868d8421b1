#!/usr/bin/env bash
# The C extensions built with AddressSanitizer into a temp dir, then benchmarks/fuzz_decoders.py run against
# that build of kqactors.native._native_records (the decoder C code broker bytes reach) with libasan preloaded
# (the interpreter itself is not instrumented). Any ASan report aborts the run with its stack.
#
#     bash benchmarks/asan/run_asan_fuzz.sh [inputs=1000000]
set -euo pipefail
cd "$(dirname "$0")/../.."
INPUTS="${1:-1000000}"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
SUFFIX="$(python -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
INCLUDES="$(python -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
FLAGS=(-shared -fPIC -g -O1 -fno-omit-frame-pointer -fsanitize=address -fsanitize=undefined -I"$INCLUDES")
gcc "${FLAGS[@]}" kqactors/native/_native_records.c -o "$OUT/_native_records$SUFFIX"
gcc "${FLAGS[@]}" kqactors/native/_native.c kqactors/native/_native_buffers.c kqactors/native/_native_produce.c \
    kqactors/native/_native_take.c -o "$OUT/_native$SUFFIX"
LIBASAN="$(gcc -print-file-name=libasan.so)"
LIBUBSAN="$(gcc -print-file-name=libubsan.so)"
echo "ASan builds in $OUT; preloading $LIBASAN"
# Python's allocator is not instrumented and leaks at exit are not decoder bugs
LD_PRELOAD="$LIBASAN $LIBUBSAN" ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:allocator_may_return_null=1" \
    UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" PYTHONMALLOC=malloc \
    python benchmarks/fuzz_decoders.py --engine random --inputs "$INPUTS" --native-records "$OUT/_native_records$SUFFIX"
