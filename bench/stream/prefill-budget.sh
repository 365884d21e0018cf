#!/usr/bin/env bash
# Where a cold prefill's time goes, per prompt length, on a model whose experts stream: for each
# -p N, the page cache is dropped, `gmlx bench -v` runs the prefill, and its [stream] lines give
# the bytes the prefill ring read and the time compute waited for them, the copies that seeded
# the decode arena, and the experts read through the arena (one decode token's reads included);
# what is left is compute and the faults of fresh arena pages. The disk's
# O_DIRECT read rate is measured on the same file first (gmlx-bench-io), so each prefill's share
# of the disk bound (bytes it read / that rate) can be stated.
# Columns: load_s (open, pin, arena), prefill_s, ttft_s (the two: process start to the first
# token's logits), the ring's reads and wait, the experts seeded into the arena and the time the
# copies took, the arena's pages mapped ahead by the idle-priority thread when the run ended,
# arena_GB (experts read through the arena, the first decode token's included), the read rate
# over the prefill, disk_s (those bytes at the disk's rate) and disk% (disk_s / prefill_s).
# Usage: bench/stream/prefill-budget.sh MODEL [PROMPT_LENGTHS...] [GMLX_BENCH_ARGS...]
#        (default lengths 8 32 128 512; arguments that are not numbers go to gmlx bench)
# Needs root (it drops the page cache). Prints one table.
set -euo pipefail
model=${1:?usage: prefill-budget.sh MODEL [PROMPT_LENGTHS...]}
shift
lens=() extra=()
for a in "$@"; do
  case $a in [0-9]*) lens+=("$a") ;; *) extra+=("$a") ;; esac
done
[ ${#lens[@]} -gt 0 ] || lens=(8 32 128 512)
root=$(cd "$(dirname "$0")/../.." && pwd)
gmlx=$root/build/release/bin/gmlx
bio=$root/build/release/bench/io/gmlx-bench-io
drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }
drop
disk=$("$bio" "$model" --size-mb 4 --depth 32 --direct --seconds 5 2>/dev/null | awk -F'|' '/io_uring/ {gsub(/ /, "", $7); print $7}' | head -1)
echo "disk: ${disk:-?} GB/s (gmlx-bench-io, 4 MiB O_DIRECT reads, depth 32)"
printf '%6s %7s %9s %7s %8s %9s %9s %7s %9s %9s %9s %8s %7s\n' prompt load_s prefill_s ttft_s ring_GB ring_wait seeded_GB seed_s mapped_GB arena_GB read_GB/s disk_s disk%
for n in "${lens[@]}"; do
  drop
  out=$("$gmlx" bench "$model" -p "$n" -n 1 --warmup 0 "${extra[@]}" 2>&1)
  num() { grep -o "$1" <<<"$out" | grep -o '[0-9.]*' | head -1 || true; }
  pre=$(grep -o 'prefill_tok_s=[0-9.]*' <<<"$out" | cut -d= -f2)
  load=$(grep -o 'load_s=[0-9.]*' <<<"$out" | cut -d= -f2)
  ring=$(grep -o 'prefill ring: [0-9]* layers.*' <<<"$out" | grep -o '[0-9.]* GB read' | grep -o '[0-9.]*' || true)
  wait=$(grep -o 'prefill ring: [0-9]* layers.*' <<<"$out" | grep -o 'waited [0-9.]*' | grep -o '[0-9.]*' || true)
  seeded=$(grep -o 'seeded the decode arena .*' <<<"$out" | grep -o '([0-9.]* GB' | grep -o '[0-9.]*' || true)
  seed=$(grep -o 'seeded the decode arena .*' <<<"$out" | grep -o 'copied in [0-9.]*' | grep -o '[0-9.]*' || true)
  mapped=$(grep -o 'decode arena: [0-9.]* GB of' <<<"$out" | grep -o '[0-9.]*' || true)
  arena=$(num '\[stream\] read [0-9.]* GB')
  python3 - "$n" "$pre" "${load:-0}" "${ring:-0}" "${wait:-0}" "${seeded:-0}" "${seed:-0}" "${mapped:-0}" "${arena:-0}" "${disk:-0}" <<'PY'
import sys
n = int(sys.argv[1])
pre_tok_s, load, ring, wait, seeded, seed, mapped, arena, disk = map(float, sys.argv[2:])
pre = n / pre_tok_s if pre_tok_s else 0
read = ring + arena
disk_s = read / disk if disk else 0
print(f"{n:>6} {load:7.2f} {pre:9.2f} {load + pre:7.2f} {ring:8.2f} {wait:9.2f} {seeded:9.2f} {seed:7.2f} "
      f"{mapped:9.2f} {arena:9.2f} {read / pre if pre else 0:9.2f} {disk_s:8.2f} {100 * disk_s / pre if pre else 0:6.0f}%")
PY
done
