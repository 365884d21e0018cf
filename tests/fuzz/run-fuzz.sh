#!/usr/bin/env bash
# Usage: tests/fuzz/run-fuzz.sh [SECONDS]   (default 60)
#
# Builds the `fuzz` preset (clang, libFuzzer, ASan + UBSan) and runs fuzz_gguf for SECONDS from
# the seed corpus tests/fuzz/corpus/gguf, then fuzz_tokenizer for SECONDS/2 from
# tests/fuzz/corpus/tokenizer, then fuzz_model (a whole model file through the engine load, a
# few evaluation steps and its tokenizer) for SECONDS/2 from tests/fuzz/corpus/model. New inputs
# go to a temporary directory, so the committed seeds stay as they are. Exits non-zero when the fuzzer finds a crash, a leak, a
# timeout, an out-of-memory or a sanitizer report (status 1: libFuzzer's default 77 is this
# script's "skipped"); the reproducer is written under
# $BUILD/artifacts/ (run it again with: $BUILD/tests/fuzz/fuzz_gguf FILE).
# Exits 77 (skip) when clang is not installed.
#
# Environment: GMLX_FUZZ_BUILD  build directory (default build/fuzz, the preset's)
#              JOBS             parallel build jobs (default: number of CPUs)
set -euo pipefail

secs=${1:-60}
case "$secs" in
  -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
  ''|*[!0-9]*) echo "usage: $0 [SECONDS]" >&2; exit 2 ;;
esac
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
build=${GMLX_FUZZ_BUILD:-build/fuzz}

if ! command -v clang >/dev/null 2>&1; then
  echo "run-fuzz.sh: clang is not installed; skipping the fuzz run" >&2
  exit 77
fi

cmake --preset fuzz -B "$build" >/dev/null
cmake --build "$build" --target fuzz_gguf fuzz_tokenizer fuzz_model -j "${JOBS:-$(nproc)}"

work=$(mktemp -d "${TMPDIR:-/tmp}/gmlx-fuzz-gguf.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$build/artifacts"

"$build/tests/fuzz/fuzz_gguf" \
  -max_total_time="$secs" \
  -timeout=10 \
  -rss_limit_mb=2048 \
  -max_len=8192 \
  -dict=tests/fuzz/gguf.dict \
  -artifact_prefix="$build/artifacts/" \
  -print_final_stats=1 \
  -error_exitcode=1 \
  "$work" tests/fuzz/corpus/gguf

mkdir -p "$work/tok"
"$build/tests/fuzz/fuzz_tokenizer" \
  -max_total_time="$(( secs / 2 > 1 ? secs / 2 : 1 ))" \
  -timeout=10 \
  -rss_limit_mb=2048 \
  -max_len=4096 \
  -artifact_prefix="$build/artifacts/" \
  -print_final_stats=1 \
  -error_exitcode=1 \
  "$work/tok" tests/fuzz/corpus/tokenizer

mkdir -p "$work/model"
"$build/tests/fuzz/fuzz_model" \
  -max_total_time="$(( secs / 2 > 1 ? secs / 2 : 1 ))" \
  -timeout=20 \
  -rss_limit_mb=3072 \
  -max_len=131072 \
  -dict=tests/fuzz/gguf.dict \
  -artifact_prefix="$build/artifacts/" \
  -print_final_stats=1 \
  -error_exitcode=1 \
  "$work/model" tests/fuzz/corpus/model
