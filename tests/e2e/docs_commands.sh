#!/usr/bin/env bash
# The docs' commands, as a newcomer runs them, against what the docs say of them: every command of README.md
# (its indented `build/apps/...` and `mpiexec ... build/apps/...` lines, read from the README itself, so that the
# two cannot drift apart), the user guide's kpipe-prepare commands and TOML example, and traces.md's first
# example, each shortened to a few steps (--steps 2; the quick start itself is CI's 20-quickstart job) and the
# bench preset's and the TOML example's model narrowed (d_model 64, seq_len 32: their layouts are the point),
# then checked: exit code 0, the files they write, the lines they print, and what the docs say of them
# (metrics keys, --help's keys, the same text on one rank and on two, the step numbering of every file).
# Usage: docs_commands.sh SOURCE_DIR APPS_DIR MPIEXEC [MPIEXEC_FLAGS...]
set -u
source_dir=$1; apps=$2; shift 2
mpiexec="$*"
source "$source_dir/tests/e2e/checkpoint_common.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir"
passes=0
ok() { passes=$((passes + 1)); }
check() {  # check DESCRIPTION COMMAND...
  local what=$1; shift
  if "$@"; then ok; else fail "$what"; fi
}

# here LINE [STEPS]: a command line of the docs as it runs here: the programs from this build, mpiexec with
# this build's flags, a checkpoint from the first training, kpipe-train shortened to STEPS (2) steps.
here() {
  local line=$1 steps=${2:-2}
  line=$(sed -e "s|build/apps/|$apps/|g" -e "s|^mpiexec |$mpiexec |" -e "s|build/quickstart/checkpoints|ck|g" \
    -e "s| CKPT | ck |g" -e "s|\\(kpipe-train.*--steps \\)[0-9]*|\\1$steps|" <<<"$line")
  if [[ "$line" == *kpipe-train* && "$line" != *--steps* && "$line" != *--help* ]]; then
    line=$(sed "s|\\(kpipe-train[^#]*\\)\\(#.*\\)\\?\$|\\1 --steps $steps \\2|" <<<"$line")
  fi
  if [[ "$line" == *"--preset bench"* || "$line" == *"--config guide.toml"* ]]; then
    line=$(sed "s|\\(kpipe-train[^#]*\\)\\(#.*\\)\\?\$|\\1 --model.d_model 64 --model.seq_len 32 \\2|" <<<"$line")
  fi
  echo "$line"
}
# run NAME LINE [STEPS]: the docs' line (programs as build/apps/...), run here; exit code 0 wanted. Its output
# in NAME.out, NAME.err.
run() {
  local name=$1 line
  line=$(here "$2" "${3:-2}")
  timeout 120 bash -c "$line" >"$name.out" 2>"$name.err" </dev/null
  local rc=$?
  [ "$rc" -eq 0 ] && ok || fail "exit code $rc: $2: $(tail -n 3 "$name.err")"
}

# Inputs the docs assume: a text corpus (corpus.txt, news.txt and two directories), the user guide's TOML.
for k in $(seq 3000); do echo "line $k: the cat sees the dog near the river, and the dog sees the cat again."; done >corpus.txt
mkdir -p books wiki
head -n 500 corpus.txt >books/a.txt; tail -n 500 corpus.txt >wiki/b.txt; head -n 300 corpus.txt >news.txt
sed -n '/^```toml$/,/^```$/p' "$source_dir/docs/user-guide.md" | sed '1d;$d' >guide.toml
check "the user guide has a TOML example" test -s guide.toml
sed '/^\[pipeline\]/,$d' guide.toml >run.toml  # the README's `--config run.toml` runs on one rank
pipeline_size=$(sed -n 's/^pipeline_size = //p' guide.toml)
run guide "mpiexec -n $pipeline_size build/apps/kpipe-train --config guide.toml"
check "the user guide's TOML: its zb-h1 pipeline of $pipeline_size stages trains" grep -q "^done: 2 steps" guide.err

# README.md's commands, in order.
mapfile -t readme < <(grep -E '^    (build/apps/|mpiexec -n [0-9]+ build/apps/)' "$source_dir/README.md" | sed 's/^ *//')
check "the README has commands to run (found ${#readme[@]})" test "${#readme[@]}" -ge 8
k=0
for line in "${readme[@]}"; do
  k=$((k + 1))
  name=readme$k
  case "$line" in
    *kpipe-generate*)
      [ -d ck ] || fail "no checkpoint for: $line"
      run "$name" "$line"
      check "$line: the text continues the prompt" grep -q "^The cat " "$name.out"
      check "$line: the text ends its line" test "$(tail -c 1 "$name.out" | od -An -c | tr -d ' ')" = '\n'
      check "$line: one report line on stderr" test "$(grep -c '^kpipe-generate: ' "$name.err")" -eq 1
      if [[ "$line" == mpiexec* ]]; then  # "the same text as on one rank"
        run "$name.one" "$(sed 's|^mpiexec -n [0-9]* ||' <<<"$line")"
        check "$line: the same text as on one rank" cmp -s "$name.out" "$name.one.out"
      fi
      ;;
    *"kpipe-train"*"--help"*)
      run "$name" "$line"
      # "every key, with its default": each key of the user guide's table.
      keys=$(sed -n 's/^| `\([a-z_]*\.[a-z_]*\)`.*/\1/p' "$source_dir/docs/user-guide.md")
      missing=$(for key in $keys; do grep -q -- "--$key" "$name.out" || echo "$key"; done)
      check "kpipe-train --help lists every key of the user guide (missing: $missing)" test -z "$missing"
      ;;
    *kpipe-train*)
      run "$name" "$line"
      check "$line: progress from step 1" grep -q "^step     1/2 |" "$name.err"
      check "$line: done" grep -q "^done: 2 steps" "$name.err"
      if [[ "$line" == *--metrics* ]]; then
        metrics=$(sed 's/.*--metrics \([^ ]*\).*/\1/' <<<"$line")
        check "$line: the metrics the README names" python3 - "$metrics" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
steps = [l for l in lines if "step_seconds" in l]
final = [l for l in lines if l.get("final")]
assert [l["step"] for l in steps] == [1, 2], steps
assert all({"step", "loss", "lr", "grad_norm", "tokens_per_s"} <= l.keys() for l in steps), steps
assert len(final) == 1 and {"val_loss", "param_checksum"} <= final[0].keys(), final
PY
        # The checkpoint the generate commands read.
        run "$name.ck" "build/apps/kpipe-train --data corpus.txt --checkpoint-dir ck --checkpoint-every 2"
      fi
      ;;
    *kpipe-sim*)
      run "$name" "$line"
      svg=$(sed -n 's/.*--svg \([^ ]*\).*/\1/p' <<<"$line")
      [ -z "$svg" ] || check "$line: $svg drawn" grep -q "<svg" "$svg"
      ;;
    *) run "$name" "$line" ;;
  esac
done

# The user guide's kpipe-prepare commands (BPE where this kpipe is built with SentencePiece).
bpe=yes
"$apps/kpipe-prepare" news.txt -o probe.h5 --tokenizer bpe --vocab-size 300 2>&1 | grep -q "without SentencePiece" && bpe=no
mapfile -t prepare < <(grep -E '^    kpipe-prepare ' "$source_dir/docs/user-guide.md" | sed 's/^ *//')
check "the user guide has kpipe-prepare commands" test "${#prepare[@]}" -ge 3
k=0
for line in "${prepare[@]}"; do
  k=$((k + 1))
  if [[ "$line" == *"--tokenizer bpe"* ]] && [ "$bpe" = no ]; then
    echo "skipping '$line': this kpipe is built without SentencePiece"; continue
  fi
  run "prepare$k" "build/apps/$line"
  out=$(sed -n 's/.*-o \([^ ]*\).*/\1/p' <<<"$line")
  check "$line: $out written" test -s "$out"
  check "$line: its summary line" grep -q "^kpipe-prepare: wrote $out: " "prepare$k.out"
  if [[ "$line" == *--synthetic*--tokens* ]]; then
    tokens=$(sed -n 's/.*--tokens \([0-9]*\).*/\1/p' <<<"$line")
    check "$line: train and validation hold the $tokens tokens" python3 - "prepare$k.out" "$tokens" <<'PY'
import re, sys
m = re.search(r"train (\d+) tokens, validation (\d+) tokens", open(sys.argv[1]).read())
assert m and int(m[1]) + int(m[2]) == int(sys.argv[2]), m
PY
  fi
done

# traces.md's example, 20 steps: a trace every 10 steps (steps 10 and 20), a timeline of every step.
mapfile -t traces < <(sed -n '/^```sh$/,/^```$/p' "$source_dir/docs/traces.md" | sed '1d;$d' | sed -e ':a' -e '/\\$/N; s/\\\n//; ta')
check "traces.md's example has 3 commands" test "${#traces[@]}" -eq 3
run traces1 "$(sed 's|\(mpiexec -n [0-9]* \)kpipe-|\1build/apps/kpipe-|' <<<"${traces[0]}")" 20
run traces2 "build/apps/${traces[1]}"
check "every 10 steps, the layers \"0,layers/0*\" selects" \
  grep -q "^activation trace trace.h5: every 10 steps, layers '0,layers/0\*'" traces2.out
check "... output and gradient of layers 0 to 3" test "$(grep -cE '^[0-3] +(output|gradient) ' traces2.out)" -eq 8
check "... each traced at steps 10 and 20: 2 steps" test "$(grep -cE '^[0-3] +(output|gradient) +[0-9]+ +2 ' traces2.out)" -eq 8
run traces3 "build/apps/${traces[2]}"
check "the timeline's last step is step 20" grep -q "^step 20 (seconds since" traces3.out
check "Chrome trace and SVG written" test -s timeline.json -a -s timeline.svg

echo "$passes passed, $failures failed"
[ "$failures" -eq 0 ]
