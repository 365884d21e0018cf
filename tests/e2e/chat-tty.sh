#!/bin/bash
# gmlx chat in a real terminal, driven through tmux (send-keys / capture-pane): the banner and
# the ">> " prompt, a streamed greedy answer, Ctrl-C stopping a long answer without leaving the
# chat, the prompt history written, /quit and Ctrl-D leaving with status 0.
# Usage: chat-tty.sh GMLX_BINARY FIXTURES_DIR   (exit 77: tmux is not installed, outside CI)
set -u
GMLX=$1
FIX=$2
MODEL=$FIX/trained-qwen3moe/model-q4_k_m.gguf
if ! command -v tmux >/dev/null; then
  [ "${CI:-}" = true ] && { echo "chat-tty.sh: tmux is needed under CI"; exit 1; }
  echo "chat-tty.sh: tmux is not installed (scripts/setup.sh installs it); skipped"
  exit 77
fi
TMP=$(mktemp -d)
SOCK=gmlx-tty-$$
trap 'tmux -L "$SOCK" kill-server 2>/dev/null; rm -rf "$TMP"' EXIT
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

screen() { tmux -L "$SOCK" capture-pane -p -t t -S -200; }
# wait_for PATTERN SECONDS: until the pane shows PATTERN (a grep -E pattern)
wait_for() {
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    screen | grep -qE -- "$1" && return 0
    sleep 0.1
  done
  return 1
}
# count PATTERN: lines of the pane that match
count() { screen | grep -cE -- "$1"; }
keys() { tmux -L "$SOCK" send-keys -t t "$@"; }
start() { # start COMMAND...: in a fresh 160x50 terminal; its exit status goes to $TMP/status
  tmux -L "$SOCK" kill-server 2>/dev/null
  rm -f "$TMP/status"
  local i
  for i in 1 2 3; do # a server still shutting down can refuse the new session: try again
    tmux -L "$SOCK" new-session -d -s t -x 160 -y 50 \
      "env XDG_CACHE_HOME='$TMP/cache' $*; echo \$? >'$TMP/status'; sleep 30" && return
    sleep 0.5
  done
  bad "tmux did not start a session"
}
exited() { # exited SECONDS: the status once the chat has left, or "none"
  local i
  for ((i = 0; i < $1 * 10; i++)); do
    [ -s "$TMP/status" ] && { cat "$TMP/status"; return; }
    sleep 0.1
  done
  echo none
}

# a greedy answer, then a long one stopped with Ctrl-C, then another answer, then /quit
start "'$GMLX' chat '$MODEL' -c 8192 --temp 0 --ignore-eos -n 0"
wait_for "'/help' lists commands" 60 && ok || bad "no banner: $(screen | tail -3)"
wait_for '^>>' 10 && ok || bad "no prompt"
keys 'Extract name and city: In Dublin, Paula turned 54.' Enter
# --ignore-eos: the answer runs on past its end token until Ctrl-C
wait_for '\{"name": "Paula", "city": "Dublin"\}' 60 && ok || bad "no streamed answer: $(screen | tail -5)"
keys C-c
wait_for 'reply canceled' 30 && ok || bad "Ctrl-C did not stop the answer: $(screen | tail -5)"
wait_for '^>>$' 10 && ok || bad "no prompt after Ctrl-C: $(screen | tail -3)"
[ "$(exited 1)" = none ] && ok || bad "Ctrl-C during an answer left the chat"
# the chat goes on: the next turn is answered (now from the cache plus its own tokens)
keys '/set max 6' Enter
wait_for 'max=6' 10 && ok || bad "/set max"
keys 'Q: 12+30=? A:' Enter
wait_for 'prompt [0-9]+ tok \([1-9][0-9]* reused\)' 60 && ok ||
  { bad "no second answer reusing the cache"; screen | grep -v '^$' | cut -c1-100 | tail -8; }
keys '/quit' Enter
[ "$(exited 20)" = 0 ] && ok || bad "/quit: exit status $(cat "$TMP/status" 2>/dev/null)"
grep -q "Extract" "$TMP/cache/gmlx/chat_history" 2>/dev/null && ok || { bad "the prompt history was not written"; ls -la "$TMP/cache/gmlx" 2>&1; }

# Ctrl-D at the prompt leaves; the history of the last session is there to recall (Up)
start "'$GMLX' chat '$MODEL' --temp 0 -n 4"
wait_for '^>>' 60 && ok || bad "no prompt (second session)"
keys Up
wait_for '^>> /quit' 10 && ok || bad "Up does not recall the history: $(screen | tail -3)"
keys C-u C-d
[ "$(exited 20)" = 0 ] && ok || bad "Ctrl-D: exit status $(cat "$TMP/status" 2>/dev/null)"

echo "chat-tty: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
