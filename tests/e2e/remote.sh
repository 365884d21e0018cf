#!/bin/bash
# Remote models end to end, against tests/e2e/hubserver.py (a stand-in for the Hugging Face hub,
# started here on 127.0.0.1 with a free port; HF_ENDPOINT points gmlx at it).
# validate REF (hf://ORG/REPO/PATH[@REV], ORG/REPO:QUANT, a plain http:// URL): prints what
#   validate prints for the same file on disk (line 1 names the REF; --json likewise in "file")
#   and exits the same; reads only a prefix by range requests (the server's log counts the bytes;
#   a header over 4 MiB makes it read more, --max-mb caps it); a split set validates as a whole;
#   HTTP 404 / 500 / 401 and a file that is not a GGUF fail with exit 2; :QUANT picks the one
#   matching model (recursive listing, case-insensitive), refuses none or several;
#   HF_TOKEN goes to the hub host only.
# pull REF: byte-identical files through NAME.part (every part of a split set); an interrupted
#   download resumes with Range: bytes=HAVE-; a server that ignores Range restarts it; HTTP
#   404 / 500, a stalled transfer (GMLX_HTTP_STALL_S) and a sha256 mismatch fail and never
#   promote a partial file; a file already there is skipped; the hub's redirect to a CDN is
#   followed; the model is registered in the configuration file with the id sync-models gives
#   it (read back with PyYAML) and runs by that id.
# The split set is cut from the fixture by a small GGUF splitter below (gmlx-gen writes single
# files only); gmlx-gen writes the model whose header is over 4 MiB.
# Usage: remote.sh GMLX FIXTURES GMLX_GEN   (exit 77, skipped: no python3; TRACE=1 prints each
# gmlx command with the second it starts at)
set -u
abs() { case $1 in /* | "") echo "$1" ;; */*) echo "$PWD/$1" ;; *) echo "$1" ;; esac; }
GMLX=$(abs "$1") FIX=$(abs "$2") GEN=$(abs "${3:-}")
HERE=$(cd "$(dirname "$0")" && pwd)
command -v python3 >/dev/null 2>&1 || { echo "remote.sh: no python3, skipping"; exit 77; }
MODEL=$FIX/trained-qwen3moe/model-q4_k_m.gguf
[ -f "$MODEL" ] || { echo "remote.sh: no fixture $MODEL"; exit 1; }
TMP=$(mktemp -d)
SRV=
stop_server() { [ -n "$SRV" ] && { kill "$SRV" 2>/dev/null; wait "$SRV" 2>/dev/null; SRV=; }; }
trap 'stop_server; rm -rf "$TMP"' EXIT
export HOME=$TMP/home XDG_CONFIG_HOME='' GMLX_CONFIG='' GMLX_RAM_GB=32 GMLX_AVAIL_GB=32 no_proxy='*' NO_PROXY='*'
unset HF_TOKEN HUGGING_FACE_HUB_TOKEN HF_HUB_OFFLINE GMLX_HTTP_STALL_S http_proxy https_proxy \
  HTTP_PROXY HTTPS_PROXY ALL_PROXY all_proxy
mkdir -p "$HOME"
cd "$TMP" || exit 1
fails=0 n=0 rc=0
ok() { n=$((n + 1)); }
bad() { n=$((n + 1)); fails=$((fails + 1)); echo "FAIL: $*"; }
# G ARGS...: gmlx ARGS with a time limit; stdout in out, stderr in err, the exit status in $rc
G() {
  [ -n "${TRACE:-}" ] && echo "$SECONDS gmlx $*" >&2
  timeout -k 5 "${LIMIT:-40}" "$GMLX" "$@" >"$TMP/out" 2>"$TMP/err"
  rc=$?
}
want() { # want RC|nz WHAT: nz is a clean failure (1..123: not a time-out, not a signal)
  if [ "$1" = nz ]; then [ "$rc" -ge 1 ] && [ "$rc" -le 123 ]; else [ "$rc" -eq "$1" ]; fi &&
    ok || { bad "$2: exit $rc, wanted $1"; sed 's/^/    /' "$TMP/err" | tail -5; }
}
has() { grep -qi -- "$2" "$1" && ok || { bad "$3: no '$2'"; sed 's/^/    /' "$1" | tail -6; }; }
hasf() { grep -qF -- "$2" "$1" && ok || { bad "$3: no '$2'"; sed 's/^/    /' "$1" | tail -6; }; }
absent() { [ ! -e "$1" ] && ok || bad "$2: $1 exists"; }
size_of() { stat -c %s "$1" 2>/dev/null || echo -1; }
same() { cmp -s "$1" "$2" && ok || bad "$3: $1 differs from $2 ($(size_of "$1") vs $(size_of "$2") bytes)"; }

# ---- a GGUF helper: data offset of a file, and a split set made from a single file the way
# llama.cpp's gguf-split writes one (all keys in part 1, split.no/count/tensors.count in each) ----
cat >"$TMP/gguf.py" <<'PY'
import struct, sys
SCAL = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
def parse(b):
    pos = 4
    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, b, pos)[0]; pos += struct.calcsize("<" + fmt); return v
    def skip(t):
        nonlocal pos
        if t == 8: n = take("Q"); pos += n
        elif t == 9:
            et, n = take("I"), take("Q")
            if et in SCAL: pos += n * struct.calcsize("<" + SCAL[et])
            else:
                for _ in range(n): skip(et)
        else: pos += struct.calcsize("<" + SCAL[t])
    assert b[:4] == b"GGUF", "not a GGUF"
    ver, nt, nkv = take("I"), take("Q"), take("Q")
    kvs, align = [], 32
    for _ in range(nkv):
        s = pos; n = take("Q"); key = b[pos:pos + n]; pos += n; t = take("I"); v = pos; skip(t)
        if key == b"general.alignment": align = struct.unpack_from("<I", b, v)[0]
        if not key.startswith(b"split."): kvs.append((key, b[s:pos]))
    tensors = []
    for _ in range(nt):
        s = pos; n = take("Q"); pos += n; nd = take("I"); pos += 8 * nd; take("I"); o = pos
        tensors.append((b[s:o], take("Q")))
    return ver, kvs, tensors, align, (pos + align - 1) // align * align
if sys.argv[1] == "header":
    print(parse(open(sys.argv[2], "rb").read(64 << 20))[4])
else:  # split SRC PREFIX N
    b = open(sys.argv[2], "rb").read(); N = int(sys.argv[4])
    ver, kvs, tensors, align, data = parse(b)
    ends = sorted(o for _, o in tensors) + [len(b) - data]
    size = {o: ends[ends.index(o) + 1] - o for _, o in tensors}
    kv = lambda k, t, f, v: struct.pack("<Q", len(k)) + k + struct.pack("<I", t) + struct.pack("<" + f, v)
    per = (len(tensors) + N - 1) // N
    for p in range(N):
        mine = tensors[p * per:(p + 1) * per]
        meta = [r for k, r in kvs if p == 0 or k == b"general.alignment"]
        meta += [kv(b"split.no", 2, "H", p), kv(b"split.count", 2, "H", N), kv(b"split.tensors.count", 5, "i", len(tensors))]
        hdr = b"GGUF" + struct.pack("<IQQ", ver, len(mine), len(meta)) + b"".join(meta)
        cur = 0
        for info, o in mine:
            hdr += info + struct.pack("<Q", cur); cur += size[o]
        with open("%s-%05d-of-%05d.gguf" % (sys.argv[3], p + 1, N), "wb") as f:
            f.write(hdr + b"\0" * (-len(hdr) % align))
            for _, o in mine: f.write(b[data + o:data + o + size[o]])
PY

# ---- the hub's files ----
HUB=$TMP/hub
mkdir -p "$HUB/test/tiny/sub" "$HUB/test/junk" "$HUB/test/multi" "$HUB/test/split" "$HUB/test/big" models
cp "$MODEL" "$HUB/test/tiny/Tiny-Q4_K_M.gguf"
cp "$MODEL" "$HUB/test/tiny/sub/Other-Q8_0.gguf"
echo "# tiny" >"$HUB/test/tiny/README.md"
head -c 5000 "$HERE/config.sh" >"$HUB/test/junk/Junk-Q4_K_M.gguf"
head -c 3000 "$MODEL" >"$HUB/test/multi/A-Q4_K_M.gguf"
head -c 3000 "$MODEL" >"$HUB/test/multi/B-q4_k_m.gguf"
python3 "$TMP/gguf.py" split "$MODEL" "$HUB/test/split/Tiny-Q4_K_M" 2 || { echo "remote.sh: split failed"; exit 1; }
BIG=
if [ -x "$GEN" ]; then
  # a header over 4 MiB (a 300k-token vocabulary), tensor data a hole
  "$GEN" --arch qwen3moe --vocab 300000 --sparse -q -o "$HUB/test/big/Big-Q4_K.gguf" >/dev/null 2>&1 &&
    BIG=$HUB/test/big/Big-Q4_K.gguf || bad "gmlx-gen could not write the big-header model"
else
  bad "no gmlx-gen at '$GEN': the case of a header over 4 MiB is not run"
fi
TINY=$HUB/test/tiny/Tiny-Q4_K_M.gguf TSIZE=$(size_of "$MODEL")

# ---- the server ----
python3 "$HERE/hubserver.py" --root "$HUB" --port 0 --port-file "$TMP/port" --max-seconds 240 \
  --log "$TMP/hub.log" 2>"$TMP/hub.err" &
SRV=$!
for _ in $(seq 200); do [ -s "$TMP/port" ] && break; kill -0 "$SRV" 2>/dev/null || break; sleep 0.05; done
[ -s "$TMP/port" ] || { echo "remote.sh: hubserver did not start"; cat "$TMP/hub.err"; exit 1; }
HF_ENDPOINT=http://127.0.0.1:$(cat "$TMP/port")
export HF_ENDPOINT
hub() { # hub PATH [JSON]: GET, or POST JSON to, the server's PATH
  python3 -c 'import sys, urllib.request as u
r = u.Request(sys.argv[1], data=sys.argv[2].encode() or None, headers={"Content-Type": "application/json"})
sys.stdout.write(u.urlopen(r, timeout=10).read().decode())' "$HF_ENDPOINT$1" "${2-}"
}
faults() { hub /_control "{\"faults\": [$1], \"token\": null, \"clear_log\": true}" >/dev/null || bad "hub /_control [$1]"; }
hublog() { # hublog NAME: "METHOD STATUS RANGE SENT AUTH PATH" of each request for a file NAME
  hub /_log | python3 -c 'import json, signal, sys
signal.signal(signal.SIGPIPE, signal.SIG_DFL)
for l in sys.stdin:
    e = json.loads(l)
    if e["path"].split("?")[0].endswith("/" + sys.argv[1]):
        print(e["method"], e["status"], (e["range"] or "-").replace(" ", ""), e["sent"], int(e["auth"]), e["path"])' "$1"
}
sent() { hublog "$1" | awk '{ s += $4 } END { print s + 0 }'; }
# same_as_local REF LOCAL WHAT [ARGS...]: validate REF ARGS = validate LOCAL ARGS, output and exit
# status, with line 1 (text) or "file" (--json) naming REF (or $ALT, the ref it resolved to)
same_as_local() {
  local ref=$1 loc=$2 what=$3 lrc; shift 3
  timeout 40 "$GMLX" validate "$loc" "$@" >"$TMP/lout" 2>/dev/null; lrc=$?
  G validate "$ref" "$@"
  [ "$rc" -eq "$lrc" ] && ok || { bad "$what: exit $rc, the local file's $lrc"; sed 's/^/    /' "$TMP/err" | tail -5; }
  python3 - "$TMP/out" "$TMP/lout" "$ref" "$loc" ${ALT:+"$ALT"} <<'PY' && ok || bad "$what: output differs from the local file's"
import difflib, json, sys
r, l = open(sys.argv[1]).read(), open(sys.argv[2]).read()
refs, loc = sys.argv[3:4] + sys.argv[5:], sys.argv[4]
if l.lstrip().startswith("{"):
    try:
        R, L = json.loads(r), json.loads(l)
    except ValueError as e:
        sys.exit("    not JSON: %s: %r" % (e, r[:200]))
    if R.get("file") not in refs:
        sys.exit("    \"file\" is %r, wanted %r" % (R.get("file"), refs[0]))
    R["file"] = L["file"]
    if R != L:
        sys.exit("    keys that differ: %s" % [k for k in set(R) | set(L) if R.get(k) != L.get(k)])
    sys.exit(0)
head = next((x for x in refs if r.startswith(x + ": ")), None)
if head is None:
    sys.exit("    line 1 does not start with %r: %r" % (refs[0], r.split("\n")[0]))
r, l = r[len(head):], l[len(loc):]
if r != l:
    sys.exit("".join("    " + x for x in difflib.unified_diff(l.splitlines(1), r.splitlines(1), "local", "remote")))
PY
}

# ================= validate =================
R=hf://test/tiny/Tiny-Q4_K_M.gguf
faults ""
same_as_local "$R" "$TINY" "validate hf://"
s=$(sent Tiny-Q4_K_M.gguf)
[ "$s" -gt 0 ] && [ "$s" -lt "$TSIZE" ] && ok || bad "validate hf:// read $s bytes of a $TSIZE-byte file"
hublog Tiny-Q4_K_M.gguf | awk '$1 == "GET" && $3 == "-"' | grep -q . && bad "validate sent a GET without Range" || ok
same_as_local "$R" "$TINY" "validate hf:// --json" --json
faults ""
same_as_local "$R@abc123" "$TINY" "validate hf://...@REV"
hublog Tiny-Q4_K_M.gguf | grep -q "/resolve/abc123/" && ok || bad "@abc123 is not the revision asked for: $(hublog Tiny-Q4_K_M.gguf | head -2)"
ALT=$R same_as_local "test/tiny:Q4_K_M" "$TINY" "validate ORG/REPO:QUANT"
hasf "$TMP/err" "[resolved] test/tiny:Q4_K_M -> hf://test/tiny/Tiny-Q4_K_M.gguf" "the [resolved] line"
ALT=hf://test/tiny/sub/Other-Q8_0.gguf same_as_local "test/tiny:q8_0" "$HUB/test/tiny/sub/Other-Q8_0.gguf" "a lower-case QUANT in a subfolder"
hasf "$TMP/err" "[resolved] test/tiny:q8_0 -> hf://test/tiny/sub/Other-Q8_0.gguf" "the [resolved] line (subfolder)"
G validate test/multi:Q4_K_M
want 2 "two files match :Q4_K_M"
hasf "$TMP/err" "A-Q4_K_M.gguf" "several matches are listed (A)"
hasf "$TMP/err" "B-q4_k_m.gguf" "several matches are listed (B)"
G validate test/tiny:IQ1_S
want 2 "no file matches :IQ1_S"
G validate test/nosuch:Q4_K_M
want 2 "an unknown repo"
same_as_local "$HF_ENDPOINT/test/tiny/resolve/main/Tiny-Q4_K_M.gguf" "$TINY" "validate http:// URL"
G validate hf://test/tiny/Nope.gguf
want 2 "validate a file the repo does not have"
has "$TMP/err" "HTTP 404\|no such file" "validate of a file not in the repo: message"
G validate "$HF_ENDPOINT/test/tiny/resolve/main/Nope.gguf"
want 2 "validate a URL that is not there"
hasf "$TMP/err" "HTTP 404" "validate 404 message (URL)"
faults '"status=404"'
G validate "$R"
want 2 "validate when the file answers 404"
hasf "$TMP/err" "HTTP 404" "validate 404 message (hf://)"
faults '"status=500"'
G validate "$R"
want 2 "validate on HTTP 500"
hasf "$TMP/err" "HTTP 500" "validate 500 message"
faults ""
G validate hf://test/junk/Junk-Q4_K_M.gguf
want 2 "validate a file that is not a GGUF"
has "$TMP/err" "not a GGUF" "validate non-GGUF message"
# --max-mb 1: one range of at most 1 MiB (the header is 32 kB)
faults ""
same_as_local "$R" "$TINY" "validate --max-mb 1" --max-mb 1
hublog Tiny-Q4_K_M.gguf | awk '$4 > 1048576' | grep -q . && bad "--max-mb 1 read more than 1 MiB at once: $(hublog Tiny-Q4_K_M.gguf)" || ok
# a split set: validated as a whole, every part read, only prefixes
faults ""
SPLIT1=$HUB/test/split/Tiny-Q4_K_M-00001-of-00002.gguf
same_as_local hf://test/split/Tiny-Q4_K_M-00001-of-00002.gguf "$SPLIT1" "validate a split set"
hasf "$TMP/out" ", 2 parts, " "the split set is 2 parts"
for p in 1 2; do
  s=$(sent "Tiny-Q4_K_M-0000$p-of-00002.gguf")
  [ "$s" -gt 0 ] && [ "$s" -lt "$(size_of "$HUB/test/split/Tiny-Q4_K_M-0000$p-of-00002.gguf")" ] && ok ||
    bad "split part $p: $s bytes read"
done
# a header over 4 MiB: read in growing ranges, never the whole file; --max-mb 4 is too small
if [ -n "$BIG" ]; then
  hdr=$(python3 "$TMP/gguf.py" header "$BIG")
  faults ""
  same_as_local hf://test/big/Big-Q4_K.gguf "$BIG" "validate a model with a ${hdr}-byte header"
  s=$(sent Big-Q4_K.gguf)
  [ "$s" -ge "$hdr" ] && [ "$s" -lt "$(size_of "$BIG")" ] && ok || bad "big header: read $s bytes of $(size_of "$BIG")"
  if [ "$hdr" -gt $((4 << 20)) ]; then
    faults ""
    G validate hf://test/big/Big-Q4_K.gguf --max-mb 4
    want 2 "a ${hdr}-byte header over --max-mb 4"
    hublog Big-Q4_K.gguf | awk '$4 > 4194304' | grep -q . && bad "--max-mb 4 read more than 4 MiB at once" || ok
  fi
fi
# HF_TOKEN: sent to the hub, needed where the hub wants it, not sent to another host
hub /_control '{"faults": [], "token": "sekrit", "clear_log": true}' >/dev/null
G validate "$R"
want 2 "no HF_TOKEN for a hub that wants one"
hasf "$TMP/err" "HTTP 401" "401 message"
HF_TOKEN=sekrit G validate "$R"
want 0 "validate with HF_TOKEN"
hublog Tiny-Q4_K_M.gguf | awk '$2 == 200 || $2 == 206' | awk '$5 != 1' | grep -q . && bad "a request without the token got through" || ok
faults ""
HF_TOKEN=sekrit G validate "http://localhost:${HF_ENDPOINT##*:}/test/tiny/resolve/main/Tiny-Q4_K_M.gguf"
want 0 "validate a URL of another host with HF_TOKEN set"
hublog Tiny-Q4_K_M.gguf | awk '$5 == 1' | grep -q . && bad "HF_TOKEN was sent to localhost (the hub is 127.0.0.1)" || ok

# ================= pull =================
"$GMLX" init "$TMP/models" --out "$TMP/cfg.yaml" >/dev/null 2>&1 || bad "gmlx init for the pull tests"
CFG=$TMP/cfg.yaml D=$TMP/models
# entry ID of the config as PyYAML reads it: the path its file resolves to (absolute, or under a
# server.model_dirs folder, else the file's folder), or nothing
entry_path() {
  python3 -c 'import os, sys, yaml
cfg, want = sys.argv[1], sys.argv[2]
d = yaml.safe_load(open(cfg)) or {}
e = (d.get("models") or {}).get(want)
if not e: sys.exit(1)
p = str(e["path"]); dirs = ((d.get("server") or {}).get("model_dirs")) or []
dirs = [dirs] if isinstance(dirs, str) else dirs
for c in ([p] if os.path.isabs(p) else [os.path.join(x, p) for x in dirs] + [os.path.join(os.path.dirname(cfg), p)]):
    if os.path.exists(c): print(os.path.realpath(c)); sys.exit(0)
print("unresolved:" + p)' "$@"
}
# 1. plain pull, registered
faults ""
G pull "$R" --dir "$D" --config "$CFG"
want 0 "pull hf://"
same "$D/Tiny-Q4_K_M.gguf" "$MODEL" "pulled file"
absent "$D/Tiny-Q4_K_M.gguf.part" "no .part after a pull"
hasf "$TMP/err" "Tiny-Q4_K_M.gguf" "pull's progress names the file"
p=$(entry_path "$CFG" tiny-q4)
[ "$p" = "$(realpath "$D/Tiny-Q4_K_M.gguf")" ] && ok || bad "config entry tiny-q4 -> '$p': $(grep -A3 '^models:' "$CFG")"
[ -n "$p" ] && { G validate "$p"; want 0 "validate the registered path"; }
G run tiny-q4 --config "$CFG" -n 2 --temp 0 -p hi
want 0 "run the pulled model by its id"
# 7. already there: skipped, the file untouched, no second entry
before=$(stat -c %i.%Y "$D/Tiny-Q4_K_M.gguf") cfg_before=$(cksum <"$CFG")
faults ""
G pull "$R" --dir "$D" --config "$CFG"
want 0 "pull of a file already there"
has "$TMP/err" "skip\|already" "pull says it skipped"
[ "$(stat -c %i.%Y "$D/Tiny-Q4_K_M.gguf")" = "$before" ] && ok || bad "the file already there was rewritten"
[ "$(sent Tiny-Q4_K_M.gguf)" -lt "$TSIZE" ] && ok || bad "pull of a file already there downloaded $(sent Tiny-Q4_K_M.gguf) bytes"
[ "$(cksum <"$CFG")" = "$cfg_before" ] && ok || bad "the config changed on a skipped pull: $(grep -A6 '^models:' "$CFG")"
# ORG/REPO:QUANT and a split set
faults ""
G pull test/tiny:Q8_0 --dir "$TMP/q" --no-register
want 0 "pull ORG/REPO:QUANT"
same "$TMP/q/Other-Q8_0.gguf" "$MODEL" "the :Q8_0 file (a subfolder's file lands in --dir)"
hasf "$TMP/err" "[resolved] test/tiny:Q8_0 -> hf://test/tiny/sub/Other-Q8_0.gguf" "pull's [resolved] line"
G pull hf://test/split/Tiny-Q4_K_M-00001-of-00002.gguf --dir "$TMP/s" --no-register
want 0 "pull a split set"
for p in 1 2; do same "$TMP/s/Tiny-Q4_K_M-0000$p-of-00002.gguf" "$HUB/test/split/Tiny-Q4_K_M-0000$p-of-00002.gguf" "split part $p"; done
# 2. interrupted, then resumed with Range: bytes=N- (N over the 4 MiB header read, which the
# fault leaves alone: short=N cuts only answers longer than N)
N=6000000 P=$TMP/r/Tiny-Q4_K_M.gguf
faults '"short=6000000,once"'
G pull "$R" --dir "$TMP/r" --no-register
want nz "an interrupted pull"
hasf "$TMP/err" "re-run to resume" "the interrupted pull says how to resume"
absent "$P" "no final file after an interruption"
[ "$(size_of "$P.part")" -eq $N ] && ok || bad "the .part holds $(size_of "$P.part") bytes, wanted $N"
hub /_control '{"clear_log": true}' >/dev/null
G pull "$R" --dir "$TMP/r" --no-register
want 0 "the resumed pull"
hublog Tiny-Q4_K_M.gguf | awk '$1 == "GET" && $2 == 206 && $3 == "bytes='$N'-" && $4 == '$((TSIZE - N))'' | grep -q . &&
  ok || bad "the resumed pull did not fetch bytes=$N- alone: $(hublog Tiny-Q4_K_M.gguf | cut -d' ' -f1-4)"
same "$P" "$MODEL" "the resumed file"
absent "$P.part" "no .part after the resume"
# 5. a server that ignores Range while a .part is there: starts again from zero
mkdir -p "$TMP/nr" && head -c $N "$MODEL" >"$TMP/nr/Tiny-Q4_K_M.gguf.part"
faults '"norange"'
G pull "$R" --dir "$TMP/nr" --no-register
want 0 "pull from a server that ignores Range"
same "$TMP/nr/Tiny-Q4_K_M.gguf" "$MODEL" "the file after a 200 to a range request"
absent "$TMP/nr/Tiny-Q4_K_M.gguf.part" "no .part after the norange pull"
# a .part that is already whole: the server answers 416 to bytes=SIZE-
mkdir -p "$TMP/w" && cp "$MODEL" "$TMP/w/Tiny-Q4_K_M.gguf.part"
faults ""
G pull "$R" --dir "$TMP/w" --no-register
want 0 "pull with a complete .part"
same "$TMP/w/Tiny-Q4_K_M.gguf" "$MODEL" "the file from a complete .part"
# 3. HTTP 404 and 500: a clear message, nothing promoted
for c in 404 500; do
  faults "\"status=$c\""
  G pull "$R" --dir "$TMP/e$c" --no-register
  want nz "pull on HTTP $c"
  hasf "$TMP/err" "HTTP $c" "pull's HTTP $c message"
  absent "$TMP/e$c/Tiny-Q4_K_M.gguf" "no file after HTTP $c"
  grep -qs "injected" "$TMP/e$c/Tiny-Q4_K_M.gguf.part" && bad "the HTTP $c body was written to the .part" || ok
done
faults ""
G pull hf://test/tiny/Nope.gguf --dir "$TMP/e" --no-register
want nz "pull a file the repo does not have"
has "$TMP/err" "HTTP 404\|no such file" "pull of a file not in the repo: message"
G pull hf://test/junk/Junk-Q4_K_M.gguf --dir "$TMP/e" --no-register
want nz "pull a file that is not a GGUF"
has "$TMP/err" "not a GGUF" "pull of a non-GGUF: message"
[ -z "$(ls -A "$TMP/e" 2>/dev/null)" ] && ok || bad "files left by failed pulls: $(ls -A "$TMP/e")"
# 4. a stalled transfer: given up after GMLX_HTTP_STALL_S=2
faults '"stall=5000000"'
t0=$SECONDS
GMLX_HTTP_STALL_S=2 LIMIT=30 G pull "$R" --dir "$TMP/st" --no-register
want nz "a stalled pull"
[ $((SECONDS - t0)) -le 20 ] && ok || bad "the stalled pull took $((SECONDS - t0)) s"
has "$TMP/err" "stall\|timed\? \?out\|no data\|no byte" "the stalled pull's message"
absent "$TMP/st/Tiny-Q4_K_M.gguf" "no file after a stall"
# 6. a wrong sha256 from the hub: refused, nothing promoted; once the hub is right, the pull works
faults '"badhash"'
G pull "$R" --dir "$TMP/h" --no-register
want nz "a pull with a sha256 mismatch"
has "$TMP/err" "sha256.*mismatch\|mismatch.*sha256" "the sha256 mismatch message"
absent "$TMP/h/Tiny-Q4_K_M.gguf" "no file after a sha256 mismatch"
faults ""
G pull "$R" --dir "$TMP/h" --no-register
want 0 "pull again after the mismatch"
same "$TMP/h/Tiny-Q4_K_M.gguf" "$MODEL" "the file after the mismatch"
# the hub's 302 to a CDN (X-Linked-* on the 302 only)
faults '"redirect"'
G pull "$R" --dir "$TMP/cdn" --no-register
want 0 "pull through a redirect"
same "$TMP/cdn/Tiny-Q4_K_M.gguf" "$MODEL" "the file through a redirect"
hublog Tiny-Q4_K_M.gguf | grep -q " /_cdn/" && ok || bad "the redirect was not followed"
# 8. bad usage
G pull
want 2 "pull without a ref"
G pull hf://a
want 2 "pull hf://a"
G pull "$R" --bogus
want 2 "pull --bogus"

stop_server
[ -s "$TMP/hub.err" ] && { bad "hubserver wrote errors"; sed 's/^/    /' "$TMP/hub.err" | head -5; }
echo "remote: $((n - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
