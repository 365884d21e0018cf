#!/bin/sh
# Command-line tests of gmlx-replay: exit statuses, the table, and messages that name the bad
# line. Usage: test_cli.sh GMLX_REPLAY_BINARY
set -u
BIN=$1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail=0

# expect STATUS PATTERN -- command...: the exit status, and PATTERN in stdout+stderr.
expect() {
  want=$1 pat=$2
  shift 3
  "$@" >"$TMP/out" 2>&1
  rc=$?
  if [ "$rc" -ne "$want" ]; then
    echo "FAIL: $*: exit $rc, wanted $want"; sed 's/^/    /' "$TMP/out" | head -5; fail=1
  elif ! grep -q -- "$pat" "$TMP/out"; then
    echo "FAIL: $*: no '$pat' in the output"; sed 's/^/    /' "$TMP/out" | head -8; fail=1
  fi
}

# Layer 3 routes 0 0 0 1 2 1 2 0 1 2, layer 5 routes 7 every token (see test_policy_replay.c:
# with 2 slots LRU 13, LFU 12, Belady 14 hits of 20).
i=0
for e in 0 0 0 1 2 1 2 0 1 2; do
  printf '%d 3 %d\n%d 5 7\n' $i $e $i >>"$TMP/t.txt"
  i=$((i + 1))
done
expect 0 "usage: gmlx-replay" -- "$BIN" --help
expect 0 "2 MoE layers (L3..L5)" -- "$BIN" "$TMP/t.txt" --slots 2
expect 0 "LRU       65.00%  13 of 20" -- "$BIN" "$TMP/t.txt" --slots 2 --halve-every 0
expect 0 "LFU       60.00%  12 of 20" -- "$BIN" "$TMP/t.txt" --slots 2
expect 0 "Belady    70.00%  14 of 20" -- "$BIN" "$TMP/t.txt" --slots 2
# Static keeps experts 0 (4 uses) and 1 (3; ties to the lower id) in layer 3 and 7 in layer 5:
# 3 + 2 + 9 hits after their first loads
expect 0 "Static    70.00%  14 of 20" -- "$BIN" "$TMP/t.txt" --slots 2
expect 0 "LFU - Static -10.00" -- "$BIN" "$TMP/t.txt" --slots 2 --halve-every 0
expect 0 "LFU - Belady -10.00 points" -- "$BIN" "$TMP/t.txt" --slots 2
expect 0 "LFU       55.00%  11 of 20" -- "$BIN" "$TMP/t.txt" --slots 2 --halve-every 4
expect 0 "          3  Belady" -- "$BIN" "$TMP/t.txt" --sweep 1,2,3
printf '3 2\n5 1\n' >"$TMP/slots.txt"
expect 0 "  from file  Belady    70.00%" -- "$BIN" "$TMP/t.txt" --slots-per-layer-from "$TMP/slots.txt"
printf '3 2\n' >"$TMP/slots3.txt"
expect 2 "names no slots for layer 5" -- "$BIN" "$TMP/t.txt" --slots-per-layer-from "$TMP/slots3.txt"
expect 0 "Belady    70.00%" -- "$BIN" "$TMP/t.txt" --slots-per-layer-from "$TMP/slots3.txt" --slots 1
printf '3 x\n' >"$TMP/slotsbad.txt"
expect 2 "slotsbad.txt:1: expected 'LAYER SLOTS'" -- "$BIN" "$TMP/t.txt" --slots-per-layer-from "$TMP/slotsbad.txt"

# Bad input: exit 2 and the line number.
printf '0 1 4 5\n0 2 4 x\n' >"$TMP/bad1.txt"
expect 2 "bad1.txt:2: the expert id 'x'" -- "$BIN" "$TMP/bad1.txt" --slots 4
printf '0 1 4 5\n0 2 4 6\n0 1 4 6\n' >"$TMP/bad2.txt"
expect 2 "bad2.txt:3: layer 1 out of order" -- "$BIN" "$TMP/bad2.txt" --slots 4
printf '0 1 4 5\n1 1 4\n' >"$TMP/bad3.txt"
expect 2 "bad3.txt:2: 1 expert ids where earlier lines have 2" -- "$BIN" "$TMP/bad3.txt" --slots 4
expect 0 "1..2 experts per call" -- "$BIN" "$TMP/bad3.txt" --slots 4 --varying-k
printf '0 1 4 5\n' >"$TMP/k2.txt"
expect 2 "layer 1: 1 slots cannot hold the 2 experts" -- "$BIN" "$TMP/k2.txt" --slots 1
expect 2 "cannot open" -- "$BIN" "$TMP/missing.txt" --slots 4

# Bad usage: exit 2.
expect 2 "no trace file" -- "$BIN"
expect 2 "give --slots N" -- "$BIN" "$TMP/t.txt"
expect 2 "unknown option" -- "$BIN" "$TMP/t.txt" --slot 2
expect 2 "at least 1" -- "$BIN" "$TMP/t.txt" --slots 0
expect 2 "at least 1" -- "$BIN" "$TMP/t.txt" --sweep 2,,x
expect 2 "replaces" -- "$BIN" "$TMP/t.txt" --sweep 2 --slots 2
expect 2 "halve-every" -- "$BIN" "$TMP/t.txt" --slots 2 --halve-every -1

[ "$fail" -eq 0 ] && echo "replay_cli: all passed"
exit "$fail"
