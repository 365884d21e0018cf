#!/usr/bin/env bash
# Usage: tests/fuzz/run-fuzz.sh [SECONDS]   (default 60)
#
# Builds the `fuzz` preset (clang, libFuzzer, ASan + UBSan) and runs fuzz_gguf for SECONDS from
# the seed corpus tests/fuzz/corpus/gguf, then fuzz_tokenizer for SECONDS/2 from
# tests/fuzz/corpus/tokenizer, then fuzz_model (a whole model file through the engine load, a
# few evaluation steps and its tokenizer) for SECONDS/2 from tests/fuzz/corpus/model, then
# fuzz_template (a chat template parsed and rendered) for SECONDS/2 from tests/fuzz/corpus/template,
# then fuzz_config (a gmlx.yaml loaded, resolved and edited) for SECONDS/2 from tests/fuzz/corpus/config,
# then fuzz_remote (a model ref, HTTP response headers and a hub listing) for SECONDS/2 from tests/fuzz/corpus/remote,
# then fuzz_server (a request body through the server's parsers and answers) from tests/fuzz/corpus/server. New inputs
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
cmake --build "$build" --target fuzz_gguf fuzz_tokenizer fuzz_model fuzz_template fuzz_config fuzz_remote fuzz_server -j "${JOBS:-$(nproc)}"

work=$(mktemp -d "${TMPDIR:-/tmp}/gmlx-fuzz-gguf.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$build/artifacts"

# fuzz TARGET SECONDS TIMEOUT RSS_MB MAX_LEN CORPUS [LIBFUZZER FLAGS...]: new inputs go to a
# temporary folder; a finding exits 1 (libFuzzer's default 77 is this script's "skipped")
fuzz() {
  local target=$1 t=$2 timeout=$3 rss=$4 len=$5 corpus=$6
  shift 6
  mkdir -p "$work/$target"
  "$build/tests/fuzz/$target" -max_total_time="$t" -timeout="$timeout" -rss_limit_mb="$rss" \
    -max_len="$len" -artifact_prefix="$build/artifacts/" -print_final_stats=1 -error_exitcode=1 \
    "$@" "$work/$target" "$corpus"
}
half=$(( secs / 2 > 1 ? secs / 2 : 1 ))
fuzz fuzz_gguf "$secs" 10 2048 8192 tests/fuzz/corpus/gguf -dict=tests/fuzz/gguf.dict
fuzz fuzz_tokenizer "$half" 10 2048 4096 tests/fuzz/corpus/tokenizer
fuzz fuzz_model "$half" 20 3072 131072 tests/fuzz/corpus/model -dict=tests/fuzz/gguf.dict
fuzz fuzz_template "$half" 10 2048 16384 tests/fuzz/corpus/template -dict=tests/fuzz/template.dict
fuzz fuzz_config "$half" 10 2048 16384 tests/fuzz/corpus/config -dict=tests/fuzz/config.dict
fuzz fuzz_remote "$half" 10 2048 65536 tests/fuzz/corpus/remote
fuzz fuzz_server "$half" 10 2048 65536 tests/fuzz/corpus/server -dict=tests/fuzz/server.dict
