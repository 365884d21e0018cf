#!/bin/bash
# End-to-end tests of gmlx serve through the official client libraries (tests/e2e/serve/):
#  - installs openai and @anthropic-ai/sdk (exact versions, tests/e2e/serve/package-lock.json)
#    with npm ci into $ROOT/.cache/serve-node/ (reused while the lock is the same); without node
#    (20 or newer) or npm, or when the install fails, the test is skipped (77), failed under CI=true;
#  - starts two servers on 127.0.0.1 with --port 0 and waits (60 s at most) for their
#    "[server] listening on http://HOST:PORT" line: the main one with --api-key and --queue 32,
#    an auxiliary one without a key, with --queue 1 -c 8192 --max-body-mb 1 (a full queue,
#    canceling a long prompt, the body limit, the context limit);
#  - runs the node:test files (openai, anthropic, errors, server; GMLX_SERVE_TESTS="errors ..."
#    picks some), then load.mjs (64 clients, GMLX_LOAD_SECONDS, default 60) and slowclient.mjs
#    (GMLX_SLOW_SECONDS, default 20); 0 seconds leaves either out;
#  - checks the servers logged "[req] " lines (server.test.mjs checks one per request), are still
#    running, print no sanitizer or crash report, and stop with exit status 0 on SIGTERM within 10 s.
# Ends with "serve: N passed, M failed"; non-zero exit on a failure.
# Usage: serve.sh GMLX_BINARY FIXTURES_DIR
set -u
[ $# -eq 2 ] || { echo "usage: serve.sh GMLX_BINARY FIXTURES_DIR"; exit 2; }
GMLX=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
FIX=$(cd "$2" && pwd)
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE=$ROOT/tests/e2e/serve
MODEL=$FIX/trained-qwen3moe/model-q4_k_m.gguf
NM=$ROOT/.cache/serve-node
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
skip() { # skip REASON: 77 outside CI, a failure under CI
  if [ "${CI:-}" = true ]; then
    echo "serve: $1 (CI: not skipped)"
    echo "serve: 0 passed, 1 failed"
    exit 1
  fi
  echo "serve: $1; skipped"
  exit 77
}

command -v node >/dev/null 2>&1 || skip "node is not installed"
command -v npm >/dev/null 2>&1 || skip "npm is not installed"
node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)' ||
  skip "node $(node --version) is older than 20"

# ---- the client libraries, installed once per lock ----
mkdir -p "$NM" || skip "cannot create $NM"
(
  command -v flock >/dev/null 2>&1 && { flock -w 300 9 || exit 1; }
  if [ -d "$NM/node_modules" ] && cmp -s "$HERE/package-lock.json" "$NM/package-lock.json"; then
    exit 0
  fi
  rm -rf "$NM/node_modules"
  cp "$HERE/package.json" "$HERE/package-lock.json" "$NM/" &&
    (cd "$NM" && timeout 300 npm ci --no-audit --no-fund --loglevel=error) >"$NM/npm.log" 2>&1 ||
    { cat "$NM/npm.log"; rm -rf "$NM/node_modules" "$NM/package-lock.json"; exit 1; }
) 9>"$NM/.lock" || skip "npm ci failed (see above)"

TMP=$(mktemp -d)
# the test files run from a folder inside $NM, so that their imports find its node_modules
RUN=$(mktemp -d "$NM/run.XXXXXX")
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  rm -rf "$TMP" "$RUN"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
cp "$HERE"/*.mjs "$RUN"/
# the servers see no configuration file or key of this machine's user: only the flags given here
unset GMLX_API_KEY GMLX_CONFIG
mkdir -p "$TMP/home" "$TMP/work"
export HOME=$TMP/home XDG_CONFIG_HOME=$TMP/config XDG_CACHE_HOME=$TMP/cache

# start_server NAME ARGS...: starts gmlx serve, sets URL_<NAME> and PID_<NAME>
start_server() {
  local name=$1
  shift
  (cd "$TMP/work" && exec "$GMLX" serve "$MODEL" --host 127.0.0.1 --port 0 "$@") >"$TMP/$name.out" 2>"$TMP/$name.err" &
  local pid=$!
  PIDS+=("$pid")
  local url="" i
  for ((i = 0; i < 600; i++)); do
    url=$(grep -o -m1 '\[server\] listening on http://127\.0\.0\.1:[0-9]*' "$TMP/$name.err" 2>/dev/null | sed 's/.*listening on //')
    [ -n "$url" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if [ -z "$url" ]; then
    bad "$name server: no '[server] listening on http://127.0.0.1:PORT' line in 60 s"
    sed 's/^/    /' "$TMP/$name.err" | tail -15
    echo "serve: $pass passed, $fail failed"
    exit 1
  fi
  ok
  printf -v "URL_$name" '%s' "$url"
  printf -v "PID_$name" '%s' "$pid"
  echo "serve: $name server at $url (pid $pid)"
}

KEY="gmlx-e2e-$RANDOM$RANDOM"
start_server main --api-key "$KEY" --queue 32
start_server aux --queue 1 -c 8192 --max-body-mb 1

export GMLX_URL=$URL_main GMLX_KEY=$KEY GMLX_AUX_URL=$URL_aux GMLX_BIN=$GMLX GMLX_MODEL=$MODEL GMLX_PID=$PID_main GMLX_AUX_LOG=$TMP/aux.err GMLX_AUX_PID=$PID_aux

# ---- node:test files ----
(cd "$RUN" && timeout 420 node --test --test-concurrency=1 --test-timeout=300000 \
  --test-reporter=spec --test-reporter-destination=stdout \
  --test-reporter=tap --test-reporter-destination="$TMP/tap.txt" \
  $(for t in ${GMLX_SERVE_TESTS:-openai anthropic errors server}; do printf '%s.test.mjs ' "$t"; done))
rc=$?
np=$(sed -n 's/^# pass \([0-9]*\)$/\1/p' "$TMP/tap.txt" | tail -1)
nf=$(sed -n 's/^# fail \([0-9]*\)$/\1/p' "$TMP/tap.txt" | tail -1)
nc=$(sed -n 's/^# cancelled \([0-9]*\)$/\1/p' "$TMP/tap.txt" | tail -1)
if [ -z "$np" ]; then
  bad "node --test ended (exit $rc) without a summary"
else
  pass=$((pass + np))
  fail=$((fail + ${nf:-0} + ${nc:-0}))
  [ "$rc" -eq 0 ] || [ $((${nf:-0} + ${nc:-0})) -gt 0 ] || bad "node --test exited $rc with no failed test"
fi

# ---- load and slow clients ----
if [ "${GMLX_LOAD_SECONDS:-60}" != 0 ]; then
  (cd "$RUN" && timeout $((${GMLX_LOAD_SECONDS:-60} + 120)) node load.mjs) && ok || bad "load.mjs (see above)"
fi
if [ "${GMLX_SLOW_SECONDS:-20}" != 0 ]; then
  (cd "$RUN" && timeout $((${GMLX_SLOW_SECONDS:-20} + 60)) node slowclient.mjs) && ok || bad "slowclient.mjs (see above)"
fi

# ---- the servers' logs and a clean stop ----
for name in main aux; do
  pid_var=PID_$name
  pid=${!pid_var}
  if kill -0 "$pid" 2>/dev/null; then ok; else bad "$name server is no longer running"; fi
  n=$(grep -c '^\[req\] ' "$TMP/$name.err")
  [ "$n" -gt 0 ] && ok || bad "$name server logged no '[req] ' line"
  kill -TERM "$pid" 2>/dev/null
  for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    bad "$name server still running 10 s after SIGTERM"
    kill -KILL "$pid" 2>/dev/null
  fi
  wait "$pid"
  rc=$?
  [ "$rc" -eq 0 ] && ok || bad "$name server exited $rc after SIGTERM"
  if grep -q -E 'AddressSanitizer|LeakSanitizer|runtime error:|Segmentation fault|Assertion .* failed' "$TMP/$name.err"; then
    bad "$name server's stderr reports a crash or sanitizer error"
    grep -E -m5 'AddressSanitizer|LeakSanitizer|runtime error:|Segmentation fault|Assertion .* failed' "$TMP/$name.err" | sed 's/^/    /'
  fi
  echo "serve: $name server logged $n request lines"
done
PIDS=()

echo "serve: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
