#!/bin/bash
# End-to-end tests of the gmlx command line: help, exit statuses, validate and inspect output,
# bad flags and unreadable files. Usage: cli.sh GMLX_BINARY FIXTURES_DIR FIXTURE_CACHE GMLX_GEN
set -u
GMLX=$1
FIX=$2
CACHE=$3
GEN=$4
MODEL=$FIX/trained-qwen3moe/model-q4_k_m.gguf
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass=0
fail=0

ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# expect STATUS DESCRIPTION -- command...   (stdout+stderr land in $TMP/out)
expect() {
  local want=$1 what=$2
  shift 3
  "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  if [ "$rc" -eq "$want" ]; then ok; else bad "$what: exit $rc, wanted $want"; sed 's/^/    /' "$TMP/err" | head -5; fi
}
has() { # has FILE PATTERN DESCRIPTION
  if grep -q -- "$2" "$1"; then ok; else bad "$3: no '$2' in output"; sed 's/^/    /' "$1" | head -8; fi
}

# --help for the tool and every command
expect 0 "gmlx --help" -- "$GMLX" --help
has "$TMP/out" "validate" "gmlx --help lists validate"
expect 2 "gmlx without a command" -- "$GMLX"
expect 2 "unknown command" -- "$GMLX" frobnicate
has "$TMP/err" "unknown command 'frobnicate'" "unknown command message"
expect 0 "gmlx --version" -- "$GMLX" --version
expect 2 "help for an unknown command" -- "$GMLX" help frobnicate
has "$TMP/err" "unknown command 'frobnicate'" "help unknown command message"
# output that cannot be written is an error, not a success
expect 2 "--help to a full disk" -- sh -c '"$0" --help >/dev/full' "$GMLX"
has "$TMP/err" "writing the output failed" "write error message"
for cmd in validate inspect run chat template tokenize logits bench; do
  expect 0 "$cmd --help" -- "$GMLX" "$cmd" --help
  has "$TMP/out" "usage: gmlx $cmd" "$cmd --help usage line"
  expect 0 "help $cmd" -- "$GMLX" help "$cmd"
done

# validate on the bundled model
expect 0 "validate bundled model" -- "$GMLX" validate "$MODEL"
has "$TMP/out" "streaming: every-token weights" "validate prints the plan"
has "$TMP/out" "(6 layers, 16 experts, 4 per token)" "validate names layers/experts/top-k"
has "$TMP/out" "every-token by group: attention" "validate prints groups"
has "$TMP/out" "KV room .* at 32768 tokens" "validate prints the KV room"
has "$TMP/out" "decode arena" "validate prints the arena"
n=$(grep -c '^  *=> \(streams\|cannot\|the whole\|loads\)' "$TMP/out")
[ "$n" -eq 1 ] && ok || bad "exactly one table verdict, got $n"
has "$TMP/out" "=> the whole file fits in RAM; streaming is optional" "a 12 MB model fits"

# JSON: same numbers under stream
expect 0 "validate --json" -- "$GMLX" validate --json "$MODEL"
if command -v python3 >/dev/null 2>&1; then
  python3 - "$TMP/out" <<'PY' && ok || bad "validate --json content"
import json, sys
d = json.load(open(sys.argv[1]))
s = d["stream"]
assert d["arch"] == "qwen3moe" and d["runnable"] is True
assert s["moe_layers"] == 6 and s["experts"] == 16 and s["experts_per_token"] == 4
for k in ("experts_in_memory_now", "auto_mtp_off_now", "tables_from_file_now"):
    assert isinstance(s[k], bool), k
assert s["verdict"] == "fits" and s["kv_ctx"] == 32768
assert s["every_token_bytes"] + s["expert_bytes"] <= d["size_bytes"]
PY
else
  has "$TMP/out" '"experts_in_memory_now": true' "json has experts_in_memory_now"
fi

# --vram-gb: the VRAM tier's plan (how many experts its slots hold, each tier's share)
expect 0 "validate --vram-gb" -- "$GMLX" validate --vram-gb 0.01 "$MODEL"
has "$TMP/out" "VRAM tier 10.0 MB (--gpu): 78 of the 96 routed experts" "validate plans the VRAM tier"
has "$TMP/out" "=> with --gpu, the experts by tier: VRAM 81%, RAM 19%, SSD none" "validate gives each tier's share"
expect 0 "validate --vram-gb --json" -- "$GMLX" validate --json --vram-gb 0.01 "$MODEL"
python3 - "$TMP/out" <<'PY' && ok || bad "validate --vram-gb --json content"
import json, sys
t = json.load(open(sys.argv[1]))["stream"]["tiers"]
assert t["vram_bytes"] == 10**7 and t["routed_experts"] == 6 * 16
assert t["vram_experts"] == min(t["routed_experts"], t["vram_bytes"] // t["vram_slot_bytes"])
assert abs(t["vram_share"] + t["ram_share"] + t["ssd_share"] - 1) < 1e-9 and t["ssd_share"] == 0
PY
# not every expert fits, the attention does (a 64-token plan): 32 slots kept for staging a prompt's
# experts, none with GMLX_GPU_STAGE=0 (tier slots of 127.5 kB: 10.8 MB holds 84)
expect 0 "validate --vram-gb, staging" -- env GMLX_STREAM_KV_CTX=64 "$GMLX" validate --vram-gb 0.012 "$MODEL"
has "$TMP/out" "52 of the 96 routed experts" "staging slots come out of the tier"
has "$TMP/out" "VRAM staging (--gpu): 32 more slots" "validate plans the staging slots"
expect 0 "validate --vram-gb, no staging" -- env GMLX_STREAM_KV_CTX=64 GMLX_GPU_STAGE=0 "$GMLX" validate --json \
  --vram-gb 0.012 "$MODEL"
python3 - "$TMP/out" <<'PY' && ok || bad "validate --vram-gb, GMLX_GPU_STAGE=0"
import json, sys
t = json.load(open(sys.argv[1]))["stream"]["tiers"]
assert t["vram_stage_slots"] == 0 and t["vram_experts"] == 84, t
PY
expect 0 "validate --vram-gb, every expert" -- "$GMLX" validate --vram-gb 1 "$MODEL"
has "$TMP/out" "96 of the 96 routed experts (all" "a tier larger than the experts holds them all"
has "$TMP/out" "VRAM attention and output head (--gpu): 6 layers" "the attention of every layer goes on the device first"
# the attention's weights and cache come out of the VRAM before the experts' slots (with 10 MB
# they would take more than half, and the attention stays on the CPU)
expect 0 "validate --vram-gb 1 --json" -- "$GMLX" validate --json --vram-gb 1 "$MODEL"
python3 - "$TMP/out" <<'PY' && ok || bad "validate --vram-gb: the attention's share"
import json, sys
s = json.load(open(sys.argv[1]))["stream"]
t = s["tiers"]
g = s["every_token_by_group"]
assert t["vram_attention_layers"] == 6 and t["vram_attention_bytes"] == g["attention"] + g["output_head"]
assert t["vram_kv_bytes"] >= 2 * 6 * 2 * s["kv_ctx"] * 64 * 2  # K and V, 6 layers, 2 kv heads of 64 halves
assert t["vram_bytes"] == 10**9 - t["vram_attention_bytes"] - t["vram_kv_bytes"]
PY
expect 2 "--vram-gb 0" -- "$GMLX" validate --vram-gb 0 "$MODEL"
# --gpu where there is no device (or no CUDA backend in the build): a clear error, no crash
expect 2 "run --gpu without a device" -- "$GMLX" run "$MODEL" --gpu -p hi -n 1
has "$TMP/err" "gmlx run: --gpu: " "--gpu says why it cannot run"
if ! "$GMLX" doctor --no-drive-test 2>/dev/null | grep -q "PASS  gpu"; then
  expect 2 "validate --gpu without a device" -- "$GMLX" validate --gpu "$MODEL"
  has "$TMP/err" "gmlx validate: --gpu: " "validate --gpu says why it cannot plan"
fi

# environment and flags change the KV room
GMLX_STREAM_KV_CTX=1024 expect 0 "GMLX_STREAM_KV_CTX" -- "$GMLX" validate "$MODEL"
has "$TMP/out" "at 1024 tokens" "GMLX_STREAM_KV_CTX sets the KV room's tokens"
expect 0 "--kv-bits 8" -- "$GMLX" validate --json --kv-bits 8 "$MODEL"
has "$TMP/out" '"kv_bits": 8' "--kv-bits 8 in json"
GMLX_DECODE_ARENA_GB=0.001 expect 0 "arena override" -- "$GMLX" validate "$MODEL"
has "$TMP/out" "set by GMLX_DECODE_ARENA_GB" "arena override is said"

# bad usage: exit 2 with a message
expect 2 "validate without a file" -- "$GMLX" validate
has "$TMP/err" "no model file" "missing file message"
expect 2 "validate unknown flag" -- "$GMLX" validate --bogus "$MODEL"
has "$TMP/err" "unknown option '--bogus'" "unknown flag message"
expect 2 "--kv-bits 4" -- "$GMLX" validate --kv-bits 4 "$MODEL"
expect 2 "--kv-bits missing value" -- "$GMLX" validate "$MODEL" --kv-bits
expect 2 "--prefill-step-size abc" -- "$GMLX" validate --prefill-step-size abc "$MODEL"
GMLX_RAM_GB=lots expect 2 "bad GMLX_RAM_GB" -- "$GMLX" validate "$MODEL"
has "$TMP/err" "GMLX_RAM_GB=lots" "bad GMLX_RAM_GB message"
GMLX_STREAM_KV_CTX=-5 expect 2 "bad GMLX_STREAM_KV_CTX" -- "$GMLX" validate "$MODEL"
GMLX_STREAM_KV_CTX=" -18446744073709551615" expect 2 "GMLX_STREAM_KV_CTX wrapping negative" -- "$GMLX" validate "$MODEL"
expect 2 "two files" -- "$GMLX" validate "$MODEL" "$MODEL"

# unreadable input: exit 2 naming the file
expect 2 "nonexistent file" -- "$GMLX" validate "$TMP/none.gguf"
has "$TMP/err" "$TMP/none.gguf: cannot open" "nonexistent file message"
head -c 100000 "$MODEL" >"$TMP/trunc.gguf"
expect 2 "truncated model" -- "$GMLX" validate "$TMP/trunc.gguf"
has "$TMP/err" "trunc.gguf: truncated" "truncated file message"
printf 'not a gguf file at all, just text\n' >"$TMP/text.gguf"
expect 2 "not a GGUF" -- "$GMLX" validate "$TMP/text.gguf"
has "$TMP/err" "not a GGUF file" "bad magic message"
# text from the file is made printable: an architecture with an invalid UTF-8 byte and an
# escape sequence keeps its "arch" key in JSON and puts no control byte on the terminal
printf 'GGUF\003\0\0\0\0\0\0\0\0\0\0\0\001\0\0\0\0\0\0\0\024\0\0\0\0\0\0\0general.architecture\010\0\0\0\013\0\0\0\0\0\0\0ll\377ama\033[31m' >"$TMP/badarch.gguf"
expect 1 "validate --json, unprintable architecture" -- "$GMLX" validate --json "$TMP/badarch.gguf"
has "$TMP/out" '"arch": "ll?ama?\[31m"' "unprintable architecture made printable in JSON"
expect 1 "validate, unprintable architecture" -- "$GMLX" validate "$TMP/badarch.gguf"
if grep -q "$(printf '\033')" "$TMP/out"; then bad "an escape byte from the file reached the output"; else ok; fi
expect 2 "inspect truncated" -- "$GMLX" inspect "$TMP/trunc.gguf"

# a file that cannot run: exit 1 (a vocabulary-only GGUF, an unsupported architecture)
if [ -f "$CACHE/tokenizers/ggml-vocab-gpt-2.gguf" ]; then
  expect 1 "vocab-only file" -- "$GMLX" validate "$CACHE/tokenizers/ggml-vocab-gpt-2.gguf"
  has "$TMP/out" "not runnable" "not runnable line"
elif [ "${CI:-}" = true ]; then
  bad "fixture cache missing under CI (scripts/fetch-fixtures.sh)"
fi

# what-if machines: a 12 MB model on 2 GiB still fits; on a 1 GiB machine the fixed
# reserves leave no ceiling, so it cannot stream (exit 1)
GMLX_RAM_GB=1 expect 1 "1 GiB machine" -- "$GMLX" validate "$MODEL"
has "$TMP/out" "=> cannot stream: every-token weights" "cannot-stream verdict"

# inspect
expect 0 "inspect" -- "$GMLX" inspect "$MODEL"
has "$TMP/out" "general.architecture = 'qwen3moe'" "inspect metadata"
has "$TMP/out" "blk.0.ffn_gate_exps.weight	Q4_K	\[256, 256, 16\]" "inspect tensor row"
has "$TMP/out" "	expert$" "inspect marks expert stacks"
expect 0 "inspect --no-tensors" -- "$GMLX" inspect --no-tensors "$MODEL"

# every reference GGUF opens and gets a plan: 0 (runnable) or 1 (not runnable), never 2
if [ -d "$CACHE" ]; then
  for f in "$CACHE"/*/*.gguf "$FIX"/*/*.gguf; do
    [ -f "$f" ] || continue
    "$GMLX" validate "$f" >"$TMP/out" 2>"$TMP/err"
    rc=$?
    if [ $rc -eq 0 ] || [ $rc -eq 1 ]; then ok; else bad "validate $f: exit $rc"; head -3 "$TMP/err"; fi
  done
fi

# tokenize: the ref1 prompt text gives the reference ids (transformers' tokenizer)
T=$FIX/trained-qwen3moe
expect 0 "tokenize -f" -- "$GMLX" tokenize "$MODEL" -f "$T/ref1.prompt.txt"
[ "$(cat "$TMP/out")" = "$(tr '\n' ' ' <"$T/ref1.prompt.ids" | sed 's/ $//')" ] && ok || bad "tokenize ids differ: $(cat "$TMP/out")"
expect 0 "tokenize stdin" -- sh -c "printf 'Q: 605+877=? A:' | '$GMLX' tokenize '$MODEL'"
[ "$(cat "$TMP/out")" = "$(tr '\n' ' ' <"$T/ref0.prompt.ids" | sed 's/ $//')" ] && ok || bad "tokenize stdin ids differ"
expect 2 "tokenize both inputs" -- "$GMLX" tokenize "$MODEL" --text a -f "$T/ref1.prompt.txt"

# run: greedy answer of the ref1 prompt is the reference's ({"name": "Paula", "city": "Dublin"}),
# with the bundled model as the default; stdout carries only the text
expect 0 "run default model" -- "$GMLX" run --raw -f "$T/ref1.prompt.txt" --temp 0 -n 48
[ "$(cat "$TMP/out")" = '{"name": "Paula", "city": "Dublin"}' ] && ok || bad "run output: $(cat "$TMP/out")"
has "$TMP/err" "decode .* tok/s; stop: end of generation" "run end-of-run line on stderr"
# by default the prompt goes through the model's chat template: the same answer, from the text
# alone (ref1.prompt.txt is that prompt rendered by the Python pipeline that trained the model)
expect 0 "run through the chat template" -- "$GMLX" run -p "Extract name and city: In Dublin, Paula turned 54." --temp 0 -n 48 -v
[ "$(cat "$TMP/out")" = '{"name": "Paula", "city": "Dublin"}' ] && ok || bad "templated run output: $(cat "$TMP/out")"
has "$TMP/err" "prompt 22 tokens (through the chat template" "templated run: the reference's 22 tokens"
expect 2 "run --raw with --system" -- "$GMLX" run --raw --system hi -p x
has "$TMP/err" "need the template" "--raw with --system message"
printf '{%% for m in messages %%}<<{{ m.content | upper }}>>{%% endfor %%}' >"$TMP/upper.jinja"
expect 0 "run --chat-template-file" -- "$GMLX" run --chat-template-file "$TMP/upper.jinja" -p "q: 605+877=? a:" -n 1 -v
has "$TMP/err" "prompt [0-9]* tokens (through the chat template" "run with a template file"
printf '{%% if %%}' >"$TMP/broken.jinja"
expect 2 "run with a broken template" -- "$GMLX" run --chat-template-file "$TMP/broken.jinja" -p x
has "$TMP/err" "broken.jinja: line 1" "broken template message names the file and line"
expect 0 "run seeded sampling" -- "$GMLX" run "$MODEL" --raw -p "Q: 12+30=? A:" --temp 0.9 --seed 7 -n 8
cp "$TMP/out" "$TMP/seed1"
expect 0 "run seeded sampling again" -- "$GMLX" run "$MODEL" --raw -p "Q: 12+30=? A:" --temp 0.9 --seed 7 -n 8
cmp -s "$TMP/out" "$TMP/seed1" && ok || bad "same seed, different output"
expect 0 "run with an 8-bit KV cache" -- "$GMLX" run --raw -f "$T/ref1.prompt.txt" --temp 0 -n 48 --kv-bits 8
[ "$(cat "$TMP/out")" = '{"name": "Paula", "city": "Dublin"}' ] && ok || bad "run --kv-bits 8 output: $(cat "$TMP/out")"
expect 2 "run bad --kv-bits" -- "$GMLX" run "$MODEL" -p x --kv-bits 4
has "$TMP/err" "kv-bits takes 32, 16 or 8" "bad --kv-bits message"
expect 0 "run -n 0" -- "$GMLX" run "$MODEL" --raw -p "Q: 12+30=? A:" -n 0
[ ! -s "$TMP/out" ] && ok || bad "run -n 0 printed: $(cat "$TMP/out")"
has "$TMP/err" "decode 0 tokens" "run -n 0 end-of-run line"
expect 2 "run to a full disk" -- sh -c '"$0" run "$1" -p hi -n 4 --temp 0 >/dev/full' "$GMLX" "$MODEL"
has "$TMP/err" "writing the output failed" "run write error message"
# The plan behind run's placement reserves the run's own context (prompt + n), not the default
# 32768 tokens: at 2.4 GB of RAM this model cannot stream with the default context (validate),
# and a short run keeps its experts in memory.
"$GEN" --arch qwen3moe --layers 2 --experts 16 --experts-used 2 --hidden 1024 --ffn 1024 \
  --expert-ffn 512 --heads 8 --kv-heads 4 --head-dim 128 --vocab 300 -q -o "$TMP/m2.gguf" >/dev/null
GMLX_RAM_GB=2.4 GMLX_AVAIL_GB=2.4 expect 1 "validate at 2.4 GB, default context" -- "$GMLX" validate "$TMP/m2.gguf"
has "$TMP/out" "KV room .* at 32768 tokens" "validate plans the default context"
GMLX_RAM_GB=2.4 GMLX_AVAIL_GB=2.4 expect 0 "run at 2.4 GB" -- "$GMLX" run "$TMP/m2.gguf" -p hello -n 2
if grep -q "experts stream" "$TMP/err"; then bad "a short run planned the default context"; sed 's/^/    /' "$TMP/err" | head -3; else ok; fi
expect 0 "run --seed -1 (a clock seed)" -- "$GMLX" run "$MODEL" --raw -p "Q: 12+30=? A:" --seed -1 -n 2
expect 0 "run --repeat-last-n -1 (the whole context)" -- "$GMLX" run "$MODEL" --raw -p "Q: 12+30=? A:" --repeat-last-n -1 --repeat-penalty 1.1 -n 2
# the per-layer decode profile: the split line, and with 2 a line for each of the model's layers
NL=$("$GMLX" inspect "$MODEL" --no-tensors | sed -n 's/.*block_count[^=]*= *\([0-9]*\).*/\1/p' | head -1)
GMLX_DECODE_LAYER_PROFILE=2 expect 0 "run with GMLX_DECODE_LAYER_PROFILE=2" -- "$GMLX" run "$MODEL" --raw -p "Q: 12+30=? A:" -n 4
has "$TMP/err" "^\[profile\] decode per-token ms over 3 tokens: total" "profile split line"
if [ -n "$NL" ] && [ "$(grep -c '^\[profile\] layer [0-9]*: attention' "$TMP/err")" -eq "$NL" ]; then ok; else bad "profile: not one line per layer ($NL)"; grep '^\[profile\]' "$TMP/err" | head -3; fi
GMLX_DECODE_LAYER_PROFILE=3 expect 2 "bad GMLX_DECODE_LAYER_PROFILE" -- "$GMLX" run "$MODEL" -p x -n 1
has "$TMP/err" "GMLX_DECODE_LAYER_PROFILE=3" "bad GMLX_DECODE_LAYER_PROFILE message"
expect 2 "run --seed -2" -- "$GMLX" run "$MODEL" -p x --seed -2
expect 2 "run bad temp" -- "$GMLX" run "$MODEL" -p x --temp -1
expect 2 "run bad flag" -- "$GMLX" run "$MODEL" -p x --frobnicate
expect 2 "run missing model" -- "$GMLX" run "$TMP/none.gguf" -p x
has "$TMP/err" "cannot open" "run missing model message"
expect 2 "run truncated model" -- "$GMLX" run "$TMP/trunc.gguf" -p x
# the bundled model under an architecture name gmlx does not know (same length, so the file
# stays valid)
perl -0777 -pe 's/qwen3moe/qwen9moe/g' "$MODEL" >"$TMP/unknown-arch.gguf"
expect 2 "run unsupported architecture" -- "$GMLX" run "$TMP/unknown-arch.gguf" -p x
has "$TMP/err" "architecture 'qwen9moe' cannot run yet" "unsupported architecture message"
# qwen4exp files refused with their reason, as llama.cpp refuses them: its n-gram embedding
# without the end-of-text token that cuts an n-gram, or on a full-attention layer (same-length
# edits keep the files valid)
"$GEN" --arch qwen4exp -q -o "$TMP/q4x.gguf"
perl -0777 -pe 's/ple\.eos_token_id/ple.eos_token_iX/' "$TMP/q4x.gguf" >"$TMP/q4x-noeos.gguf"
expect 2 "run qwen4exp without ple.eos_token_id" -- "$GMLX" run "$TMP/q4x-noeos.gguf" -p x -n 1
has "$TMP/err" "no ple.eos_token_id" "qwen4exp without ple.eos_token_id message"
perl -0777 -pe 's/(ple\.layers\x09\x00\x00\x00\x05\x00\x00\x00\x01\x00{7})\x00/${1}\x01/' "$TMP/q4x.gguf" \
  >"$TMP/q4x-ple1.gguf"
expect 2 "run qwen4exp with its n-gram embedding on a full-attention layer" -- "$GMLX" run "$TMP/q4x-ple1.gguf" -p x -n 1
has "$TMP/err" "must be a linear-attention one" "qwen4exp n-gram embedding layer message"

# lossy levers: ranges, exclusions, and what a run that keeps its experts in memory says
expect 2 "run --moe-experts 0" -- "$GMLX" run "$MODEL" -p x --moe-experts 0
has "$TMP/err" "moe-experts" "bad --moe-experts message"
expect 2 "run --moe-experts past the expert count" -- "$GMLX" run "$MODEL" -p x --stream-experts --moe-experts 17
has "$TMP/err" "16 experts per layer" "--moe-experts past 16 message"
expect 2 "run --moe-expert-mass 1.5" -- "$GMLX" run "$MODEL" -p x --moe-expert-mass 1.5
has "$TMP/err" "above 0 and at most 1" "bad --moe-expert-mass message"
expect 2 "run --moe-layer-shed 1" -- "$GMLX" run "$MODEL" -p x --moe-layer-shed 1
has "$TMP/err" "above 0 and below 1" "bad --moe-layer-shed message"
expect 2 "run --moe-miss-shed without a value" -- "$GMLX" run "$MODEL" -p x --moe-miss-shed
expect 2 "run --moe-prestage frobnicate" -- "$GMLX" run "$MODEL" -p x --moe-prestage frobnicate
has "$TMP/err" "ranked or keepers" "bad --moe-prestage message"
expect 2 "run mass and probe together" -- "$GMLX" run "$MODEL" -p x --moe-expert-mass 0.9 --moe-expert-probe
has "$TMP/err" "exclude each other" "mass and probe message"
expect 0 "run levers in memory" -- "$GMLX" run "$MODEL" --raw -p "Q: 12+30=? A:" --temp 0 -n 4 --moe-experts 2
has "$TMP/err" "--moe-experts 2 ignored: needs --stream-experts or --stream-cpu" "levers ignored in memory"
expect 0 "run levers streamed" -- "$GMLX" run "$MODEL" --raw -p "Q: 12+30=? A:" --temp 0 -n 4 --stream-experts --moe-experts 2 --moe-expert-probe
has "$TMP/err" "MoE top-k override: 4->2 experts/token on 6 offloaded MoE layers" "top-k override line"
has "$TMP/err" "decode fan-out probe over .* (selection k=2)" "probe table"
expect 0 "bench levers" -- "$GMLX" bench "$MODEL" -p 8 -n 4 -t 1 --stream-experts --moe-layer-shed 0.5
has "$TMP/err" "no MoE layer has a shared expert" "layer-shed without a shared expert"
expect 0 "keepers without miss-shed" -- "$GMLX" bench "$MODEL" -p 8 -n 4 -t 1 --stream-experts --moe-prestage keepers
has "$TMP/err" "keepers ignored: it needs --moe-miss-shed" "keepers without miss-shed message"

expect 2 "run --stream-fast-disk sometimes" -- "$GMLX" run "$MODEL" -p x --stream-fast-disk sometimes
has "$TMP/err" "takes auto, on or off" "bad --stream-fast-disk message"
expect 0 "run --stream-fast-disk on" -- "$GMLX" run "$MODEL" --raw -p "Q: 12+30=? A:" --temp 0 -n 2 -v --stream-experts --stream-fast-disk on
has "$TMP/err" "every predicted rank is read ahead" "fast-disk on line"

# logits: one row of n_vocab float32 per id
expect 0 "logits" -- "$GMLX" logits "$MODEL" --ids "$T/ref0.prompt.ids" --out "$TMP/l.f32"
[ "$(stat -c %s "$TMP/l.f32")" -eq $((13 * 1014 * 4)) ] && ok || bad "logits file size"
printf '1 2 x 4\n' >"$TMP/bad.ids"
expect 2 "logits bad ids" -- "$GMLX" logits "$MODEL" --ids "$TMP/bad.ids" --out "$TMP/l2.f32"
has "$TMP/err" "'x' is not a token id" "bad ids message"
printf '1 2 99999\n' >"$TMP/big.ids"
expect 2 "logits id outside vocab" -- "$GMLX" logits "$MODEL" --ids "$TMP/big.ids" --out "$TMP/l3.f32"
[ ! -e "$TMP/l3.f32" ] && ok || bad "a failed logits run left its output file"

# bench: one parseable line
expect 0 "bench" -- "$GMLX" bench "$MODEL" -p 16 -n 8 -t 1
has "$TMP/out" "^bench: model=model-q4_k_m.gguf load_s=[0-9.]* prompt_tokens=16 prefill_tok_s=[0-9.]* decode_tokens=6 decode_tok_s=[0-9.]*" "bench line"
expect 2 "bench nothing to do" -- "$GMLX" bench "$MODEL" -p 0 -n 0

# gmlx-gen past the file-size limit: an error (not a kill by SIGXFSZ) and no partial file left
(ulimit -f 2048; "$GEN" --arch qwen3moe -q -o "$TMP/lim.gguf") >"$TMP/out" 2>"$TMP/err"
rc=$?
[ "$rc" -eq 1 ] && ok || bad "gmlx-gen past ulimit -f: exit $rc, wanted 1"
has "$TMP/err" "File too large" "gmlx-gen file-size limit message"
[ ! -e "$TMP/lim.gguf.tmp" ] && [ ! -e "$TMP/lim.gguf" ] && ok || bad "gmlx-gen left a partial file"
# a 27-block deepseek2 is what llama.cpp takes for DeepSeek-V2-Lite: refused
expect 2 "gmlx-gen deepseek2 with 27 blocks" -- "$GEN" --preset kimi-k2 --layers 27 --sparse -q -o "$TMP/k27.gguf"
has "$TMP/err" "DeepSeek-V2-Lite" "27-block deepseek2 message"

echo "cli: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
