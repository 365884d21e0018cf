#!/usr/bin/env bash
# The benchmarks of the CUDA backend against llama.cpp's CUDA build, side by side on one GPU
# machine and one generated file (bench/llamacpp/side-by-side.sh runs each pair of programs, in
# alternated rounds, and prints the table). ARM is one of:
#   vram  every weight in VRAM:       gmlx --gpu                  llama.cpp -ngl 99 -fa 1
#   24    24 GiB of VRAM:             gmlx --gpu --vram-gb 24     llama.cpp -ngl 99 -fa 1 --n-cpu-moe 21
#   ram   the same, with HOG_GB (default 98) GiB of host RAM held by another process so that the
#         file is larger than the RAM left, each run from a dropped page cache (--cold)
# (--n-cpu-moe 21 keeps 21 of the 36 blocks' experts on the CPU: 24.1 GB of VRAM on the
# Qwen3-235B shape cut to 36 blocks, the file of docs/cuda.md.)
#   bench/cuda/side-by-side.sh BIN_DIR LIB_DIR LLAMA_BENCH FILE ARM [side-by-side.sh options]
# BIN_DIR and LIB_DIR as for gpu-check.sh (LIB_DIR may be ''); LLAMA_BENCH from
# bench/llamacpp/build-llamacpp.sh --cuda. Options (-p, -n, -t, --rounds, --out) go to
# side-by-side.sh; the defaults here: -p 512 -n 64 -t $(nproc) --rounds 2 (ram: -n 32 --rounds 1).
set -euo pipefail
case "${1:-}" in -h|--help|'') sed -n '2,16p' "$0"; exit 0 ;; esac
[ $# -ge 5 ] || { echo "usage: side-by-side.sh BIN_DIR LIB_DIR LLAMA_BENCH FILE ARM [options]" >&2; exit 2; }
BIN=$1 LIB=$2 LLAMA=$3 F=$4 ARM=$5
shift 5
root=$(cd "$(dirname "$0")/../.." && pwd)
W=$(mktemp -d)
hog=
trap '[ -n "$hog" ] && kill "$hog" 2>/dev/null; rm -rf "$W"' EXIT
source "$root/bench/cuda/bin-env.sh"
gm_wrapper gmlx "$W/gmlx"   # gmlx as side-by-side.sh starts it
G=$W/gmlx
common=(--gmlx "$G" --llama-bench "$LLAMA" -t "$(nproc)" --llama-arg -ngl --llama-arg 99 --llama-arg -fa --llama-arg 1)
case $ARM in
  vram) set -- -p 512 -n 64 --rounds 2 "${common[@]}" --gmlx-arg --gpu "$@" ;;
  24) set -- -p 512 -n 64 --rounds 2 "${common[@]}" --gmlx-arg --gpu --gmlx-arg --vram-gb --gmlx-arg 24 \
        --llama-arg --n-cpu-moe --llama-arg 21 "$@" ;;
  ram)
    gb=${HOG_GB:-98}
    python3 -c "
import time
n = $gb << 30
a = bytearray(n)
a[::4096] = b'\\1' * len(range(0, n, 4096))   # a byte of every page written: memory the kernel must keep
print('held', flush=True)
time.sleep(1e6)" >"$W/hog" 2>&1 &
    hog=$!
    for _ in $(seq 600); do grep -q held "$W/hog" && break; kill -0 "$hog" 2>/dev/null || break; sleep 0.5; done
    grep -q held "$W/hog" || { echo "side-by-side.sh: the memory hog failed: $(cat "$W/hog")" >&2; exit 1; }
    echo "holding $gb GiB: $(grep MemAvailable /proc/meminfo)" >&2
    set -- -p 512 -n 32 --rounds 1 --cold "${common[@]}" --gmlx-arg --gpu --gmlx-arg --vram-gb --gmlx-arg 24 \
      --llama-arg --n-cpu-moe --llama-arg 21 "$@" ;;
  *) echo "side-by-side.sh: ARM is vram, 24 or ram" >&2; exit 2 ;;
esac
bash "$root/bench/llamacpp/side-by-side.sh" "$F" "$@"
