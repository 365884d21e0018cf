#!/bin/bash
# gmlx pull --list: each curated model is judged from its stored header exactly as gmlx validate
# judges the file. For files whose verdicts differ (the bundled model, and header-only files of
# real shapes written by gmlx-gen --sparse) at three machine sizes, the heading pull --list --json
# gives each entry equals the verdict validate --json gives the file itself. Then the committed
# catalog is read, gmlx-catalog refresh re-reads an entry from a hub (the test server) and writes
# the same header strip writes from the file, and gmlx pull NAME downloads an entry by its name.
# Usage: catalog.sh GMLX FIXTURES GMLX_GEN GMLX_CATALOG_TOOL
set -u
GMLX=$1 FIX=$2 GEN=$3 CAT=$4
HERE=$(cd "$(dirname "$0")" && pwd)
MODEL=$FIX/trained-qwen3moe/model-q4_k_m.gguf
[ -f "$MODEL" ] || { echo "catalog.sh: no fixture $MODEL"; exit 1; }
command -v python3 >/dev/null || { echo "catalog.sh: python3 is missing; skipped"; exit 77; }
TMP=$(mktemp -d)
SRV_PID=
trap '[ -n "$SRV_PID" ] && kill "$SRV_PID" 2>/dev/null; rm -rf "$TMP"' EXIT
export HOME=$TMP/home XDG_CONFIG_HOME= GMLX_CONFIG= GMLX_CATALOG=$TMP/cat
mkdir -p "$HOME" "$TMP/cat" "$TMP/files"
fails=0 n=0
ok() { n=$((n + 1)); }
bad() { n=$((n + 1)); fails=$((fails + 1)); echo "FAIL: $*"; }

# the files: the bundled model and three real shapes as headers over holes
cp "$MODEL" "$TMP/files/tiny.gguf"
for p in gpt-oss-20b qwen3-235b-a22b glm-4.5; do
  "$GEN" --preset "$p" --sparse -q -o "$TMP/files/$p.gguf" >/dev/null 2>&1 || { echo "catalog.sh: gmlx-gen $p failed"; exit 1; }
done
printf '# test catalog\n' >"$TMP/cat/catalog.tsv"
for f in "$TMP"/files/*.gguf; do
  name=$(basename "$f" .gguf)
  size=$("$CAT" strip "$f" "$TMP/cat/$name.hdr") || { bad "strip $name"; continue; }
  [ "$size" = "$(stat -c %s "$f")" ] && ok || bad "strip $name: size $size, the file has $(stat -c %s "$f")"
  # the header lost the vocabulary's strings, so it is far smaller than the file's header
  printf '%s\thf://test/models/%s.gguf\t%s\t%s.hdr\ttest\n' "$name" "$name" "$size" "$name" >>"$TMP/cat/catalog.tsv"
done

# validate's verdict -> the heading pull --list must give
group_of() {
  python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
v = d["stream"]["verdict"]
if not d["runnable"] or v == "cannot-stream": print("cannot-run")
elif v in ("streams", "no-arena"): print("streams")
else: print("fits")' "$1"
}
for ram in 8 24 128; do
  GMLX_RAM_GB=$ram GMLX_AVAIL_GB=$ram "$GMLX" pull --list --json >"$TMP/list.json" 2>"$TMP/err" ||
    { bad "pull --list at $ram GiB: $(head -3 "$TMP/err")"; continue; }
  for f in "$TMP"/files/*.gguf; do
    name=$(basename "$f" .gguf)
    GMLX_RAM_GB=$ram GMLX_AVAIL_GB=$ram "$GMLX" validate --json "$f" >"$TMP/v.json" 2>/dev/null
    want=$(group_of "$TMP/v.json")
    got=$(python3 -c 'import json,sys; print([e["group"] for e in json.load(open(sys.argv[1])) if e["name"] == sys.argv[2]][0])' "$TMP/list.json" "$name")
    [ "$want" = "$got" ] && ok || bad "$name at $ram GiB: pull --list says $got, validate says $want"
    wl=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["stream"]["verdict_line"])' "$TMP/v.json")
    gl=$(python3 -c 'import json,sys; print([e["verdict_line"] for e in json.load(open(sys.argv[1])) if e["name"] == sys.argv[2]][0])' "$TMP/list.json" "$name")
    [ "$wl" = "$gl" ] && ok || bad "$name at $ram GiB: verdict lines differ: '$gl' / '$wl'"
  done
done
# the three headings are all reached across the sizes (the check above is not vacuous)
GMLX_RAM_GB=24 GMLX_AVAIL_GB=24 "$GMLX" pull --list >"$TMP/list.txt" 2>&1
for h in "fits in RAM:" "streams from the SSD on this machine:" "cannot run here:"; do
  grep -q "^$h" "$TMP/list.txt" && ok || bad "no heading '$h'"
done
grep -A1 "^fits in RAM:" "$TMP/list.txt" | grep -q "gpt-oss-20b" && ok || bad "gpt-oss-20b fits at 24 GiB: $(cat "$TMP/list.txt")"
grep -A2 "^streams from the SSD" "$TMP/list.txt" | grep -q "qwen3-235b-a22b" && ok || bad "qwen3-235b streams at 24 GiB"
grep -A2 "^cannot run here:" "$TMP/list.txt" | grep -q "glm-4.5" && ok || bad "glm-4.5 cannot run at 24 GiB"

# the committed catalog reads and every entry has a heading
GMLX_CATALOG= "$GMLX" pull --list --json >"$TMP/real.json" 2>"$TMP/err" && ok || bad "the committed catalog: $(head -3 "$TMP/err")"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert len(d) >= 8 and all(e["group"] in ("fits","streams","cannot-run") for e in d)' "$TMP/real.json" &&
  ok || bad "the committed catalog's entries"
# a broken catalog line names its line
printf 'x\tref\tnot-a-number\tx.hdr\tsrc\n' >>"$TMP/cat/catalog.tsv"
"$GMLX" pull --list >/dev/null 2>"$TMP/err"
[ $? -eq 2 ] && grep -q "catalog.tsv:[0-9]*:" "$TMP/err" && ok || bad "a bad catalog line: $(cat "$TMP/err")"
sed -i '$d' "$TMP/cat/catalog.tsv"

# refresh from a hub, and pull by name
mkdir -p "$TMP/hub/test/models"
cp "$MODEL" "$TMP/hub/test/models/tiny.gguf"
python3 "$HERE/hubserver.py" --root "$TMP/hub" --port 0 --port-file "$TMP/port" --max-seconds 120 >"$TMP/srv.log" 2>&1 &
SRV_PID=$!
for _ in $(seq 100); do [ -s "$TMP/port" ] && break; sleep 0.1; done
[ -s "$TMP/port" ] || { echo "catalog.sh: the test hub did not start"; cat "$TMP/srv.log"; exit 1; }
export HF_ENDPOINT=http://127.0.0.1:$(cat "$TMP/port")
cp "$TMP/cat/tiny.hdr" "$TMP/tiny.want"
: >"$TMP/cat/tiny.hdr"
sed -i 's/^\(tiny\t[^\t]*\t\)[0-9]*/\1123/' "$TMP/cat/catalog.tsv"
"$CAT" refresh "$TMP/cat/catalog.tsv" tiny 2>"$TMP/err" && ok || bad "refresh: $(cat "$TMP/err")"
cmp -s "$TMP/cat/tiny.hdr" "$TMP/tiny.want" && ok || bad "refresh wrote another header than strip"
grep -q "^tiny	hf://test/models/tiny.gguf	$(stat -c %s "$MODEL")	tiny.hdr	hub header " "$TMP/cat/catalog.tsv" &&
  ok || bad "refresh's line: $(grep '^tiny' "$TMP/cat/catalog.tsv")"
grep -q "^glm-4.5	hf://test/models/glm-4.5.gguf	" "$TMP/cat/catalog.tsv" && ok || bad "refresh NAME kept the other entries"
"$GMLX" pull tiny --dir "$TMP/dl" --no-register >"$TMP/out" 2>"$TMP/err" && ok || bad "pull NAME: $(cat "$TMP/err")"
grep -q "\[resolved\] tiny -> hf://test/models/tiny.gguf" "$TMP/err" && ok || bad "pull NAME says what it resolved to"
cmp -s "$TMP/dl/tiny.gguf" "$MODEL" && ok || bad "pull NAME's file"

echo "catalog: $((n - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
