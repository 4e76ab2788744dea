#!/usr/bin/env bash
# kpipe-eval, kpipe-prepare and kpipe-sim on bad input: exit code 2 and one line naming the option and the value (no
# SIGFPE, no file written over a device node, a FIFO refused and never opened, more memory than there is named
# with its figure), each within a bound.
# Usage: tools_input.sh KPIPE_PREPARE KPIPE_EVAL KPIPE_TRAIN KPIPE_SIM MPIEXEC [MPIEXEC_FLAGS...]
set -u
prepare=$1; eval_app=$2; train=$3; sim=$4; shift 4
source "$(dirname "$0")/checkpoint_common.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
passes=0
expect() {  # expect NAME NEEDLE -- COMMAND...
  local name=$1 needle=$2; shift 3
  timeout 60 "$@" >/dev/null 2>"$dir/err" </dev/null
  local rc=$?
  if [ "$rc" -eq 2 ] && [ "$(grep -c 'error:' "$dir/err")" -eq 1 ] && grep -qF -- "$needle" "$dir/err"; then
    passes=$((passes + 1)); echo "ok   $name: $(grep 'error:' "$dir/err")"
  else
    fail "$name: exit $rc: $(head -3 "$dir/err")"
  fi
}
echo "some text to tokenize, long enough for a window or two of the tiny model: $(seq 300 | tr '\n' ' ')" >"$dir/text.txt"
"$@" -n 1 "$train" --steps 2 --checkpoint-dir "$dir/ck" --checkpoint-every 2 2>/dev/null || fail "training"

# Times so large that a simulated step overflowed to infinity (an abort on a "deadlock", exit 134).
expect sim-latency "--latency: 1e308 is not a number from 0 to 1e15" -- "$sim" schedule --latency 1e308
expect sim-cost "--cost-f: 1e308" -- "$sim" schedule --cost-f 1e308
expect sim-recommend-latency "--latency: 1e308" -- "$sim" recommend --ranks 2 --memory-per-rank 1GiB --latency 1e308
expect eval-pipeline-size-0 "--pipeline-size = 0" -- "$eval_app" "$dir/ck" --data "$dir/text.txt" --pipeline-size 0
expect eval-max-windows "--max-windows = -1" -- "$eval_app" "$dir/ck" --data "$dir/text.txt" --max-windows -1
mkdir -p "$dir/old/step-00000004" && touch "$dir/old/step-00000004/checkpoint.h5"  # format 1: a directory
expect eval-old-format "format_version 1" -- "$eval_app" "$dir/old/step-00000004" --data "$dir/text.txt"
expect prepare-dev-full "character device" -- "$prepare" "$dir/text.txt" -o /dev/full
[ -c /dev/full ] && passes=$((passes + 1)) || fail "/dev/full is no longer a character device"
mkfifo "$dir/fifo"
expect prepare-fifo-input "FIFO" -- "$prepare" "$dir/fifo" -o "$dir/out.h5"
expect eval-fifo-data "--data = $dir/fifo: cannot open (is a FIFO" -- "$eval_app" "$dir/ck" --data "$dir/fifo"
expect eval-fifo-checkpoint "checkpoint '$dir/fifo': cannot open (is a FIFO" -- "$eval_app" "$dir/fifo" --data "$dir/text.txt"
# Too little memory for what the input asks (an address-space limit of 100 MB): named, with the memory it needs.
# A synthetic corpus of 10^11 tokens is streamed, in bounded memory: it starts (and is stopped here).
seq 1 2000000 | sed 's/.*/line & of a text to train a tokenizer on/' >"$dir/big.txt"  # 80 MB
if ! "$prepare" "$dir/text.txt" -o "$dir/probe.h5" --tokenizer bpe --vocab-size 300 2>&1 | grep -q "without SentencePiece"; then
  expect prepare-bpe-memory "--sample-bytes = 104857600: training the BPE model on a sample of" -- \
    bash -c 'ulimit -v 100000; exec "$0" "$@"' "$prepare" "$dir/big.txt" -o "$dir/big.h5" --tokenizer bpe
  grep -q "more than the .* this process can get: a smaller --sample-bytes" "$dir/err" && passes=$((passes + 1)) ||
    fail "prepare-bpe-memory: $(cat "$dir/err")"
fi
(ulimit -v 1000000; timeout 3 "$prepare" --synthetic --tokens 100000000000 -o "$dir/huge.h5" --quiet) 2>"$dir/err"
rc=$?
[ "$rc" -eq 124 ] && [ ! -s "$dir/err" ] && passes=$((passes + 1)) ||
  fail "--synthetic --tokens 1e11 under a 1 GB limit: exit $rc, not streamed: $(cat "$dir/err")"
expect train-layers-memory "model.n_layers = 1000000000" -- "$train" --model.n_layers 1000000000
grep -q "need at least .* TiB per rank on 1 stage" "$dir/err" && passes=$((passes + 1)) || fail "n_layers 1e9: $(cat "$dir/err")"
echo "$passes passed, $failures failed"
[ $failures -eq 0 ]
