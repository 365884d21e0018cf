#!/bin/bash
# gmlx serve with two models under one memory budget (server residency): a streamed model
# (stream: experts) and a small in-memory one whose footprints do not fit the budget together.
# While the streamed model generates, a request for the other is deferred (not refused, not
# killed); when the first is done it is unloaded (its streaming figures logged) and the second
# loads and answers. A model larger than the whole budget is refused with 503 model_too_large,
# and the server is still up after all of it.
# Usage: residency.sh GMLX FIXTURES GMLX_GEN
set -u
GMLX=$1 FIX=$(cd "$2" && pwd) GEN=$3
MODEL=$FIX/trained-qwen3moe/model-q4_k_m.gguf
[ -f "$MODEL" ] || { echo "residency.sh: no fixture $MODEL"; exit 1; }
command -v curl >/dev/null || { echo "residency.sh: curl is missing; skipped"; exit 77; }
TMP=$(mktemp -d)
PID=
trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$TMP"' EXIT
export HOME=$TMP XDG_CONFIG_HOME= GMLX_CONFIG= GMLX_RAM_GB=2.8 GMLX_AVAIL_GB=2.8
fails=0 n=0
ok() { n=$((n + 1)); }
bad() { n=$((n + 1)); fails=$((fails + 1)); echo "FAIL: $*"; }
"$GEN" --arch qwen3moe --layers 2 --experts 64 --experts-used 2 --hidden 1024 --ffn 1024 --expert-ffn 1024 \
  --heads 8 --kv-heads 4 --head-dim 128 --vocab 300 -q -o "$TMP/wide.gguf" >/dev/null || { echo "gmlx-gen failed"; exit 1; }
cat >"$TMP/gmlx.yaml" <<YAML
models:
  wide:
    path: $TMP/wide.gguf
    stream: experts
  tiny:
    path: $MODEL
YAML
start() { # start BUDGET_GB: the server on a free port; sets URL and PID
  : >"$TMP/err"
  "$GMLX" serve --config "$TMP/gmlx.yaml" --port 0 --budget-gb "$1" >"$TMP/out" 2>"$TMP/err" &
  PID=$!
  for _ in $(seq 100); do grep -q "listening on" "$TMP/err" && break; sleep 0.1; done
  URL=$(grep -o "http://127.0.0.1:[0-9]*" "$TMP/err" | head -1)
  [ -n "$URL" ] || { echo "residency.sh: the server did not start"; cat "$TMP/err"; exit 1; }
}
stop() { kill "$PID" 2>/dev/null; wait "$PID" 2>/dev/null; PID=; }
gb_of() { grep "^  $1 " "$TMP/err" | grep -o "[0-9.]* GB)" | grep -o "[0-9.]*"; }

# footprints as the server plans them; a budget that holds either model but not both
start 1000
W=$(gb_of wide) T=$(gb_of tiny)
stop
B=$(python3 -c "import sys; w,t=float(sys.argv[1]),float(sys.argv[2]); print(round((max(w,t)+0.6*min(w,t))/1.073741824,3))" "$W" "$T")
[ -n "$W" ] && [ -n "$T" ] && ok || bad "no footprints in the start-up lines: $(head -4 "$TMP/err")"
start "$B"
curl -s -m 60 -o "$TMP/wide.json" -w "%{http_code}" "$URL/v1/completions" \
  -d '{"model":"wide","prompt":"hello world","max_tokens":400,"temperature":0}' >"$TMP/wide.code" &
CW=$!
for _ in $(seq 100); do grep -q "loaded wide" "$TMP/err" && break; sleep 0.05; done
code=$(curl -s -m 60 -o "$TMP/tiny.json" -w "%{http_code}" "$URL/v1/chat/completions" \
  -d '{"model":"tiny","messages":[{"role":"user","content":"Hi"}],"max_tokens":8,"temperature":0}')
wait $CW
[ "$(cat "$TMP/wide.code")" = 200 ] && ok || bad "the streamed model's request: $(cat "$TMP/wide.code") $(head -c 300 "$TMP/wide.json")"
[ "$code" = 200 ] && ok || bad "the deferred request: $code $(head -c 300 "$TMP/tiny.json")"
grep -q "\[residency\] tiny deferred" "$TMP/err" && ok || bad "no deferral logged"
# at 2.8 GiB the plan would keep wide's experts in memory: the start-up log says its entry is stale
grep -q "warning: wide has stream: experts, but its experts fit in memory" "$TMP/err" && ok ||
  bad "no stale-entry warning: $(head -5 "$TMP/err")"
grep -q "\[stream\] wide: its experts stream as its entry asks" "$TMP/err" && ok || bad "the load does not say why it streams"
grep -q "unloaded wide (another model needs the room)" "$TMP/err" && ok || bad "wide was not unloaded for tiny"
grep -q "decode feeder arena hit rate" "$TMP/err" && ok || bad "wide's streaming figures were not logged at its unload"
# the order: tiny deferred, wide's request done, wide unloaded, then tiny's request answered
python3 - "$TMP/err" <<'PY' && ok || bad "the order of deferral, unload and answer: $(grep -n 'deferred\|unloaded\|\[req\]\|loading' "$TMP/err")"
import sys
lines = open(sys.argv[1]).read().splitlines()
def at(s):
    return next(i for i, l in enumerate(lines) if s in l)
assert at("tiny deferred") < at("/v1/completions wide") < at("unloaded wide") < at("/v1/chat/completions tiny")
PY
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["usage"]["completion_tokens"] > 0' "$TMP/tiny.json" &&
  ok || bad "tiny's answer"
kill -0 "$PID" 2>/dev/null && ok || bad "the server died"
stop

# a budget smaller than either model: refused at once, the server stays up
start 0.01
code=$(curl -s -m 30 -o "$TMP/big.json" -w "%{http_code}" "$URL/v1/chat/completions" \
  -d '{"model":"tiny","messages":[{"role":"user","content":"Hi"}],"max_tokens":4}')
[ "$code" = 503 ] && grep -q model_too_large "$TMP/big.json" && ok || bad "over the whole budget: $code $(cat "$TMP/big.json")"
[ "$(curl -s -m 5 "$URL/health")" = '{"status":"ok"}' ] && ok || bad "health after a refusal"
stop

echo "residency: $((n - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
