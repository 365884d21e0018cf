#!/usr/bin/env bash
# Where a cold prefill's time goes, per prompt length, on a model whose experts stream: for each
# -p N, the page cache is dropped, `gmlx bench -v` runs the prefill, and its [stream] lines give
# the bytes the prefill ring read and the time compute waited for them, the copies that seeded
# the decode arena, and the experts read through the arena (one decode token's reads included);
# what is left is compute and the faults of fresh arena pages. The disk's
# O_DIRECT read rate is measured on the same file first (gmlx-bench-io), so each prefill's share
# of the disk bound (bytes it read / that rate) can be stated.
# Usage: bench/stream/prefill-budget.sh MODEL [PROMPT_LENGTHS...]   (default 8 32 128 512)
# Needs root (it drops the page cache). Prints one table.
set -euo pipefail
model=${1:?usage: prefill-budget.sh MODEL [PROMPT_LENGTHS...]}
shift
lens=("$@")
[ ${#lens[@]} -gt 0 ] || lens=(8 32 128 512)
root=$(cd "$(dirname "$0")/../.." && pwd)
gmlx=$root/build/release/bin/gmlx
bio=$root/build/release/bench/io/gmlx-bench-io
drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }
drop
disk=$("$bio" "$model" --size-mb 4 --depth 32 --direct --seconds 5 2>/dev/null | awk -F'|' '/io_uring/ {gsub(/ /, "", $7); print $7}' | head -1)
echo "disk: ${disk:-?} GB/s (gmlx-bench-io, 4 MiB O_DIRECT reads, depth 32)"
printf '%6s %9s %8s %9s %8s %9s %9s %9s %8s\n' prompt prefill_s ring_GB ring_wait seed_s arena_GB compute_s read_GB/s bound%
for n in "${lens[@]}"; do
  drop
  out=$("$gmlx" bench "$model" -p "$n" -n 1 --warmup 0 2>&1)
  pre=$(grep -o 'prefill_tok_s=[0-9.]*' <<<"$out" | cut -d= -f2)
  pre_s=$(python3 -c "print(f'{$n / $pre:.2f}')")
  ring=$(grep -o 'prefill ring: .*' <<<"$out" | grep -o '[0-9.]* GB read' | grep -o '[0-9.]*' || echo 0)
  wait=$(grep -o 'prefill ring: .*' <<<"$out" | grep -o 'waited [0-9.]*' | grep -o '[0-9.]*' || echo 0)
  seed=$(grep -o 'seeded the decode arena .*' <<<"$out" | grep -o 'copied in [0-9.]*' | grep -o '[0-9.]*' || echo 0)
  arena=$(grep -o '\[stream\] read [0-9.]* GB' <<<"$out" | grep -o '[0-9.]*' || echo 0)
  python3 - "$n" "$pre_s" "$ring" "$wait" "$seed" "$arena" "${disk:-0}" <<'PY'
import sys
n, pre, ring, wait, seed, arena, disk = sys.argv[1], *map(float, sys.argv[2:])
read = ring + arena
compute = pre - wait - seed
rate = read / pre if pre else 0
bound = read / disk if disk else 0
print(f"{n:>6} {pre:9.2f} {ring:8.2f} {wait:9.2f} {seed:8.2f} {arena:9.2f} {compute:9.2f} {rate:9.2f} "
      f"{100 * bound / pre if pre else 0:7.0f}%")
PY
done
