#!/bin/sh
# Writes the seed corpus of fuzz_model (tests/fuzz/corpus/model): tiny models of one block, two
# experts and a 260-token synthetic vocabulary, written by gmlx-gen (same options and seed: the
# same bytes): qwen3moe with F16 and Q8_0 weights, llama/Mixtral with F32 and Q4_0, gpt-oss
# (sinks, a sliding window, biases, MXFP4 experts), qwen3next (a Gated DeltaNet block), qwen35moe
# (the same with beta and alpha as two tensors); and of two blocks (a dense one, an MoE one): the
# sparse attentions of glm-dsa and minimax-m3, hy_v4's hyper-connections, kimi-k3's KDA block,
# residual attention and latent experts, qwen4exp's low-rank hyper-connections, QSA and n-gram
# hash embedding.
# Usage: tests/fuzz/gen_model_corpus.sh [GMLX_GEN]   (default build/release/tools/gen/gmlx-gen)
set -eu
case "${1:-}" in
  -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
esac
cd "$(dirname "$0")/../.."
gen=${1:-build/release/tools/gen/gmlx-gen}
out=tests/fuzz/corpus/model
mkdir -p "$out"
common="--layers 1 --experts 2 --experts-used 1 --hidden 32 --expert-ffn 32 --heads 2 --kv-heads 1 --head-dim 16 --vocab 260 -q"
# shellcheck disable=SC2086
"$gen" --arch qwen3moe $common --ffn 32 --dense-type F16 --expert-type F16 -o "$out/qwen3moe-f16.gguf"
# shellcheck disable=SC2086
"$gen" --arch qwen3moe $common --ffn 32 --dense-type Q8_0 --expert-type Q8_0 -o "$out/qwen3moe-q8_0.gguf"
# shellcheck disable=SC2086
"$gen" --arch llama $common --dense-type F32 --expert-type Q4_0 -o "$out/llama-q4_0.gguf"
# shellcheck disable=SC2086
"$gen" --arch gpt-oss $common --dense-type F16 -o "$out/gpt-oss.gguf"
# shellcheck disable=SC2086
"$gen" --arch qwen3next $common --dense-type F16 --expert-type F16 -o "$out/qwen3next.gguf"
# shellcheck disable=SC2086
"$gen" --arch qwen35moe $common --dense-type F16 --expert-type F16 -o "$out/qwen35moe.gguf"
common2="--layers 2 --experts 2 --experts-used 1 --hidden 32 --expert-ffn 32 --ffn 32 --heads 2 --vocab 260 -q --dense-type F16 --expert-type F16"
# shellcheck disable=SC2086
"$gen" --arch glm-dsa $common2 --q-lora 32 --kv-lora 32 -o "$out/glm-dsa.gguf"
# shellcheck disable=SC2086
"$gen" --arch minimax-m3 $common2 --kv-heads 1 --head-dim 32 -o "$out/minimax-m3.gguf"
# shellcheck disable=SC2086
"$gen" --arch hy_v4 $common2 --q-lora 32 --kv-lora 32 -o "$out/hy_v4.gguf"
# shellcheck disable=SC2086
"$gen" --arch kimi-k3 $common2 --q-lora 32 --kv-lora 32 --expert-latent 32 -o "$out/kimi-k3.gguf"
# shellcheck disable=SC2086
"$gen" --arch qwen4exp --layers 2 --experts 2 --experts-used 1 --hidden 32 --expert-ffn 32 --heads 2 --vocab 260 -q \
  --dense-type F16 --expert-type F16 -o "$out/qwen4exp.gguf"
