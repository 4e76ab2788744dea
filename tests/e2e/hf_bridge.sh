#!/usr/bin/env bash
# kpipe-export and kpipe-import without transformers (tests/hf/ has the tests against it): import(export(checkpoint))
# keeps the param_checksum, for bytes and BPE and for an asynchronous run's checkpoint on 2 stages; --init-from
# trains from an import on 2 ranks; what kpipe cannot represent, and damaged files, exit 2 with one line and nothing
# written.
# Usage: hf_bridge.sh KPIPE_PREPARE KPIPE_TRAIN KPIPE_EXPORT KPIPE_IMPORT KPIPE_INSPECT MPIEXEC [MPIEXEC_FLAGS...]
set -u
prepare=$1; train=$2; export_=$3; import=$4; inspect=$5; shift 5
mpiexec=("$@")
source "$(dirname "$0")/checkpoint_common.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
model=(--model.n_layers 2 --model.seq_len 32 --batch 8 --microbatches 2)
checksum() { "$inspect" "$1" | sed -n 's/^param_checksum //p'; }

round_trip() {  # round_trip NAME CHECKPOINT
  local name=$1 ck=$2
  "$export_" "$ck" -o "$dir/$name-hf" >"$dir/out" 2>&1 || fail "$name: export: $(cat "$dir/out")"
  "$import" "$dir/$name-hf" -o "$dir/$name.h5" >"$dir/out" 2>&1 || fail "$name: import: $(cat "$dir/out")"
  local a b
  a=$(checksum "$ck") b=$(checksum "$dir/$name.h5")
  if [ -n "$a" ] && [ "$a" = "$b" ]; then echo "ok   $name: import(export(checkpoint)) has its param_checksum $a"
  else fail "$name: param_checksum $a, after export and import $b"; fi
}

# An asynchronous run on 2 stages, checkpointed mid-run (weight versions in flight): /model is what is exported.
"${mpiexec[@]}" -n 2 "$train" "${model[@]}" --pipeline-size 2 --schedule pipedream --steps 12 --checkpoint-dir "$dir/async" \
  --checkpoint-every 6 >/dev/null 2>"$dir/train.txt" || { cat "$dir/train.txt"; fail "training (pipedream)"; }
round_trip async "$dir/async/step-00000006.h5"
# BPE: the SentencePiece model travels as tokenizer.json and tokenizer.model and comes back.
for i in $(seq 300); do echo "line $i: the quick brown fox jumps over the lazy dog  ($((i * 7 % 100)))."; done >"$dir/text.txt"
"$prepare" "$dir/text.txt" --tokenizer bpe --vocab-size 300 -o "$dir/bpe.h5" >/dev/null 2>&1
if [ -s "$dir/bpe.h5" ]; then
  "$train" "${model[@]}" --steps 4 --data "$dir/bpe.h5" --checkpoint-dir "$dir/bpe" --checkpoint-every 4 >/dev/null 2>&1 ||
    fail "training (bpe)"
  round_trip bpe "$dir/bpe"
  "$inspect" "$dir/bpe.h5" 2>/dev/null | grep -q "tokenizer: sentencepiece, vocabulary 300" || fail "bpe: the tokenizer did not come back"
fi

# --init-from the import, on 2 ranks with another schedule: it trains; a model key that differs is refused.
"${mpiexec[@]}" -n 2 "$train" --init-from "$dir/async.h5" --pipeline-size 2 --schedule gpipe --steps 2 --batch 4 \
  --microbatches 2 >"$dir/out" 2>&1 && grep -q "initialized from" "$dir/out" && echo "ok   --init-from an import on 2 ranks" ||
  fail "--init-from: $(tail -3 "$dir/out")"

expect() {  # expect NAME NEEDLE OUTPUT PROGRAM ARGS...: exit 2, one line naming NEEDLE, nothing written at OUTPUT
  local name=$1 needle=$2 output=$3; shift 3
  "$@" >/dev/null 2>"$dir/err"
  local rc=$? lines
  lines=$(grep -c 'error' "$dir/err")
  if [ $rc -eq 2 ] && [ "$lines" -eq 1 ] && grep -qF -- "$needle" "$dir/err" && ! ls "$output"* >/dev/null 2>&1; then
    echo "ok   $name: $(head -c 200 "$dir/err")"
  else
    fail "$name: exit $rc, $lines error lines, wanted '$needle': $(cat "$dir/err"); written: $(ls "$output"* 2>&1)"
  fi
}
hf=$dir/async-hf
variant() { rm -rf "$dir/v"; cp -r "$hf" "$dir/v"; }
variant; sed -i 's/"model_type": "gpt2"/"model_type": "llama"/' "$dir/v/config.json"
expect "another model type" 'model_type = "llama"' "$dir/x.h5" "$import" "$dir/v" -o "$dir/x.h5"
variant; sed -i 's/"activation_function": "gelu_new"/"activation_function": "relu"/' "$dir/v/config.json"
expect "another activation" 'activation_function = "relu"' "$dir/x.h5" "$import" "$dir/v" -o "$dir/x.h5"
variant; sed -i 's/"n_positions": 32/"n_positions": 16/' "$dir/v/config.json"
expect "a shape that does not match the config" "tensor transformer.wpe.weight has shape [32, 64], config.json makes it [16, 64]" \
  "$dir/x.h5" "$import" "$dir/v" -o "$dir/x.h5"
variant; LC_ALL=C sed -i 's/transformer.h.1.ln_2.bias/transformer.h.1.ln_2.bixs/' "$dir/v/model.safetensors"
expect "a missing tensor" "tensor transformer.h.1.ln_2.bias is missing" "$dir/x.h5" "$import" "$dir/v" -o "$dir/x.h5"
variant; LC_ALL=C sed -i 's/"lm_head.weight"/"lm_head.extra_"/' "$dir/v/model.safetensors"
sed -i 's/"tie_word_embeddings": false/"tie_word_embeddings": true/' "$dir/v/config.json"
expect "a tensor GPT-2 does not have" "tensor lm_head.extra_ is not part of GPT-2" "$dir/x.h5" "$import" "$dir/v" -o "$dir/x.h5"
variant; head -c 5000 "$hf/model.safetensors" >"$dir/v/model.safetensors"
expect "a truncated safetensors file" "truncated" "$dir/x.h5" "$import" "$dir/v" -o "$dir/x.h5"
variant; printf '\xff\xff\xff\xff\xff\xff\xff\x7f' | dd of="$dir/v/model.safetensors" conv=notrunc 2>/dev/null
expect "a damaged header length" "header length" "$dir/x.h5" "$import" "$dir/v" -o "$dir/x.h5"
variant; rm "$dir/v/tokenizer.json"
expect "no tokenizer" "no tokenizer.json" "$dir/x.h5" "$import" "$dir/v" -o "$dir/x.h5"
variant; rm "$dir/v/model.safetensors"
expect "no weights" "no model.safetensors" "$dir/x.h5" "$import" "$dir/v" -o "$dir/x.h5"
expect "import: --seq-len beyond n_positions" "--seq-len = 64" "$dir/x.h5" "$import" "$hf" -o "$dir/x.h5" --seq-len 64
expect "export: no checkpoint" "no such file" "$dir/y" "$export_" "$dir/none" -o "$dir/y"
expect "export: another dtype" "--dtype = fp16" "$dir/y" "$export_" "$dir/async.h5" -o "$dir/y" --dtype fp16
expect "--init-from: another model" "model.d_model = 32: checkpoint.init_from" "$dir/none" "$train" \
  --init-from "$dir/async.h5" --model.d_model 32 --steps 1
expect "--resume from an import" "holds weights only" "$dir/none" "$train" --model.seq_len 32 --checkpoint.resume \
  "$dir/async.h5" --steps 1
[ "$failures" -eq 0 ] || exit 1
echo "hf_bridge: all passed"
