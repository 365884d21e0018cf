#!/bin/bash
# The configuration file end to end: init over a folder, run ID against run PATH, the precedence
# of flags over overrides over the entry over a profile, errors with FILE:LINE:COL, warnings for
# keys of features gmlx does not have, sync-models adding, removing and re-marking entries with
# the user's comments kept (the result read back by PyYAML, an independent YAML parser), two
# writers at once, and doctor's verdicts.
# Usage: config.sh GMLX FIXTURES GMLX_GEN
set -u
GMLX=$1 FIX=$2 GEN=$3
MODEL=$FIX/trained-qwen3moe/model-q4_k_m.gguf
[ -f "$MODEL" ] || { echo "config.sh: no fixture $MODEL"; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export HOME=$TMP/home XDG_CONFIG_HOME= GMLX_CONFIG=
mkdir -p "$HOME"
cd "$TMP" || exit 1
fails=0 n=0
ok() { n=$((n + 1)); }
bad() { n=$((n + 1)); fails=$((fails + 1)); echo "FAIL: $*"; }
expect() { # expect RC WHAT -- CMD...
  local want=$1 what=$2; shift 3
  "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  [ "$rc" -eq "$want" ] && ok || { bad "$what: exit $rc, wanted $want"; sed 's/^/    /' "$TMP/err" | head -5; }
}
has() { grep -q -- "$2" "$1" && ok || { bad "$3: no '$2'"; sed 's/^/    /' "$1" | head -8; }; }
hasnt() { grep -q -- "$2" "$1" && { bad "$3: has '$2'"; sed 's/^/    /' "$1" | head -5; } || ok; }
# models: of a file as PyYAML reads it: "id=path[,stream]" lines, sorted
models_of() {
  python3 -c '
import sys, yaml
d = yaml.safe_load(open(sys.argv[1])) or {}
for k, v in sorted((d.get("models") or {}).items()):
    print(k + "=" + str(v["path"]) + ("," + str(v["stream"]) if "stream" in v else ""))' "$1"
}

# ---- init ----
mkdir -p lib/sub
cp "$MODEL" lib/Tiny-Q4_K_M.gguf
"$GEN" --arch qwen3moe --layers 2 --experts 64 --experts-used 2 --hidden 1024 --ffn 1024 --expert-ffn 1024 \
  --heads 8 --kv-heads 4 --head-dim 128 --vocab 300 -q -o lib/sub/wide-moe.gguf >/dev/null ||
  { echo "config.sh: gmlx-gen failed"; exit 1; }
touch lib/partial.gguf.part lib/notes.txt
head -c 1000 "$MODEL" >lib/sub/broken.gguf
CFG=$HOME/.config/gmlx/gmlx.yaml
# at 2.8 GiB of RAM the wide model's experts stream (validate says so), the tiny one fits
GMLX_RAM_GB=2.8 GMLX_AVAIL_GB=2.8 "$GMLX" validate lib/sub/wide-moe.gguf >"$TMP/v" 2>&1
has "$TMP/v" "=> streams" "the wide model streams at 2.8 GiB"
GMLX_RAM_GB=2.8 GMLX_AVAIL_GB=2.8 expect 0 "init" -- "$GMLX" init lib
has "$TMP/out" "wrote $CFG (2 model(s) discovered)" "init's summary"
has "$TMP/err" "skipping .*broken.gguf" "init names the unreadable file"
[ "$(models_of "$CFG")" = "tiny-q4=Tiny-Q4_K_M.gguf
wide-moe=sub/wide-moe.gguf,experts" ] && ok || bad "init's models: $(models_of "$CFG")"
expect 1 "init again without --force" -- "$GMLX" init lib
has "$TMP/err" "refusing to overwrite" "init refuses to overwrite"

# ---- run ID is run PATH with the entry's settings ----
"$GMLX" run "$MODEL" --temp 0 -n 12 -p "Extract name and city: In Dublin, Paula turned 54." >"$TMP/want" 2>/dev/null
cat >>"$CFG" <<'YAML'
profiles:
  greedy:                   # a hand-written profile
    sampling: {temperature: 0, max_tokens: 12}
aliases:
  t: tiny-q4@greedy
YAML
expect 0 "run ID@profile through an alias" -- "$GMLX" run t -p "Extract name and city: In Dublin, Paula turned 54."
cmp -s "$TMP/out" "$TMP/want" && ok || bad "run t differs from run PATH: $(cat "$TMP/out")"
has "$TMP/err" "\[config\] 't' -> $TMP/lib/Tiny-Q4_K_M.gguf" "the [config] line"
has "$TMP/err" "decode 12 tokens\|decode [0-9]* tokens" "max_tokens from the profile"
# a typed flag beats the file
expect 0 "typed -n beats max_tokens" -- "$GMLX" run t -n 3 -p "Extract name and city: In Dublin, Paula turned 54."
has "$TMP/err" "decode 3 tokens" "-n 3 typed"
hasnt "$TMP/err" "applied: .*max_tokens" "max_tokens not applied under a typed -n"

# ---- precedence: overrides > entry > profile ----
cat >"$TMP/p.yaml" <<YAML
profiles:
  base: {sampling: {max_tokens: 9, temperature: 0}}
models:
  m:
    path: $MODEL
    profile: base
    overrides:
      sampling: {max_tokens: 5}
YAML
expect 0 "overrides beat the profile" -- "$GMLX" run m --config "$TMP/p.yaml" -p hi --ignore-eos
has "$TMP/err" "decode 5 tokens" "overrides.max_tokens applied"

# ---- errors: FILE:LINE:COL and exit 2 ----
err_case() { # err_case NAME "TEXT" "EXPECTED MESSAGE"
  printf '%b' "$2" >"$TMP/$1.yaml"
  expect 2 "$1 refused" -- "$GMLX" run x --config "$TMP/$1.yaml" -p hi
  has "$TMP/err" "$TMP/$1.yaml:$3" "$1 message"
}
err_case unknown 'models:\n  x:\n    path: a.gguf\n    strem: experts\n' "4:5: models.x: unrecognized key 'strem'"
err_case type 'models:\n  x:\n    path: a.gguf\n    moe_experts: many\n' "4:18: models.x.moe_experts: expected a whole number"
err_case range 'models:\n  x:\n    path: a.gguf\n    moe_layer_shed: 1\n' "4:21: models.x.moe_layer_shed: 1 is out of range"
err_case dup 'models:\n  x:\n    path: a.gguf\n  x:\n    path: b.gguf\n' "4:3: models: duplicate key 'x' (first at line 2)"
err_case stream 'models:\n  x:\n    path: a.gguf\n    stream: sideways\n' "4:13: models.x.stream: 'sideways' is not one of experts, cpu or false"
err_case ambiguous 'models:\n  x:\n    path: a.gguf\n    stream: true\n' "4:13: models.x.stream: .stream: true. is ambiguous"
err_case malformed 'models:\n  x: [a,\n' "3:1: malformed YAML"
err_case overrides 'models:\n  x:\n    path: a.gguf\n    overrides: {load: {kv_bits: 12}}\n' "4:33: models.x.overrides.load.kv_bits: '12' is not one of 8, 16 or 32"
err_case profile 'models:\n  x:\n    path: a.gguf\n    profile: nosuch\n' "2: models.x.profile: unknown profile 'nosuch'"
err_case top 'modles:\n  x: {path: a.gguf}\n' "1:1: the file: unrecognized key 'modles'"
expect 2 "a missing --config" -- "$GMLX" run x --config "$TMP/none.yaml" -p hi
has "$TMP/err" "none.yaml: no such file" "missing --config message"

# ---- warnings: features gmlx does not have, feeders under stream: cpu; not applied, not fatal ----
cat >"$TMP/w.yaml" <<YAML
models:
  m:
    path: $MODEL
    speculative: true
    stream: cpu
    decode_feeder: false
    overrides: {sampling: {temperature: 0, max_tokens: 2, xtc_probability: 0.5, mystery: 1}}
YAML
expect 0 "warnings only" -- "$GMLX" run m --config "$TMP/w.yaml" -p hi
has "$TMP/err" "w.yaml:4:5: warning: models.m.speculative is read but not applied: gmlx does not have speculative decoding (MTP) yet" "speculative warning"
has "$TMP/err" "warning: models.m.decode_feeder does not apply: the entry has stream: cpu" "feeder under stream: cpu"
has "$TMP/err" "xtc_probability is read but not applied" "xtc warning"
has "$TMP/err" "unrecognized key 'mystery' is ignored" "pass-through unknown key warns"
# the feeder switches reach the engine: decode_feeder: false is --no-decode-feeder
cat >"$TMP/f.yaml" <<YAML
models:
  m:
    path: $MODEL
    decode_feeder: false
    prefill_feeder: false
YAML
expect 0 "feeder keys" -- "$GMLX" run m --config "$TMP/f.yaml" -p hi -n 2 --temp 0
has "$TMP/err" "applied: prefill_feeder, decode_feeder" "the feeder keys applied"
# gpu: true is --gpu (where there is no device, the load says why it cannot use one); a bad vram_gb
# is refused with its line
if ! "$GMLX" doctor --no-drive-test 2>/dev/null | grep -q "PASS  gpu"; then
  cat >"$TMP/g.yaml" <<YAML
models:
  m:
    path: $MODEL
    gpu: true
    vram_gb: 4
YAML
  expect 2 "gpu key without a device" -- "$GMLX" run m --config "$TMP/g.yaml" -p hi -n 1
  has "$TMP/err" "gmlx run: --gpu: " "gpu: true reaches the load"
  expect 0 "--no-gpu over the file's gpu: true" -- "$GMLX" run m --config "$TMP/g.yaml" -p hi -n 1 --no-gpu
fi
printf 'models:\n  m:\n    path: %s\n    vram_gb: 0\n' "$MODEL" >"$TMP/v.yaml"
expect 2 "vram_gb 0" -- "$GMLX" run m --config "$TMP/v.yaml" -p hi
has "$TMP/err" "v.yaml:4:" "vram_gb 0 is refused with its line"

# ---- every key's flag is a flag run and chat take ----
while IFS=' ' read -r flag val; do
  [ -n "$flag" ] || continue
  for cmd in run chat; do
    args=("$flag"); [ "$val" != "-" ] && args+=("$val")
    "$GMLX" $cmd "$MODEL" "${args[@]}" --help >/dev/null 2>"$TMP/ferr"
    rc=$?
    [ "$rc" -eq 0 ] && ok || { bad "gmlx $cmd takes $flag: exit $rc"; head -2 "$TMP/ferr"; }
  done
done <<'FLAGS'
--stream-experts -
--stream-cpu -
--stream-fast-disk on
--moe-experts 2
--moe-expert-mass 0.9
--moe-miss-shed 0.9
--moe-layer-shed 0.5
--moe-prestage ranked
--prefill-feeder -
--no-prefill-feeder -
--decode-feeder -
--no-decode-feeder -
--gpu -
--no-gpu -
--vram-gb 8
--system hi
--chat-template-file /dev/null
--no-think -
--think -
--temp 0
--top-p 0.9
--top-k 4
--min-p 0.1
-n 3
--seed 1
--repeat-penalty 1.1
--repeat-last-n 8
--kv-bits 8
--kv-type q8_0
-c 256
-t 1
--prefill-step-size 64
FLAGS

# ---- sync-models: comments survive, entries come and go, stream: experts follows the plan ----
python3 - "$CFG" <<'PY'
import sys
p = sys.argv[1]
s = open(p).read()
s = s.replace("models:\n", "models:\n  # hand-written: my favourite\n", 1)
s = s.replace("    path: Tiny-Q4_K_M.gguf\n", "    path: Tiny-Q4_K_M.gguf   # keep this comment\n    overrides: {load: {kv_bits: 8}}\n", 1)
open(p, "w").write(s)
PY
cp "$CFG" "$TMP/before.yaml"
rm lib/sub/wide-moe.gguf
cp "$MODEL" lib/sub/Second-Q8_0.gguf
GMLX_RAM_GB=2.8 expect 0 "sync-models --dry-run" -- "$GMLX" sync-models --dry-run
has "$TMP/out" "remove:  wide-moe" "dry run: remove"
has "$TMP/out" "add:     second-q8  (sub/Second-Q8_0.gguf)" "dry run: add"
has "$TMP/out" "(dry run - no changes written)" "dry run line"
cmp -s "$CFG" "$TMP/before.yaml" && ok || bad "--dry-run changed the file"
GMLX_RAM_GB=2.8 expect 0 "sync-models" -- "$GMLX" sync-models
has "$TMP/out" "updated $CFG (+1 / -1 / ~0)" "sync summary"
[ "$(models_of "$CFG")" = "second-q8=sub/Second-Q8_0.gguf
tiny-q4=Tiny-Q4_K_M.gguf" ] && ok || bad "models after sync: $(models_of "$CFG")"
for c in "# hand-written: my favourite" "# keep this comment" "# a hand-written profile" "overrides: {load: {kv_bits: 8}}"; do
  has "$CFG" "$c" "sync kept '$c'"
done
GMLX_RAM_GB=2.8 expect 0 "sync-models again" -- "$GMLX" sync-models
has "$TMP/out" "(already in sync)" "a second sync changes nothing"
# the wide model back: added with stream: experts at 2.8 GiB; at 32 GiB the key is dropped
"$GEN" --arch qwen3moe --layers 2 --experts 64 --experts-used 2 --hidden 1024 --ffn 1024 --expert-ffn 1024 \
  --heads 8 --kv-heads 4 --head-dim 128 --vocab 300 -q -o lib/sub/wide-moe.gguf >/dev/null
GMLX_RAM_GB=2.8 GMLX_AVAIL_GB=2.8 expect 0 "sync adds the streamed model" -- "$GMLX" sync-models
models_of "$CFG" | grep -qx "wide-moe=sub/wide-moe.gguf,experts" && ok || bad "wide-moe not marked: $(models_of "$CFG")"
GMLX_RAM_GB=32 GMLX_AVAIL_GB=32 expect 0 "sync drops stream: experts" -- "$GMLX" sync-models
has "$TMP/out" "update:  wide-moe  (stream: experts dropped" "the drop is reported"
models_of "$CFG" | grep -qx "wide-moe=sub/wide-moe.gguf" && ok || bad "stream: experts not dropped: $(models_of "$CFG")"
# an unmounted model_dirs folder: its entries are kept unverified, not removed
cp "$CFG" "$TMP/keep.yaml"
python3 - "$TMP/keep.yaml" "$TMP" <<'PY'
import sys
p, tmp = sys.argv[1], sys.argv[2]
s = open(p).read().replace("    - " + tmp + "/lib\n", "    - " + tmp + "/gone-disk\n    - " + tmp + "/lib\n")
s = s.replace("models:\n", "models:\n  offline:\n    path: on-the-other-disk.gguf\n", 1)
open(p, "w").write(s)
PY
expect 0 "sync with a missing folder" -- "$GMLX" sync-models --config "$TMP/keep.yaml"
has "$TMP/out" "keep:    offline  (unverified" "an entry under a missing folder is kept"
models_of "$TMP/keep.yaml" | grep -q "^offline=" && ok || bad "the unverified entry was removed"

# ---- two writers at once lose nothing ----
mkdir -p a b
cp "$MODEL" a/Alpha-Q4_0.gguf
cp "$MODEL" b/Beta-Q4_0.gguf
"$GMLX" sync-models a >/dev/null 2>&1 &
"$GMLX" sync-models b >/dev/null 2>&1 &
wait
models_of "$CFG" | grep -q "^alpha-q4=" && models_of "$CFG" | grep -q "^beta-q4=" && ok ||
  bad "a concurrent writer lost an entry: $(models_of "$CFG")"
python3 -c 'import sys, yaml; d = yaml.safe_load(open(sys.argv[1])); assert len(d["server"]["model_dirs"]) == 3' "$CFG" &&
  ok || bad "model_dirs after two writers: $(grep -A4 model_dirs "$CFG")"
[ ! -e "$CFG.tmp" ] && ok || bad "a .tmp file was left"

# ---- doctor ----
expect 0 "doctor on a good file" -- "$GMLX" doctor --no-drive-test
has "$TMP/out" "PASS  config" "doctor config row"
has "$TMP/out" "PASS  models .* 5 model(s)" "doctor models row"
for row in memlock io thp disk psi kernels cgroup stream; do has "$TMP/out" "  [A-Z]*  $row " "doctor row $row"; done
expect 0 "doctor --json" -- "$GMLX" doctor --json --no-drive-test
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["ok"] is True and any(c["name"] == "models" for c in d["checks"])' "$TMP/out" &&
  ok || bad "doctor --json: $(head -c 300 "$TMP/out")"
cat >"$TMP/d.yaml" <<YAML
models:
  wide:
    path: $TMP/lib/sub/wide-moe.gguf
    stream: experts
  gone:
    path: $TMP/nowhere.gguf
YAML
GMLX_RAM_GB=2.5 GMLX_AVAIL_GB=2.5 expect 1 "doctor: a missing file and a stream: experts entry that cannot stream" -- "$GMLX" doctor --config "$TMP/d.yaml" --no-drive-test
has "$TMP/out" "FAIL  models .*gone" "doctor names the missing file"
has "$TMP/out" "FAIL  stream .*wide (stream: experts) cannot run on this machine" "doctor: cannot stream here"
has "$TMP/out" "check(s) failed" "doctor summary"
sed -i '/gone:/,$d' "$TMP/d.yaml"
sed -i '/stream: experts/d' "$TMP/d.yaml"
GMLX_RAM_GB=2.8 GMLX_AVAIL_GB=2.8 expect 0 "doctor: an entry that would stream" -- "$GMLX" doctor --config "$TMP/d.yaml"
has "$TMP/out" "WARN  stream .*wide: its experts stream here" "doctor: would stream"
has "$TMP/out" "  [A-Z]*  drive .*wide" "doctor drive row reads the model"
expect 2 "doctor --config missing" -- "$GMLX" doctor --config "$TMP/none.yaml"

echo "config.sh: $((n - fails))/$n passed"
[ "$fails" -eq 0 ]
