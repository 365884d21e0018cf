#!/usr/bin/env bash
# A chat's second turn on a streamed model, with the arena token split on and off (alternated
# rounds), against llama.cpp at the same depth, each run from a dropped page cache:
#   gmlx:      gmlx bench MODEL -p P1 -n N1 --warmup 0 --turn P2 --turn-n N2 -t T
#              (GMLX_ARENA_TOKEN_SPLIT=256 and =0): the bench-turn: line, the second turn's
#              prefill tok/s and the decode tok/s of the N2 tokens after it
#   llama.cpp: llama-bench -m MODEL -p P2 -n N2 -d P1+N1 -t T -r 1 --no-warmup (prefill and
#              decode at that depth; llama-bench runs the depth's prefill untimed first)
# Defaults: P1 128, N1 64, P2 48, N2 32, 2 threads, 2 rounds. Needs root (drop_caches).
# Usage: bench/chat/turn-split.sh MODEL [--rounds R] [-t T] [--llama-bench PATH] [--out FILE.md]
set -euo pipefail
case "${1:-}" in -h|--help) sed -n '2,12p' "$0"; exit 0 ;; ''|-*) sed -n '12p' "$0" >&2; exit 2 ;; esac
root=$(cd "$(dirname "$0")/../.." && pwd)
gmlx=$root/build/release/bin/gmlx
model=$1; shift
P1=128 N1=64 P2=48 N2=32 T=2 rounds=2 out="" llama=${LLAMA_BENCH:-/var/tmp/gmlx-llamacpp/build-norepack/bin/llama-bench}  # a build that runs here: --no-amx where AMX is refused
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=${2:?}; shift 2 ;;
    -t) T=${2:?}; shift 2 ;;
    --llama-bench) llama=${2:?}; shift 2 ;;
    --out) out=${2:?}; shift 2 ;;
    *) echo "turn-split.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -f "$model" ] || { echo "turn-split.sh: no model $model" >&2; exit 2; }
[ -x "$gmlx" ] || { echo "turn-split.sh: no $gmlx (make build)" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "turn-split.sh: needs root to drop the page cache" >&2; exit 2; }
log=$(mktemp /tmp/gmlx-turn-split.XXXXXX)
trap 'rm -f "$log"' EXIT
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
gmlx_run() { # SPLIT -> "prefill_tok_s decode_tok_s through_arena gb_read"
  drop
  GMLX_ARENA_TOKEN_SPLIT=$1 "$gmlx" bench "$model" -p $P1 -n $N1 --warmup 0 --turn $P2 --turn-n $N2 -t $T >"$log" 2>&1 ||
    { echo "turn-split.sh: gmlx bench failed:" >&2; tail -5 "$log" >&2; exit 1; }
  sed -n 's/^bench-turn: .*prefill_tok_s=\([0-9.]*\) .*decode_tok_s=\([0-9.]*\) through_arena=\([a-z]*\) gb_read=\([0-9.]*\).*/\1 \2 \3 \4/p' "$log"
}
llama_run() { # -> "prefill_tok_s decode_tok_s"
  local pp tg
  drop
  "$llama" -m "$model" -t $T -r 1 -o jsonl --no-warmup -p $P2 -n 0 -d $((P1 + N1)) >"$log" 2>/dev/null ||
    { echo "turn-split.sh: llama-bench failed" >&2; exit 1; }
  pp=$(sed -n 's/.*"avg_ts": \([0-9.]*\).*/\1/p' "$log" | tail -1)
  drop
  "$llama" -m "$model" -t $T -r 1 -o jsonl --no-warmup -p 0 -n $N2 -d $((P1 + N1)) >"$log" 2>/dev/null ||
    { echo "turn-split.sh: llama-bench failed" >&2; exit 1; }
  tg=$(sed -n 's/.*"avg_ts": \([0-9.]*\).*/\1/p' "$log" | tail -1)
  printf '%.2f %.2f\n' "$pp" "$tg"
}
rows=()
for r in $(seq 1 "$rounds"); do
  for split in 256 0; do
    res=$(gmlx_run $split)
    echo "round $r gmlx split=$split: $res"
    rows+=("| $r | gmlx, split $([ $split = 0 ] && echo off || echo on) | $(echo "$res" | awk '{ printf "%s | %s | %s | %s", $1, $2, $3, $4 }') |")
  done
  if [ -x "$llama" ]; then
    res=$(llama_run)
    echo "round $r llama.cpp: $res"
    rows+=("| $r | llama.cpp (-d $((P1 + N1))) | $(echo "$res" | awk '{ printf "%s | %s | - | -", $1, $2 }') |")
  fi
done
{
  echo "Second turn of $P2 tokens after $P1 prompt + $N1 decoded, then $N2 decoded; $(basename "$model"), $T threads, cold"
  echo
  echo "| round | engine | turn prefill tok/s | decode tok/s after | through the arena | GB read in the prefill |"
  echo "| --- | --- | --- | --- | --- | --- |"
  printf '%s\n' "${rows[@]}"
} | tee ${out:+"$out"}
