#!/usr/bin/env bash
# gmlx against llama.cpp on the same GGUF file, measured side by side in one run: prefill of
# P tokens and decode of N tokens after them, on T threads, in alternated rounds (gmlx, then
# llama.cpp), with the ratio gmlx / llama.cpp of the medians.
#   gmlx:      gmlx bench MODEL -p P -n N+2 --warmup 2 -t T   (decode continues after the prompt;
#              with --cold: -n N --warmup 0, every decode token timed, as llama-bench's)
#   llama.cpp: llama-bench -m MODEL -p P -n 0 -t T -r 1 -o jsonl          (prefill)
#              llama-bench -m MODEL -p 0 -n N -d P -t T -r 1 -o jsonl     (decode at depth P)
# llama.cpp keeps its defaults (mmap, f16 KV cache, flash attention auto; weight repacking as
# built: for a file larger than RAM use the build of build-llamacpp.sh --no-repack, since
# repacking copies the weights into memory); gmlx keeps its own (experts streamed when the file
# is over the memory budget).
# --cold drops the page cache before every program run (root needed) and runs llama-bench
# without its warm-up pass and gmlx without warm-up tokens, so both start from the disk and
# count every decode token: the comparison for files larger than RAM. Without it both run warm (llama-bench's warm-up pass; gmlx after a first untimed run).
#
# Usage: bench/llamacpp/side-by-side.sh MODEL [-p P] [-n N] [-t T] [--rounds R] [--cold]
#            [--llama-bench PATH] [--gmlx PATH] [--gmlx-arg A]... [--llama-arg A]... [--out FILE.md]
#   --llama-bench  llama-bench to run (default $LLAMA_BENCH, else the one
#                  bench/llamacpp/build-llamacpp.sh builds in /var/tmp/gmlx-llamacpp)
#   --gmlx         gmlx to run (default $GMLX_BIN, else build/release/bin/gmlx)
# Prints one line per program run and a markdown table (also written to --out).
set -euo pipefail
usage="usage: side-by-side.sh MODEL [-p P] [-n N] [-t T] [--rounds R] [--cold] [--llama-bench PATH] [--gmlx PATH] [--gmlx-arg A]... [--llama-arg A]... [--out FILE]"
case "${1:-}" in
  -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
  ''|-*) echo "$usage" >&2; exit 2 ;;
esac
root=$(cd "$(dirname "$0")/../.." && pwd)
gmlx=${GMLX_BIN:-$root/build/release/bin/gmlx}
model=$1; shift
P=512 N=64 T=2 rounds=3 cold=0 out="" llama=${LLAMA_BENCH:-/var/tmp/gmlx-llamacpp/build/bin/llama-bench}
gargs=() largs=()
while [ $# -gt 0 ]; do
  case "$1" in
    -p) P=${2:?}; shift 2 ;;
    -n) N=${2:?}; shift 2 ;;
    -t) T=${2:?}; shift 2 ;;
    --rounds) rounds=${2:?}; shift 2 ;;
    --cold) cold=1; shift ;;
    --llama-bench) llama=${2:?}; shift 2 ;;
    --gmlx) gmlx=${2:?}; shift 2 ;;
    --gmlx-arg) gargs+=("${2:?}"); shift 2 ;;
    --llama-arg) largs+=("${2:?}"); shift 2 ;;
    --out) out=${2:?}; shift 2 ;;
    *) echo "side-by-side.sh: unknown option $1" >&2; echo "$usage" >&2; exit 2 ;;
  esac
done
for v in "$P" "$N" "$T" "$rounds"; do
  [[ "$v" =~ ^[0-9]+$ ]] || { echo "side-by-side.sh: '$v' is not a count" >&2; exit 2; }
done
[ "$N" -gt 0 ] && [ "$rounds" -gt 0 ] || { echo "side-by-side.sh: -n and --rounds must be at least 1" >&2; exit 2; }
[ -f "$model" ] || { echo "side-by-side.sh: no model $model" >&2; exit 2; }
[ -x "$gmlx" ] || { echo "side-by-side.sh: no $gmlx (make build)" >&2; exit 2; }
[ -x "$llama" ] || { echo "side-by-side.sh: no llama-bench at $llama (bench/llamacpp/build-llamacpp.sh, or --llama-bench PATH)" >&2; exit 2; }
if [ "$cold" = 1 ] && [ "$(id -u)" -ne 0 ]; then
  echo "side-by-side.sh: --cold needs root to drop the page cache" >&2; exit 2
fi

drop() { if [ "$cold" = 1 ]; then sync; echo 3 > /proc/sys/vm/drop_caches; fi; }
log=$(mktemp /tmp/gmlx-side-by-side.XXXXXX)
trap 'rm -f "$log"' EXIT
warm=(); [ "$cold" = 1 ] && warm=(--no-warmup)
gn=(-n $((N + 2)) --warmup 2); [ "$cold" = 1 ] && gn=(-n "$N" --warmup 0)

gmlx_run() {   # -> "prefill_tok_s decode_tok_s"
  drop
  "$gmlx" bench "$model" -p "$P" "${gn[@]}" -t "$T" "${gargs[@]}" >"$log" 2>&1 ||
    { echo "side-by-side.sh: gmlx bench failed:" >&2; tail -5 "$log" >&2; exit 1; }
  grep '^\[gpu\]' "$log" >&2 || true   # what a --gpu run placed on the device, and its exit lines
  sed -n 's/.*prefill_tok_s=\([0-9.]*\).*decode_tok_s=\([0-9.]*\).*/\1 \2/p' "$log" | tail -1
}
llama_run() {  # ARGS... -> avg tokens/s of the one test
  drop
  "$llama" -m "$model" -t "$T" -r 1 -o jsonl "${warm[@]}" "${largs[@]}" "$@" >"$log" 2>/dev/null ||
    { echo "side-by-side.sh: llama-bench $* failed:" >&2; tail -5 "$log" >&2; exit 1; }
  sed -n 's/.*"avg_ts": \([0-9.]*\).*/\1/p' "$log" | tail -1 | awk '{ printf "%.2f\n", $1 }'
}
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

[ "$cold" = 0 ] && gmlx_run >/dev/null   # reads the file into the page cache once, untimed
gp=() gd=() lp=() ld=()
for r in $(seq 1 "$rounds"); do
  read -r a b < <(gmlx_run)
  gp+=("$a"); gd+=("$b")
  c=0; [ "$P" -gt 0 ] && c=$(llama_run -p "$P" -n 0)
  d=$(llama_run -p 0 -n "$N" -d "$P")
  lp+=("$c"); ld+=("$d")
  echo "round $r: gmlx prefill $a decode $b tok/s; llama.cpp prefill $c decode $d tok/s" >&2
done
mgp=$(median "${gp[@]}") mgd=$(median "${gd[@]}") mlp=$(median "${lp[@]}") mld=$(median "${ld[@]}")
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }'; }
lver=$("$llama" --version 2>&1 | sed -n 's/^version: //p' | head -1)
table=$(cat <<TABLE
$(basename "$model"), -p $P -n $N -t $T, $rounds rounds$([ "$cold" = 1 ] && echo ", each run from a dropped page cache"), $(date -u +%Y-%m-%dT%H:%MZ)

| engine | prefill tok/s (each round) | decode tok/s (each round) | prefill median | decode median |
|---|---|---|---|---|
| gmlx $(git -C "$root" rev-parse --short HEAD 2>/dev/null) | ${gp[*]} | ${gd[*]} | $mgp | $mgd |
| llama.cpp ${lver:-?} | ${lp[*]} | ${ld[*]} | $mlp | $mld |
| gmlx / llama.cpp | | | $(ratio "$mgp" "$mlp") | $(ratio "$mgd" "$mld") |
TABLE
)
echo "$table"
[ -n "$out" ] && echo "$table" > "$out"
exit 0
