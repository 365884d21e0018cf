#!/usr/bin/env bash
# Streaming benchmark: decode speed of a model larger than RAM with --stream-experts against
# --stream-cpu (the whole model through the page cache), in alternated runs with the same seed.
# Each run starts from a dropped page cache (root needed) and reports the cold figure (tokens 3
# to N) and a steady-state figure (N tokens after a warm-up of W tokens), with the arena hit rate,
# GB read from the disk per token (/proc/vmstat pgpgin) and the feeder's stall time.
# First it measures the disk's own limit (gmlx-bench-io: O_DIRECT random reads of one expert
# slice at the feeder's queue depth); for --stream-experts it then prints the tokens/s bound that
# the steady run's GB per token, that disk rate and the steady run's compute time per token
# (wall time not stalled on reads) imply, 1 / max(GB / disk, compute), and the share reached.
# The disk is measured again right before each --stream-experts round (a shared machine's disk
# varies by 2x from minute to minute), and each round's bound uses its own measurement.
#
# Usage: bench/stream/bench-stream.sh MODEL [--rounds R] [--tokens N] [--warmup W] [-t T]
#                                     [--hold GIB] [--out FILE.md]
#   --hold GIB  run with GIB held by gmlx-memhog (a machine with less memory left)
# Prints a markdown table (and writes it to --out). Needs build/release (make build).
set -euo pipefail
case "${1:-}" in
  -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
esac
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=$root/build/release/bin
model=${1:?usage: bench-stream.sh MODEL [--rounds R] [--tokens N] [--warmup W] [-t T] [--hold GIB] [--out FILE]}
shift
rounds=3 tokens=32 warmup=64 threads=2 hold=0 out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    --hold) hold=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "bench-stream.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -f "$model" ] || { echo "bench-stream.sh: no model $model" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "bench-stream.sh: needs root to drop the page cache" >&2; exit 2; }

hog_pid=""
cleanup() { [ -n "$hog_pid" ] && kill "$hog_pid" 2>/dev/null || true; }
trap cleanup EXIT
if [ "$hold" != 0 ]; then
  "$root/build/release/bench/gmlx-memhog" "$hold" > /tmp/gmlx-memhog.out &
  hog_pid=$!
  for _ in $(seq 1 120); do grep -q held /tmp/gmlx-memhog.out 2>/dev/null && break; sleep 1; done
  cat /tmp/gmlx-memhog.out
fi

pgpgin() { awk '/^pgpgin /{print $2}' /proc/vmstat; }   # KiB read from block devices
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" "$2" | head -1; }

# the disk's limit at the expert slice size (the largest slice of the first MoE layer)
slice_mb=$("$bin/gmlx" inspect "$model" 2>/dev/null | awk -F'\t' '/^blk\.[0-9]+\.ffn_(gate|up|down)_exps/ {
  n = split($3, d, /[][, ]+/); e = d[n-1]; if (e > 0 && $4 / e > m) m = $4 / e } END { printf "%d", m / 1048576 + 1 }')
[ -n "$slice_mb" ] && [ "$slice_mb" -gt 0 ] || slice_mb=4
# the disk's O_DIRECT random-read rate now (GB/s); the disk of a shared machine varies from
# minute to minute, so it is measured again before every --stream-experts run
disk_now() {
  sync; echo 3 > /proc/sys/vm/drop_caches
  "$root/build/release/bench/io/gmlx-bench-io" "$model" --size-mb "$slice_mb" --depth 24 --direct \
       --backend uring --seconds 5 2>/dev/null | awk -F'|' '
         /^\| *backend/ { for (i = 1; i <= NF; i++) { h = $i; gsub(/ /, "", h); if (h == "GB/s") c = i } }
         /^\| *io_uring/ && c { v = $c; gsub(/ /, "", v); print v; exit }'
}

# one run: PLACEMENT WARMUP N -> "tok_s hit gb_per_tok stall_ms compute_ms"
one() {
  local place=$1 warm=$2 n=$3 log=/tmp/gmlx-bench-stream.log
  sync
  if ! echo 3 > /proc/sys/vm/drop_caches; then
    echo "bench-stream.sh: cannot drop the page cache (run as root): cold figures would be warm" >&2
    exit 1
  fi
  local before after
  before=$(pgpgin)
  if ! "$bin/gmlx" bench "$model" "--$place" -p 0 -n $((warm + n)) --warmup "$warm" -t "$threads" --seed 7 >"$log" 2>&1; then
    echo "bench-stream.sh: gmlx bench --$place failed:" >&2
    tail -3 "$log" >&2
    exit 1
  fi
  after=$(pgpgin)
  local tps hit stall other gb
  tps=$(field decode_tok_s "$log")
  hit=$(field hit_pct "$log")
  stall=$(field stall_ms_per_tok "$log")
  other=$(field other_ms_per_tok "$log")
  gb=$(field gb_per_tok "$log")
  # the page-cache placement has no feeder: GB per token from /proc/vmstat over the whole run
  # (load and warm-up included: marked with a *)
  [ -n "$gb" ] || gb=$(awk -v a="$before" -v b="$after" -v t=$((warm + n)) 'BEGIN{printf "%.3f*", (b-a)*1024/1e9/t}')
  echo "$tps ${hit:--} $gb ${stall:--} ${other:--}"
}

header="| run | placement | cold tok/s | steady tok/s (after $warmup) | arena hit % | GB read per token | read GB/s (disk GB/s) | stall ms per token | compute ms per token | bound tok/s (share) |"
table="$header
|---|---|---|---|---|---|---|---|---|---|"
disks=""
for r in $(seq 1 "$rounds"); do
  for place in stream-experts stream-cpu; do
    disk=-
    if [ "$place" = stream-experts ]; then
      disk=$(disk_now); disk=${disk:--}
      echo "round $r: O_DIRECT random reads of $slice_mb MB at depth 24: $disk GB/s" >&2
      disks="$disks $disk"
    fi
    # one() runs in a command substitution, whose exit status a here-string drops: check it
    res=$(one "$place" 2 "$tokens") || exit 1
    read -r cold _ _ _ _ <<<"$res"
    res=$(one "$place" "$warmup" "$tokens") || exit 1
    read -r steady hit gb stall other <<<"$res"
    bound=-
    rate=$(awk -v g="${gb%\*}" -v t="$steady" 'BEGIN { printf "%.2f", g * t }')
    case "$gb" in *\*) rate="$rate*" ;; esac
    if [ "$other" != - ] && [ "$disk" != - ]; then
      bound=$(awk -v g="${gb%\*}" -v d="$disk" -v c="$other" -v t="$steady" 'BEGIN {
        ms = g / d * 1000; if (c > ms) ms = c; b = 1000 / ms; printf "%.2f (%.0f%%)", b, 100 * t / b }')
    fi
    row="| $r | --$place | $cold | $steady | $hit | $gb | $rate ($disk) | $stall | $other | $bound |"
    echo "$row" >&2
    table="$table
$row"
  done
done
table="disk: O_DIRECT random reads of $slice_mb MB at depth 24, measured before each --stream-experts round:${disks} GB/s. Steady-run figures cover the timed tokens only; read GB/s = GB per token x steady tok/s. * --stream-cpu has no feeder to count its reads: its GB per token is the kernel's page-in count (/proc/vmstat pgpgin, every process) over the whole run from a dropped cache, load and warm-up tokens included, so it overstates the steady figure and is not comparable with the --stream-experts row.

$table"
echo "$table"
[ -n "$out" ] && echo "$table" > "$out"
exit 0
