#!/usr/bin/env bash
# The VRAM tier of experts (--gpu) against the CPU, on a GPU machine: for every committed fixture
# family (float experts, llama.cpp's logits beside them) and for tiny generated models of each
# quantized expert type, the logits of every position decoded one token at a time with and without
# --gpu, in memory and streamed, and with --gpu as one prefill chunk (which must equal the decode,
# every expert being on the device in both), compared by compare-logits.py; the trained model with a VRAM budget smaller than its
# experts, so that decode promotes experts into the tier as it runs.
#   bench/cuda/gpu-check.sh BIN_DIR [LIB_DIR]
# BIN_DIR holds gmlx and gmlx-gen built with the CUDA backend; LIB_DIR, when given, the libraries
# they were linked against and that system's loader (ld-linux-x86-64.so.2), for a GPU machine that
# lacks gmlx's build dependencies: they run through that loader.
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=$1
LIB=${2:-}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
x() { # x PROGRAM ARGS...: one of BIN's programs
  if [ -n "$LIB" ]; then "$LIB/ld-linux-x86-64.so.2" --library-path "$LIB:$SYS_LIBS" "$BIN/$1" "${@:2}"
  else "$BIN/$1" "${@:2}"; fi
}
SYS_LIBS=$(ldconfig -p 2>/dev/null | awk '/libcuda.so.1/ {print $NF}' | xargs -r -n1 dirname | sort -u | paste -sd:)
SYS_LIBS=${SYS_LIBS:-/usr/lib/x86_64-linux-gnu}
cmp() { python3 bench/cuda/compare-logits.py "$@"; }
# check NAME MODEL IDS [REF]: CPU, --gpu, and both streamed, one position per call
check() {
  local name=$1 m=$2 ids=$3 ref=${4:-} n
  n=$(wc -w <"$ids")
  x gmlx logits "$m" --ids "$ids" --out "$W/cpu.f32" --prefill-step-size 1 -t 8 2>"$W/log" || { cat "$W/log"; return; }
  if ! x gmlx logits "$m" --ids "$ids" --out "$W/gpu.f32" --prefill-step-size 1 -t 8 --gpu 2>"$W/log"; then
    echo "$name: --gpu: $(tail -1 "$W/log")"; return
  fi
  echo "$name: $(grep '\[gpu\]' "$W/log" | head -1)"
  echo "  gpu vs cpu: $(cmp "$W/gpu.f32" "$W/cpu.f32" "$n")"
  x gmlx logits "$m" --ids "$ids" --out "$W/pgpu.f32" -t 8 --gpu 2>"$W/log" &&
    echo "  gpu prefill (one chunk) vs gpu decode: $(cmp "$W/pgpu.f32" "$W/gpu.f32" "$n")" || tail -2 "$W/log"
  [ -n "$ref" ] && echo "  gpu vs llama.cpp: $(cmp "$W/gpu.f32" "$ref" "$n")" && echo "  cpu vs llama.cpp: $(cmp "$W/cpu.f32" "$ref" "$n")"
  x gmlx logits "$m" --ids "$ids" --out "$W/sgpu.f32" --prefill-step-size 1 -t 8 --gpu --stream-experts 2>"$W/log" &&
    echo "  streamed gpu vs gpu: $(cmp "$W/sgpu.f32" "$W/gpu.f32" "$n")"
}
x gmlx doctor --no-drive-test | grep gpu
x gmlx validate tests/fixtures/trained-qwen3moe/model-q4_k_m.gguf --gpu | grep -i vram
for d in tests/fixtures/llamacpp-*/; do
  check "$(basename "$d")" "$d/model-f16.gguf" "$d/prompt.ids" "$d/llamacpp-logits.f32"
done
T=tests/fixtures/trained-qwen3moe
check trained-qwen3moe-q4_k_m $T/model-q4_k_m.gguf $T/ref1.prompt.ids
# a budget below its experts: the tier starts with a share of each layer and promotes as decode runs
n=$(wc -w <$T/ref1.prompt.ids)
x gmlx logits $T/model-q4_k_m.gguf --ids $T/ref1.prompt.ids --out "$W/cpu.f32" --prefill-step-size 1 -t 8 2>/dev/null
x gmlx logits $T/model-q4_k_m.gguf --ids $T/ref1.prompt.ids --out "$W/gpu.f32" --prefill-step-size 1 -t 8 --gpu \
  --vram-gb 0.01 2>"$W/log"; grep '\[gpu\]' "$W/log"
echo "  --vram-gb 0.01, gpu vs cpu: $(cmp "$W/gpu.f32" "$W/cpu.f32" "$n")"
seq 1 40 | tr '\n' ' ' >"$W/ids"
for t in Q2_K Q3_K Q4_K Q5_K Q6_K Q8_0 Q4_0 MXFP4 IQ2_XXS BF16; do
  x gmlx-gen --arch qwen3moe --hidden 256 --expert-ffn 256 --vocab 300 --expert-type $t -o "$W/t.gguf" >/dev/null 2>&1 ||
    { echo "gen $t failed"; continue; }
  check "tiny qwen3moe, $t experts" "$W/t.gguf" "$W/ids"
done
