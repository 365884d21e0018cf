#!/bin/bash
# Loads in a memory cgroup with a small limit (2.5 GiB) end as an error, never as an
# out-of-memory kill: a model whose every-token weights and KV room exceed the ceiling the limit
# gives is refused with "cannot fit:" before anything is pinned; with GMLX_OVERCOMMIT=1 and most
# of the cgroup's memory taken by another process, the pin is refused because the memory
# available now cannot hold it; a small model still runs there.
# Needs root and a writable memory cgroup (v2, or v1 on hybrid hosts); exits 77 (skipped) when
# none can be made. Usage: cgroup.sh GMLX_BINARY FIXTURES_DIR GMLX_GEN
set -u
GMLX=$1
FIX=$2
GEN=$3
MODEL=$FIX/trained-qwen3moe/model-q4_k_m.gguf
TMP=$(mktemp -d)
CG=""
cleanup() {
  [ -n "$CG" ] && [ -d "$CG" ] && { cat "$CG/cgroup.procs" 2>/dev/null | xargs -r kill 2>/dev/null; sleep 0.2; rmdir "$CG"; }
  rm -rf "$TMP"
}
trap cleanup EXIT
limit=$((2560 * 1024 * 1024))
if [ -w /sys/fs/cgroup/cgroup.subtree_control ] && grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null &&
   mkdir "/sys/fs/cgroup/gmlx-test-$$" 2>/dev/null; then
  CG=/sys/fs/cgroup/gmlx-test-$$
  echo "$limit" >"$CG/memory.max" && echo 0 >"$CG/memory.swap.max" 2>/dev/null
elif [ -d /sys/fs/cgroup/memory ] && mkdir "/sys/fs/cgroup/memory/gmlx-test-$$" 2>/dev/null; then
  CG=/sys/fs/cgroup/memory/gmlx-test-$$
  echo "$limit" >"$CG/memory.limit_in_bytes"
else
  echo "cgroup.sh: no writable memory cgroup here (needs root); skipped"
  exit 77
fi
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
# in_cg STATUS DESCRIPTION -- command...: runs it inside the cgroup
in_cg() {
  local want=$1 what=$2
  shift 3
  sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$CG" "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  [ "$rc" -eq "$want" ] && ok || { bad "$what: exit $rc, wanted $want"; sed 's/^/    /' "$TMP/err" | head -5; }
}
has() { grep -q -- "$2" "$1" && ok || { bad "$3: no '$2'"; sed 's/^/    /' "$1" | head -5; }; }

# 566 MB of every-token weights (a 64000-token vocabulary of 2048 in F16, in and out)
"$GEN" --arch qwen3moe --layers 2 --experts 16 --experts-used 2 --hidden 2048 --ffn 2048 --expert-ffn 1024 \
  --heads 16 --kv-heads 4 --head-dim 128 --vocab 64000 --dense-type F16 -q -o "$TMP/big.gguf" >/dev/null ||
  { echo "cgroup.sh: gmlx-gen failed"; exit 1; }

in_cg 0 "a small model in the cgroup" -- "$GMLX" run "$MODEL" --temp 0 -n 48 -p "Extract name and city: In Dublin, Paula turned 54."
[ "$(cat "$TMP/out")" = '{"name": "Paula", "city": "Dublin"}' ] && ok || bad "small model output: $(cat "$TMP/out")"
in_cg 2 "every-token weights past the ceiling" -- "$GMLX" run "$TMP/big.gguf" --stream-experts -p hi -n 2
has "$TMP/err" "cannot fit: every-token weights .* exceed the .* ceiling" "the seed's cannot fit: wording"
in_cg 2 "the automatic placement too" -- "$GMLX" chat "$TMP/big.gguf" --chat-template-file /dev/null
has "$TMP/err" "cannot fit:" "chat refuses the same way"
# most of the cgroup taken by another process: the memory available now cannot hold the pin
sh -c 'echo $$ >"$0/cgroup.procs" && exec python3 -c "
import sys, time
b = bytearray(1900 * 1024 * 1024)
for i in range(0, len(b), 4096):
    b[i] = 1
open(sys.argv[1], \"w\").close()
time.sleep(120)" "$1"' "$CG" "$TMP/hog.ready" &
hog=$!
for _ in $(seq 1 300); do [ -e "$TMP/hog.ready" ] && break; sleep 0.1; done
if [ -e "$TMP/hog.ready" ]; then
  GMLX_OVERCOMMIT=1 in_cg 2 "a pin past the memory available now" -- "$GMLX" run "$TMP/big.gguf" --stream-experts -p hi -n 2
  has "$TMP/err" "cannot fit: .* more than the .* of memory available now" "available-now message"
else
  bad "the memory hog did not start"
fi
kill "$hog" 2>/dev/null
wait "$hog" 2>/dev/null

# doctor judges each entry against the cgroup's memory: the small model runs, a 41.6 GB
# Qwen3-235B shape (a sparse file: only its header is read) with stream: experts cannot stream
"$GEN" --preset qwen3-235b-a22b --layers 28 --sparse -q -o "$TMP/q235.gguf" >/dev/null ||
  { echo "cgroup.sh: gmlx-gen --sparse failed"; exit 1; }
printf 'models:\n  tiny:\n    path: %s\n  q235:\n    path: %s\n    stream: experts\n' "$MODEL" "$TMP/q235.gguf" >"$TMP/doc.yaml"
in_cg 1 "doctor in the cgroup" -- "$GMLX" doctor --config "$TMP/doc.yaml" --no-drive-test
has "$TMP/out" "FAIL  stream .*q235 (stream: experts) cannot run on this machine" "doctor: the 40 GB entry cannot stream in the cgroup"
grep -q "FAIL  stream .*tiny" "$TMP/out" && bad "doctor: the small model flagged in the cgroup" || ok
has "$TMP/out" "PASS  models" "doctor: both files present"

echo "cgroup: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
