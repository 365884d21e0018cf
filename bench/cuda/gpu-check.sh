#!/usr/bin/env bash
# --gpu (the VRAM tier of experts, a decode token's attention on the device, and the whole token
# there where the model allows it) against the CPU,
# on a GPU machine: for every committed fixture family (float experts, llama.cpp's logits beside
# them) and for tiny generated models of each quantized expert type, the logits of every position
# decoded one token at a time with and without --gpu, in memory and streamed, and from one chunk
# whole on the device where the model runs there; with the attention
# kept on the CPU (GMLX_GPU_ATTN=0), one prefill chunk (which must equal that decode, every expert
# being on the device in both); compared by compare-logits.py. The trained model with a VRAM budget
# smaller than its experts, so that decode promotes experts into the tier as it runs, and a greedy
# generation after a prompt computed on the CPU (its rows copied into the device's cache).
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
source bench/cuda/bin-env.sh # x PROGRAM ARGS...: one of BIN's programs
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
  echo "  $(grep -E '\[gpu\] (attention|decode)' "$W/log" | head -2 | paste -sd' ')"
  GMLX_GPU_DECODE=0 x gmlx logits "$m" --ids "$ids" --out "$W/lgpu.f32" --prefill-step-size 1 -t 8 --gpu 2>"$W/log" &&
    echo "  gpu layer by layer (GMLX_GPU_DECODE=0) vs cpu: $(cmp "$W/lgpu.f32" "$W/cpu.f32" "$n")" &&
    echo "  gpu whole token vs layer by layer: $(cmp "$W/gpu.f32" "$W/lgpu.f32" "$n")"
  GMLX_GPU_GRAPH=0 x gmlx logits "$m" --ids "$ids" --out "$W/ngpu.f32" --prefill-step-size 1 -t 8 --gpu 2>"$W/log" &&
    echo "  gpu without the CUDA graph (GMLX_GPU_GRAPH=0) vs with it: $(cmp "$W/ngpu.f32" "$W/gpu.f32" "$n")"
  x gmlx logits "$m" --ids "$ids" --out "$W/cgpu.f32" -t 8 --gpu 2>"$W/log" && grep -q '\[gpu\] prompt whole' "$W/log" &&
    echo "  gpu prompt whole on the device (one chunk) vs cpu: $(cmp "$W/cgpu.f32" "$W/cpu.f32" "$n")"
  GMLX_GPU_ATTN=0 x gmlx logits "$m" --ids "$ids" --out "$W/egpu.f32" --prefill-step-size 1 -t 8 --gpu 2>"$W/log" &&
    echo "  gpu, attention on the CPU vs cpu: $(cmp "$W/egpu.f32" "$W/cpu.f32" "$n")"
  GMLX_GPU_ATTN=0 x gmlx logits "$m" --ids "$ids" --out "$W/pgpu.f32" -t 8 --gpu 2>"$W/log" &&
    echo "  gpu prefill (one chunk) vs gpu decode, attention on the CPU: $(cmp "$W/pgpu.f32" "$W/egpu.f32" "$n")" ||
    tail -2 "$W/log"
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
# a prompt on the CPU, then greedy decode with its attention on the device: the same words
for g in "" --gpu; do
  x gmlx run $T/model-q4_k_m.gguf --raw -p "Once upon a time, in a small village," -n 48 --ignore-eos --temp 0 -t 8 $g 2>"$W/log" |
    tr '\n' ' ' | sed "s/^/  run ${g:-cpu}: /"; echo; grep '\[gpu\] attention' "$W/log"
done
seq 1 40 | tr '\n' ' ' >"$W/ids"
# every expert type gmlx-gen writes (Q3_K and the other IQ types it cannot: test_cuda checks
# their decoders and products on the device)
for t in Q2_K Q4_K Q5_K Q6_K Q8_0 Q4_0 MXFP4 IQ2_XXS BF16; do
  x gmlx-gen --arch qwen3moe --hidden 256 --expert-ffn 256 --vocab 300 --expert-type $t -o "$W/t.gguf" >/dev/null 2>&1 ||
    { echo "gen $t failed"; continue; }
  check "tiny qwen3moe, $t experts" "$W/t.gguf" "$W/ids"
done
