#!/bin/bash
# End-to-end tests of gmlx chat from a pipe and of gmlx template:
#  - template prints, byte for byte, what the Python pipeline that trained the bundled model
#    rendered (ref1.prompt.txt), and refuses bad input with a clear message;
#  - chat's greedy answer of turn N equals a fresh `gmlx run --raw` on the conversation rendered
#    through the template up to that turn, for the trained model in memory and with its experts
#    streamed, for Gated DeltaNet (qwen3next) and sliding-window attention (gpt-oss) fixtures;
#  - the commands (/retry, /undo, /system, /set, /save, //text, unknown ones) and bad input
#    (a template that raises, a turn past the context, an unknown flag) keep the chat going.
# Usage: chat.sh GMLX_BINARY FIXTURES_DIR FIXTURE_CACHE
set -u
GMLX=$1
FIX=$2
CACHE=$3
MODEL=$FIX/trained-qwen3moe/model-q4_k_m.gguf
T=$FIX/trained-qwen3moe
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export XDG_CACHE_HOME=$TMP/cache
pass=0
fail=0

ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
expect() { # expect STATUS DESCRIPTION -- command...   (stdout in $TMP/out, stderr in $TMP/err)
  local want=$1 what=$2
  shift 3
  "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  if [ "$rc" -eq "$want" ]; then ok; else bad "$what: exit $rc, wanted $want"; sed 's/^/    /' "$TMP/err" | head -5; fi
}
has() { # has FILE PATTERN DESCRIPTION
  if grep -q -- "$2" "$1"; then ok; else bad "$3: no '$2' in output"; sed 's/^/    /' "$1" | head -8; fi
}
same() { # same FILE1 FILE2 DESCRIPTION
  if cmp -s "$1" "$2"; then ok; else bad "$3"; diff <(od -c "$1" | head -20) <(od -c "$2" | head -20) | head -10; fi
}
command -v python3 >/dev/null || { echo "chat.sh: python3 is needed to edit the saved conversations"; exit 1; }

# ---- gmlx template ----
cat >"$TMP/m1.json" <<'EOF'
[{"role": "user", "content": "Extract name and city: In Dublin, Paula turned 54."}]
EOF
expect 0 "template of the bundled model" -- "$GMLX" template "$MODEL" --messages "$TMP/m1.json" --add-generation-prompt
same "$TMP/out" "$T/ref1.prompt.txt" "template renders the trained model's prompt byte for byte"
# the same conversation as an object (a request body or chat's /save), from standard input
expect 0 "template from stdin" -- sh -c "printf '{\"messages\": [{\"role\": \"user\", \"content\": \"Extract name and city: In Dublin, Paula turned 54.\"}]}' | '$GMLX' template '$MODEL' --messages - --add-generation-prompt"
same "$TMP/out" "$T/ref1.prompt.txt" "template from a request-shaped object"
# variables: bos_token and any other, nothing added to the output
printf '[{{ bos_token }}|{{ eos_token }}|{{ flag }}|{{ n + 1 }}]' >"$TMP/vars.jinja"
expect 0 "template --var" -- "$GMLX" template "$MODEL" --chat-template-file "$TMP/vars.jinja" --messages "$TMP/m1.json" --var flag=true --var n=41
[ "$(cat "$TMP/out")" = "[<|endoftext|>|<|endoftext|>|True|42]" ] && ok || bad "template --var output: $(cat "$TMP/out")"
expect 0 "template --var bos_token" -- "$GMLX" template --chat-template-file "$TMP/vars.jinja" --messages "$TMP/m1.json" --var 'bos_token="<s>"' --var flag=null --var n=0
[ "$(cat "$TMP/out")" = "[<s>||None|1]" ] && ok || bad "template without a model: $(cat "$TMP/out")"
printf '{{ strftime_now("%%Y-%%m-%%d") }}' >"$TMP/date.jinja"
expect 0 "template --now" -- "$GMLX" template --chat-template-file "$TMP/date.jinja" --messages "$TMP/m1.json" --now 86400
[ "$(cat "$TMP/out")" = "1970-01-02" ] && ok || bad "template --now output: $(cat "$TMP/out")"
# bad input
printf '[{"role": "user", "content": ' >"$TMP/broken.json"
expect 2 "template messages not JSON" -- "$GMLX" template "$MODEL" --messages "$TMP/broken.json"
has "$TMP/err" "not JSON: line 1" "template bad JSON message"
printf '{"role": "user"}' >"$TMP/obj.json"
expect 2 "template messages not a list" -- "$GMLX" template "$MODEL" --messages "$TMP/obj.json"
has "$TMP/err" "a list of messages" "template messages shape message"
printf '[{"content": "x"}]' >"$TMP/norole.json"
expect 2 "template message without a role" -- "$GMLX" template "$MODEL" --messages "$TMP/norole.json"
printf '{%% for m in messages %%}{%% if m.role not in ["user", "assistant"] %%}{{ raise_exception("unknown role " + m.role) }}{%% endif %%}{{ m.content }}{%% endfor %%}' >"$TMP/strict.jinja"
printf '[{"role": "wizard", "content": "x"}]' >"$TMP/wizard.json"
expect 1 "template that raises" -- "$GMLX" template --chat-template-file "$TMP/strict.jinja" --messages "$TMP/wizard.json"
has "$TMP/err" "unknown role wizard" "the template's own message"
expect 2 "template without a template" -- "$GMLX" template --messages "$TMP/m1.json"
expect 2 "template --var without JSON" -- "$GMLX" template "$MODEL" --messages "$TMP/m1.json" --var name=text
has "$TMP/err" "not JSON" "--var message"
printf '{%% for %%}' >"$TMP/bad.jinja"
expect 2 "template with a syntax error" -- "$GMLX" template --chat-template-file "$TMP/bad.jinja" --messages "$TMP/m1.json"
has "$TMP/err" "line 1" "syntax error names the line"

# ---- chat from a pipe ----
expect 0 "chat one turn" -- sh -c "printf 'Extract name and city: In Dublin, Paula turned 54.\n' | '$GMLX' chat --temp 0 -n 48"
printf '{"name": "Paula", "city": "Dublin"}\n' >"$TMP/want1"
same "$TMP/out" "$TMP/want1" "chat's answer is the reference's, alone on stdout"
has "$TMP/err" "prompt 22 tok (0 reused)" "chat's first turn evaluates the reference's 22 tokens"

# turn_check NAME MODEL N_PREDICT RAW_CONTENT FLAGS...: three turns with a /save after each; turn
# k's answer must equal `run --raw` on the template's rendering of the conversation before it.
# RAW_CONTENT yes: the saved answer is the generated text itself (no for harmony, whose history
# keeps the final channel as content and the analysis as thinking)
turn_check() {
  local name=$1 model=$2 n=$3 raw_content=$4
  shift 4
  local d=$TMP/$name
  mkdir -p "$d"
  printf 'Q: 605+877=? A:\n/save %s/s1.json\nExtract name and city: In Rome, Ada turned 31.\n/save %s/s2.json\nWhat is 12+30?\n/save %s/s3.json\n' \
    "$d" "$d" "$d" | "$GMLX" chat "$model" ${TPL:+--chat-template-file "$TPL"} --temp 0 -n "$n" --reasoning raw "$@" \
    >"$d/chat.out" 2>"$d/chat.err"
  local rc=$?
  [ "$rc" -eq 0 ] && ok || { bad "$name: chat exit $rc"; sed 's/^/    /' "$d/chat.err" | head -5; return; }
  : >"$d/want"
  for k in 1 2 3; do
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); m=d["messages"]; assert m[-1]["role"]=="assistant"; json.dump(m[:-1], open(sys.argv[2],"w")); open(sys.argv[3],"w").write(m[-1]["content"])' \
      "$d/s$k.json" "$d/before$k.json" "$d/answer$k" || { bad "$name: /save $k"; return; }
    "$GMLX" template "$model" ${TPL:+--chat-template-file "$TPL"} --messages "$d/before$k.json" --add-generation-prompt >"$d/prompt$k" 2>>"$d/err" ||
      { bad "$name: template $k"; return; }
    "$GMLX" run "$model" --raw --special -f "$d/prompt$k" --temp 0 -n "$n" "$@" >"$d/run$k" 2>>"$d/err" ||
      { bad "$name: run $k"; sed 's/^/    /' "$d/err" | tail -3; return; }
    cat "$d/run$k" >>"$d/want"
    printf '\n' >>"$d/answer$k"
    [ "$raw_content" = no ] || same "$d/answer$k" "$d/run$k" "$name: turn $k saved answer equals run --raw on the rendered conversation"
  done
  same "$d/chat.out" "$d/want" "$name: chat's answers equal run --raw on each rendered conversation"
  # later turns reuse the cache: only their own tokens are evaluated
  local reused
  reused=$(grep -o '([0-9]* reused)' "$d/chat.err" | tr -dc '0-9\n' | tail -2 | sort -n | head -1)
  [ "${reused:-0}" -gt 0 ] && ok || bad "$name: turns 2 and 3 reused nothing from the cache"
}
turn_check trained "$MODEL" 48 yes
turn_check trained-streamed "$MODEL" 48 yes --stream-experts
same "$TMP/trained/chat.out" "$TMP/trained-streamed/chat.out" "streamed chat answers equal in-memory ones"
# a template that rewrites the history, as Qwen3's drops earlier reasoning: earlier answers keep
# only their first 3 characters, so each turn rewinds the cache into the previous answer
cat >"$TMP/rewrite.jinja" <<'EOF'
{%- for m in messages -%}
<|im_start|>{{ m.role }}
{% if m.role == 'assistant' %}{{ m.content[:3] }}{% else %}{{ m.content }}{% endif %}<|im_end|>
{% endfor -%}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif -%}
EOF
TPL=$TMP/rewrite.jinja turn_check rewrites-history "$MODEL" 48 yes
TPL=$TMP/rewrite.jinja turn_check rewrites-history-streamed "$MODEL" 48 yes --stream-experts
same "$TMP/rewrites-history/chat.out" "$TMP/rewrites-history-streamed/chat.out" "streamed answers equal in-memory ones under a rewriting template"
has "$TMP/trained-streamed/chat.err" "prompt [0-9]* tok" "streamed chat stat lines"
for fx in qwen3next gpt-oss; do
  if [ -f "$CACHE/$fx/model-bf16.gguf" ]; then
    turn_check "$fx" "$CACHE/$fx/model-bf16.gguf" 12 "$([ "$fx" = gpt-oss ] && echo no || echo yes)"
  elif [ "${CI:-}" = true ]; then
    bad "fixture $fx missing under CI"
  else
    echo "chat.sh: $fx fixture not fetched (scripts/fetch-fixtures.sh); skipped"
  fi
done

# commands: /retry gives the same greedy answer, /undo removes the exchange, //text is sent
printf 'Q: 605+877=? A:\n/retry\n/undo\n/save %s/undo.json\n/set temp 0\n/set bogus 1\n/frobnicate\n/system You are terse.\n/system\n/set\n/stats\n//x\n' \
  "$TMP" | "$GMLX" chat --temp 0 -n 8 >"$TMP/out" 2>"$TMP/err"
[ "$?" -eq 0 ] && ok || bad "chat commands: exit status"
[ "$(sed -n 1p "$TMP/out")" = "$(sed -n 2p "$TMP/out")" ] && ok || bad "/retry gave another greedy answer"
[ "$(wc -l <"$TMP/out")" -eq 3 ] && ok || bad "chat commands: three answers expected on stdout, got $(wc -l <"$TMP/out")"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["messages"]==[], d' "$TMP/undo.json" && ok || bad "/undo left messages"
has "$TMP/err" "removed the last exchange" "/undo note"
has "$TMP/err" "/set bogus 1: give one of" "/set with a bad name"
has "$TMP/err" "unknown command /frobnicate" "unknown command note"
has "$TMP/err" "/help" "unknown command lists the commands"
has "$TMP/err" "system message: You are terse." "/system shows the message"
has "$TMP/err" "sampling: temp=0" "/set shows the settings"
has "$TMP/err" "answers; prompt" "/stats totals"
# bad input keeps the chat going: a template that raises on one message, a turn past the context
printf '{%% for m in messages %%}{%% if "boom" in m.content %%}{{ raise_exception("no booms here") }}{%% endif %%}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%% endfor %%}<|im_start|>assistant\n\n' >"$TMP/boom.jinja"  # Jinja drops one trailing newline
printf 'boom\nExtract name and city: In Dublin, Paula turned 54.\n' |
  "$GMLX" chat --chat-template-file "$TMP/boom.jinja" --temp 0 -n 48 >"$TMP/out" 2>"$TMP/err"
[ "$?" -eq 0 ] && ok || bad "chat with a raising template: exit status"
has "$TMP/err" "no booms here" "the template's message"
same "$TMP/out" "$TMP/want1" "the chat went on after the template raised"
long=$(printf 'word %.0s' $(seq 1 200))
printf '%s\nExtract name and city: In Dublin, Paula turned 54.\n' "$long" | "$GMLX" chat -c 100 --temp 0 -n 48 >"$TMP/out" 2>"$TMP/err"
[ "$?" -eq 0 ] && ok || bad "chat with an over-long turn: exit status"
has "$TMP/err" "that turn does not fit" "over-long turn message"
same "$TMP/out" "$TMP/want1" "the chat went on after an over-long turn"
expect 2 "chat --speculative" -- "$GMLX" chat --speculative
has "$TMP/err" "speculative decoding is not built yet" "--speculative message"
expect 2 "chat bad flag" -- "$GMLX" chat --frobnicate
expect 2 "chat missing model" -- "$GMLX" chat "$TMP/none.gguf"
printf 'GGUF' >"$TMP/notgguf.gguf"
expect 2 "chat truncated model" -- sh -c "echo hi | '$GMLX' chat '$TMP/notgguf.gguf'"
expect 2 "chat --reasoning bogus" -- "$GMLX" chat --reasoning bogus

echo "chat: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
