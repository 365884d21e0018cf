#!/usr/bin/env bash
# --gpu against the CPU alone, on one generated file: the Qwen3-235B shape cut to LAYERS blocks
# (36: 53 GB, the file of issue [cuda]'s llama.cpp figures), `gmlx bench` in memory on every CPU,
# then with --gpu (every expert in VRAM when they fit, a decode token's attention on the device),
# the same with the attention on the CPU (GMLX_GPU_ATTN=0), then both with --vram-gb 24 (the tier
# holds part of the experts and promotes as decode runs), alternated ROUNDS times. Prints each
# bench line, the [gpu] lines and the split of a decode token's time (GMLX_DECODE_LAYER_PROFILE).
#   bench/cuda/tier-bench.sh BIN_DIR [LIB_DIR [LAYERS [ROUNDS [FILE]]]]   (as gpu-check.sh)
set -uo pipefail
BIN=$1
LIB=${2:-}
LAYERS=${3:-36}
ROUNDS=${4:-1}
F=${5:-/tmp/gmlx-tier-bench.gguf}
source "$(dirname "$0")/bin-env.sh" # x PROGRAM ARGS...: one of BIN's programs
[ -f "$F" ] || x gmlx-gen --preset qwen3-235b-a22b --layers "$LAYERS" --skew 0.7 --seed 7 -o "$F" || exit 1
T=$(nproc)
for r in $(seq "$ROUNDS"); do
  for arm in ${ARMS:-cpu gpu gpu-cpu-attn gpu24 gpu24-cpu-attn}; do
    attn=1
    case $arm in
      cpu) flags=() ;;
      gpu) flags=(--gpu) ;;
      gpu-cpu-attn) flags=(--gpu); attn=0 ;;
      gpu24) flags=(--gpu --vram-gb 24) ;;
      gpu24-cpu-attn) flags=(--gpu --vram-gb 24); attn=0 ;;
    esac
    echo "== round $r, $arm: GMLX_GPU_ATTN=$attn gmlx bench -p 128 -n 64 -t $T ${flags[*]}"
    GMLX_GPU_ATTN=$attn GMLX_DECODE_LAYER_PROFILE=1 x gmlx bench "$F" -p 128 -n 64 -t "$T" "${flags[@]}" 2>&1 |
      grep -E '^bench:|\[gpu\]|\[profile\]|error|gmlx bench'
  done
done
