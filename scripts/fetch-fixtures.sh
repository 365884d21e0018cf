#!/bin/sh
# Copies the larger reference fixtures (models and outputs of independent implementations)
# into the git-ignored cache .fixtures/, which model tests read. The small ones are committed
# under tests/fixtures/.
#
# Usage: scripts/fetch-fixtures.sh [SOURCE]
#   SOURCE: a folder, or an http(s) URL of a folder laid out the same way. Default: the
#   GMLX_FIXTURES_SOURCE environment variable, else the 'shared/fixtures' folder beside this
#   checkout when it exists.
set -eu

case "${1:-}" in
  -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
esac
root=$(cd "$(dirname "$0")/.." && pwd)
cache="$root/.fixtures"
src="${1:-${GMLX_FIXTURES_SOURCE:-$(dirname "$root")/shared/fixtures}}"

# The files the tests use, relative to the source.
files="
qwen3moe/model-bf16.gguf qwen3moe/model-q8_0.gguf qwen3moe/model-q4_k_m.gguf qwen3moe/model-q2_k.gguf
qwen3moe/model-iq4_xs.gguf qwen3moe/prompt.ids qwen3moe/logits.f32 qwen3moe/greedy.ids
qwen3moe/greedy-logits.f32 qwen3moe/tokenizer-cases.jsonl qwen3moe/meta.json
qwen3moe/llamacpp-logits-q8_0.f32 qwen3moe/llamacpp-logits-q4_k_m.f32
qwen3moe/llamacpp-logits-q2_k.f32 qwen3moe/llamacpp-logits-iq4_xs.f32
deepseek-v3/model-bf16.gguf gpt-oss/model-bf16.gguf glm4moe/model-bf16.gguf mixtral/model-bf16.gguf
qwen3next/model-bf16.gguf minimax-m2/model-bf16.gguf
trained-qwen3moe/model-q2_k.gguf
trained-qwen3moe/model-bf16.gguf.part-00 trained-qwen3moe/model-bf16.gguf.part-01
trained-qwen3moe/model-bf16.gguf.part-02 trained-qwen3moe/model-bf16.gguf.sha256
tokenizers/ggml-vocab-gpt-2.gguf tokenizers/ggml-vocab-deepseek-llm.gguf tokenizers/ggml-vocab-falcon.gguf
tokenizers/ggml-vocab-starcoder.gguf tokenizers/ggml-vocab-mpt.gguf tokenizers/ggml-vocab-refact.gguf
tokenizers/ggml-vocab-llama-spm.gguf tokenizers/ggml-vocab-baichuan.gguf
"
for name in gpt-2 deepseek-llm falcon starcoder mpt refact llama-spm; do
  files="$files tokenizers/ggml-vocab-$name.gguf.inp tokenizers/ggml-vocab-$name.gguf.out"
done
files="$files qwen3moe/gguf-dump.txt"
for arch in deepseek-v3 gpt-oss glm4moe mixtral qwen3next minimax-m2; do
  files="$files $arch/prompt.ids $arch/logits.f32 $arch/greedy.ids $arch/greedy-logits.f32 $arch/tokenizer-cases.jsonl $arch/meta.json $arch/gguf-dump.txt"
done

case "$src" in
  http://*|https://*) mode=url ;;
  *)
    if [ ! -d "$src" ]; then
      echo "fetch-fixtures: fixture source '$src' is not a folder; give a folder or URL" >&2
      exit 1
    fi
    mode=dir ;;
esac

mkdir -p "$cache"
n=0
for f in $files; do
  dst="$cache/$f"
  mkdir -p "$(dirname "$dst")"
  if [ "$mode" = dir ]; then
    if [ ! -f "$src/$f" ]; then
      echo "fetch-fixtures: $src/$f is missing" >&2
      exit 1
    fi
    if [ ! -f "$dst" ] || ! cmp -s "$src/$f" "$dst"; then
      # each step checked: set -e does not stop on a failure inside an && list
      if ! { cp "$src/$f" "$dst.tmp" && chmod u+w "$dst.tmp" && mv "$dst.tmp" "$dst"; }; then
        rm -f "$dst.tmp"
        echo "fetch-fixtures: could not copy $src/$f to $dst" >&2
        exit 1
      fi
    fi
  else
    if [ ! -f "$dst" ]; then
      if ! command -v curl >/dev/null 2>&1; then
        echo "fetch-fixtures: a URL source needs curl (apt-get install curl)" >&2
        exit 1
      fi
      if ! { curl -fsSL --retry 3 -o "$dst.tmp" "$src/$f" && mv "$dst.tmp" "$dst"; }; then
        rm -f "$dst.tmp"
        echo "fetch-fixtures: could not download $src/$f" >&2
        exit 1
      fi
    fi
  fi
  n=$((n + 1))
done

# The trained model's BF16 file comes in parts; rejoin and check it.
tq="$cache/trained-qwen3moe"
want=$(awk '{print $1}' "$tq/model-bf16.gguf.sha256")
have=""
[ -f "$tq/model-bf16.gguf" ] && have=$(sha256sum "$tq/model-bf16.gguf" | awk '{print $1}')
if [ "$want" != "$have" ]; then
  # absent, or left from parts that have changed since: join them again
  if ! { cat "$tq/model-bf16.gguf.part-00" "$tq/model-bf16.gguf.part-01" "$tq/model-bf16.gguf.part-02" \
           > "$tq/model-bf16.gguf.tmp" && mv "$tq/model-bf16.gguf.tmp" "$tq/model-bf16.gguf"; }; then
    rm -f "$tq/model-bf16.gguf.tmp"
    echo "fetch-fixtures: could not join trained-qwen3moe/model-bf16.gguf" >&2
    exit 1
  fi
  have=$(sha256sum "$tq/model-bf16.gguf" | awk '{print $1}')
fi
if [ "$want" != "$have" ]; then
  rm -f "$tq/model-bf16.gguf"
  echo "fetch-fixtures: trained-qwen3moe/model-bf16.gguf does not match its sha256" >&2
  exit 1
fi
echo "fetch-fixtures: $n files in $cache (from $src)"
