#!/bin/bash
# What the lossy levers cost in answers: the trained fixture model's task battery (400 prompts,
# greedy, at most 48 tokens) through `gmlx run --stream-experts`, once lossless and once per
# lever setting, with the share of exact answers per setting. The decode arena is made small
# (GMLX_DECODE_ARENA_GB, default 0.0055 GiB: 6-8 of the 16 experts per layer) so that miss-shed
# has misses to shed; the lossless row runs with the same arena.
#
# Usage: bench/levers/battery.sh [--model M] [--arena-gb G] [--limit N] [ARM ...]
#   ARM: one quoted set of lever flags, e.g. "--moe-experts 3" "--moe-miss-shed 0.8"
#   (default: a set covering every lever). Needs jq.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
gmlx=${GMLX:-$root/build/release/bin/gmlx}
model=$root/tests/fixtures/trained-qwen3moe/model-q4_k_m.gguf
battery=$root/tests/fixtures/trained-qwen3moe/battery.jsonl
arena=0.0055
limit=400
arms=()
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model=$2; shift 2 ;;
    --arena-gb) arena=$2; shift 2 ;;
    --limit) limit=$2; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    --moe*) arms+=("$1"); shift ;;
    -*) echo "battery.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) arms+=("$1"); shift ;;
  esac
done
command -v jq >/dev/null || { echo "battery.sh: needs jq (apt-get install jq)" >&2; exit 2; }
[ -x "$gmlx" ] || { echo "battery.sh: no gmlx at $gmlx (build first, or set GMLX)" >&2; exit 2; }
[ -r "$model" ] || { echo "battery.sh: cannot read $model" >&2; exit 2; }
if [ ${#arms[@]} -eq 0 ]; then
  arms=("" "--moe-experts 3" "--moe-experts 2" "--moe-expert-mass 0.9" "--moe-expert-mass 0.7"
        "--moe-miss-shed 0.9" "--moe-miss-shed 0.8" "--moe-miss-shed 0.6"
        "--moe-miss-shed 0.8 --moe-prestage keepers")
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
head -n "$limit" "$battery" >"$tmp/battery.jsonl"
n=$(wc -l <"$tmp/battery.jsonl")
echo "model: $model, $n prompts, decode arena $arena GiB, $(date -u +%FT%TZ)"
printf '| %-44s | %8s | %9s | %7s |\n' "levers" "correct" "accuracy" "seconds"
printf '|%s|%s|%s|%s|\n' "----------------------------------------------" "----------" "-----------" "---------"
for arm in "${arms[@]}"; do
  ok=0
  t0=$(date +%s.%N)
  i=0
  while IFS= read -r line; do
    i=$((i + 1))
    jq -j .prompt <<<"$line" >"$tmp/prompt.txt"
    want=$(jq -r .answer <<<"$line")
    # shellcheck disable=SC2086
    got=$(GMLX_DECODE_ARENA_GB=$arena "$gmlx" run "$model" --raw --stream-experts $arm -f "$tmp/prompt.txt" \
            --temp 0 -n 48 -t 1 2>"$tmp/err") || { echo "gmlx run failed ($arm):" >&2; cat "$tmp/err" >&2; exit 1; }
    got=$(sed -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' <<<"$got")
    [ "$got" = "$want" ] && ok=$((ok + 1))
  done <"$tmp/battery.jsonl"
  t1=$(date +%s.%N)
  printf '| %-44s | %4d/%-3d | %8.1f%% | %7.1f |\n' "${arm:-lossless}" "$ok" "$n" \
    "$(echo "100 * $ok / $n" | bc -l)" "$(echo "$t1 - $t0" | bc -l)"
done
