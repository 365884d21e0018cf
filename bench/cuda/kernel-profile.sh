#!/usr/bin/env bash
# Where a decode layer's device time goes, kernel by kernel: Nsight Compute's duration of every
# kernel of a short `gmlx bench --gpu` (PROMPT prompt tokens, default 16, then 16 decoded) on the
# Qwen3-235B shape cut to LAYERS blocks (default 4: every layer's shapes, 7 GB): per kernel and
# launch shape its calls and mean, least and most microseconds, the largest total first (a prompt
# of 512 shows its chunk's kernels). On a GPU machine with ncu (the
# device tool's have it; the clocks are left alone). It found the attention kernels' stack frame
# (docs/dev/performance-history.md, 2026-12-06).
#   bench/cuda/kernel-profile.sh BIN_DIR [LIB_DIR [LAYERS [PROMPT]]]   (BIN_DIR, LIB_DIR as for gpu-check.sh)
set -uo pipefail
case "${1:-}" in -h|--help|'') sed -n '2,9p' "$0"; exit 0 ;; esac
BIN=$1
LIB=${2:-}
LAYERS=${3:-4}
PROMPT=${4:-16}
F=/tmp/gmlx-kernel-profile-$LAYERS.gguf
source "$(dirname "$0")/bin-env.sh"
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "kernel-profile.sh: no ncu (Nsight Compute) on this machine" >&2; exit 1; }
[ -f "$F" ] || x gmlx-gen --preset qwen3-235b-a22b --layers "$LAYERS" --skew 0.7 --seed 7 -o "$F" ||
  exit 1
csv=$(mktemp)
trap 'rm -f "$csv"' EXIT
"$NCU" --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel --csv \
  "${gm_loader[@]}" "$BIN/gmlx" bench "$F" -p "$PROMPT" -n 16 --warmup 0 -t "$(nproc)" --gpu >"$csv" 2>/dev/null ||
  { echo "kernel-profile.sh: ncu failed" >&2; exit 1; }
python3 - "$csv" <<'EOF'
import csv, sys
lines = open(sys.argv[1]).read().splitlines()
start = next(i for i, l in enumerate(lines) if l.startswith('"Process ID"'))
rows = []
for r in csv.DictReader(lines[start:]):
    num = lambda k: float(r[k].replace(',', ''))
    rows.append((r['Kernel Name'].split('(')[0][:48], r['Grid Size'], int(r['Invocations']),
                 num('Average') / 1000, num('Minimum') / 1000, num('Maximum') / 1000))
print(f"{'kernel':48} {'grid':>14} {'calls':>6} {'avg us':>9} {'min':>9} {'max':>9}")
for name, grid, n, avg, lo, hi in sorted(rows, key=lambda x: -x[2] * x[3]):
    print(f"{name:48} {grid:>14} {n:6d} {avg:9.1f} {lo:9.1f} {hi:9.1f}")
EOF
