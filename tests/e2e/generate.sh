#!/usr/bin/env bash
# kpipe-generate end to end: the same seed gives the same text on 1 and 2 ranks (bytes, and a BPE model
# that kpipe-prepare trained, decoded through the checkpoint's tokenizer); another seed another text; the text
# and the report line apart on one terminal; bad input exits 2 with one line on every rank.
# Usage: generate.sh KPIPE_PREPARE KPIPE_TRAIN KPIPE_GENERATE MPIEXEC [MPIEXEC_FLAGS...]
set -u
prepare=$1; train=$2; generate=$3; shift 3
mpiexec=("$@")
source "$(dirname "$0")/checkpoint_common.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
model=(--model.n_layers 3 --model.seq_len 32 --batch 8 --microbatches 2)

# Bytes: a model trained on the embedded corpus, on 2 ranks.
"${mpiexec[@]}" -n 2 "$train" "${model[@]}" --pipeline-size 2 --steps 30 --checkpoint-dir "$dir/ck" \
  --checkpoint-every 30 >/dev/null 2>"$dir/train.txt" || { cat "$dir/train.txt"; fail "training (bytes)"; }
args=(--prompt "The cat " --tokens 60 --temperature 0.9 --top-k 20)
one=$("${mpiexec[@]}" -n 1 "$generate" "$dir/ck" "${args[@]}" --seed 5 2>"$dir/err1") || fail "1 rank: $(cat "$dir/err1")"
two=$("${mpiexec[@]}" -n 2 "$generate" "$dir/ck" "${args[@]}" --seed 5 2>"$dir/err2") || fail "2 ranks: $(cat "$dir/err2")"
other=$("${mpiexec[@]}" -n 2 "$generate" "$dir/ck" "${args[@]}" --seed 6 2>/dev/null)
echo "bytes, seed 5, 1 rank:  $(printf '%s' "$one" | head -c 120 | tr '\n' '|')"
[ -n "$one" ] && [ "$one" = "$two" ] || fail "bytes: 1 and 2 ranks differ"
[ "$one" != "$other" ] || fail "bytes: seeds 5 and 6 gave the same text"
[ "${one#The cat }" != "$one" ] || fail "bytes: the text does not start with the prompt"
grep -q "ms per token" "$dir/err2" || fail "no speed line: $(cat "$dir/err2")"
# Text (stdout) and report (stderr) on one terminal under mpiexec: the text whole, then the report, each on
# lines of their own, however mpiexec forwards the two streams. One thread a rank: an OpenMP build's threads
# would make Kokkos warn of oversubscribed cores on the same terminal.
for k in 1 2 3; do
  OMP_NUM_THREADS=1 "${mpiexec[@]}" -n 2 "$generate" "$dir/ck" "${args[@]}" --seed 5 >"$dir/both.txt" 2>&1
  [ "$(head -c "$(printf '%s' "$two" | wc -c)" "$dir/both.txt")" = "$two" ] && [ "$(tail -n 1 "$dir/both.txt" | cut -c1-16)" = "kpipe-generate: " ] &&
    [ "$(wc -l <"$dir/both.txt")" -eq "$(($(printf '%s\n' "$two" | wc -l) + 1))" ] ||
    fail "run $k: the text and the report line run into each other: $(tr '\n' '|' <"$dir/both.txt" | head -c 300)"
done
# Greedy decoding is deterministic too, and a longer text than the window slides along.
g1=$("${mpiexec[@]}" -n 1 "$generate" "$dir/ck" --prompt "count: 1" --tokens 80 --temperature 0 2>/dev/null)
g2=$("${mpiexec[@]}" -n 2 "$generate" "$dir/ck" --prompt "count: 1" --tokens 80 --temperature 0 2>/dev/null)
[ -n "$g1" ] && [ "$g1" = "$g2" ] || fail "greedy: 1 and 2 ranks differ"

# BPE: a tokenizer trained on a text, carried by the token file into the checkpoint.
for i in $(seq 400); do
  echo "line $i: the quick brown fox jumps over the lazy dog, and the dog sleeps ($((i * 7 % 100)))."
done >"$dir/text.txt"
"$prepare" "$dir/text.txt" --tokenizer bpe --vocab-size 300 -o "$dir/bpe.h5" >"$dir/prepare.txt" 2>&1
if grep -q "without SentencePiece" "$dir/prepare.txt"; then
  echo "skipping BPE: $(cat "$dir/prepare.txt")"
else
  [ -s "$dir/bpe.h5" ] || fail "kpipe-prepare --tokenizer bpe: $(cat "$dir/prepare.txt")"
  "${mpiexec[@]}" -n 2 "$train" "${model[@]}" --pipeline-size 2 --steps 30 --data "$dir/bpe.h5" \
    --checkpoint-dir "$dir/bpe" --checkpoint-every 30 >/dev/null 2>"$dir/train.txt" \
    || { cat "$dir/train.txt"; fail "training (bpe)"; }
  grep -q "sentencepiece" "$dir/train.txt" || fail "the BPE run does not say its tokenizer: $(head -1 "$dir/train.txt")"
  b1=$("${mpiexec[@]}" -n 1 "$generate" "$dir/bpe" --prompt "line 7: the" --tokens 40 --seed 3 2>"$dir/err1") \
    || fail "bpe, 1 rank: $(cat "$dir/err1")"
  b2=$("${mpiexec[@]}" -n 2 "$generate" "$dir/bpe" --prompt "line 7: the" --tokens 40 --seed 3 2>/dev/null)
  echo "bpe, seed 3, 1 rank:    $(printf '%s' "$b1" | head -c 120 | tr '\n' '|')"
  [ -n "$b1" ] && [ "$b1" = "$b2" ] || fail "bpe: 1 and 2 ranks differ"
  grep -q "sentencepiece tokenizer" "$dir/err1" || fail "bpe: not decoded by the checkpoint's tokenizer"
  printf '%s' "$b1" | grep -q '▁\|<unk>' && fail "bpe: raw pieces in the text: $b1"
fi

# Bad input: exit 2, one line, on every rank (2 ranks).
expect() {
  local name=$1 needle=$2; shift 2
  "${mpiexec[@]}" -n 2 "$generate" "$@" >/dev/null 2>"$dir/err"
  local rc=$? lines
  lines=$(grep -c 'kpipe-generate' "$dir/err")
  if [ $rc -eq 2 ] && [ "$lines" -eq 1 ] && grep -qF -- "$needle" "$dir/err"; then
    echo "ok   $name: $(grep kpipe-generate "$dir/err")"
  else
    fail "$name: exit $rc, $lines lines, expected 2, 1 line with '$needle': $(cat "$dir/err")"
  fi
}
expect no-checkpoint "none': no such file or directory" "$dir/none" --prompt x
expect temperature "--temperature = -1" "$dir/ck" --prompt x --temperature -1
expect top-k "--top-k = -2" "$dir/ck" --prompt x --top-k -2
expect tokens "--tokens = -5" "$dir/ck" --prompt x --tokens -5
expect empty-prompt "--prompt is empty" "$dir/ck" --prompt ""
expect layout "--pipeline-size = 3" "$dir/ck" --prompt x --pipeline-size 3
echo "$((1 - (failures > 0))) passed, $failures failed"
[ $failures -eq 0 ]
