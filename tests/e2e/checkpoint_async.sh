#!/usr/bin/env bash
# Checkpoints of asynchronous runs (pipedream, pipedream --vertical-sync, 2bw) on 2 ranks (and 2 x 2 with data
# parallelism): a stop signal
# (SIGUSR1 to one rank) checkpoints at the next step boundary with the pipeline full and exits 75; the
# checkpoint passes kpipe-inspect and holds the older weight versions the micro-batches in flight read;
# --resume then continues bit for bit (the losses of both parts and the final param_checksum equal an
# uninterrupted run's). Checkpoints of every step of a short run, including the first (the rule's max(0, ...))
# and the last but one, resume bit for bit too. Bad combinations: exit 2 with one line.
# Usage: checkpoint_async.sh KPIPE_TRAIN KPIPE_INSPECT MPIEXEC [MPIEXEC_FLAGS...]
set -u
train=$1; inspect=$2; shift 2
source "$(dirname "$0")/checkpoint_common.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
model=(--model.n_layers 2 --model.seq_len 16 --model.d_model 32 --model.n_heads 2 --train.log_every 100000)

for name in pipedream vertical-sync 2bw; do
  case $name in
    pipedream) schedule=(--schedule pipedream) ;;
    vertical-sync) schedule=(--schedule pipedream --vertical-sync 1) ;;
    2bw) schedule=(--schedule 2bw) ;;
  esac
  w="$dir/$name"
  mkdir -p "$w"
  # 1. SIGUSR1 mid-run, resume, compare with the uninterrupted run.
  run=(--pipeline-size 2 --microbatches 4 --batch 8 --steps 400 "${model[@]}" "${schedule[@]}")
  "$@" -n 2 "$train" "${run[@]}" --metrics "$w/straight.jsonl" 2>/dev/null || fail "$name: uninterrupted run failed"
  "$@" -n 2 "$train" "${run[@]}" --checkpoint-dir "$w/ck" --metrics "$w/a.jsonl" 2>"$w/a.err" &
  job=$!
  for _ in $(seq 600); do [ "$(steps_done "$w/a.jsonl")" -ge 3 ] && break; sleep 0.05; done
  kill -USR1 "$(a_rank $job)"
  wait $job
  rc=$?
  [ "$rc" -eq 75 ] || fail "$name: exit code $rc after SIGUSR1, expected 75: $(grep kpipe-train "$w/a.err")"
  stopped=$(steps_done "$w/a.jsonl")
  [ "$stopped" -lt 400 ] || fail "$name: the run finished before the signal arrived"
  file="$w/ck/$(printf 'step-%08d.h5' "$stopped")"
  [ "$(ls "$w"/ck/step-*.h5 2>/dev/null | wc -l)" -eq 1 ] && [ -f "$file" ] || fail "$name: expected exactly $file"
  "$inspect" "$file" >"$w/inspect.txt" 2>&1 || fail "$name: kpipe-inspect $file: $(tail -3 "$w/inspect.txt")"
  # Stage 0 holds an older version in flight under every rule (p - s = 2; vertical sync: p; 2BW: 2): layer 0.
  grep -q "^/weight_versions/1/layers/00/wte " "$w/inspect.txt" || fail "$name: no older weight version of layer 0 in $file"
  "$@" -n 2 "$train" "${run[@]}" --checkpoint-dir "$w/ck" --resume --metrics "$w/b.jsonl" 2>"$w/b.err" ||
    fail "$name: resumed run failed: $(grep kpipe-train "$w/b.err")"
  grep -q "resumed from checkpoint" "$w/b.err" || fail "$name: the resumed run does not say it resumed"
  diff <(losses "$w/straight.jsonl") <(cat <(losses "$w/a.jsonl") <(losses "$w/b.jsonl")) >/dev/null ||
    fail "$name: losses differ from the uninterrupted run (stopped after $stopped steps)"
  [ -n "$(final_checksum "$w/b.jsonl")" ] && [ "$(final_checksum "$w/b.jsonl")" = "$(final_checksum "$w/straight.jsonl")" ] ||
    fail "$name: final param_checksum differs (stopped after $stopped steps)"

  # 2. One micro-batch per step (in flight across several steps): a checkpoint of every step resumes exactly.
  short=(--pipeline-size 2 --microbatches 2 --batch 4 --steps 6 "${model[@]}" "${schedule[@]}")
  "$@" -n 2 "$train" "${short[@]}" --metrics "$w/s.jsonl" 2>/dev/null || fail "$name: short run failed"
  "$@" -n 2 "$train" "${short[@]}" --checkpoint-dir "$w/every" --checkpoint-every 1 --keep 10 --metrics "$w/e.jsonl" \
    2>/dev/null || fail "$name: short run with checkpoints failed"
  [ "$(final_checksum "$w/e.jsonl")" = "$(final_checksum "$w/s.jsonl")" ] || fail "$name: checkpointing changed the run"
  for k in 1 2 5; do
    "$@" -n 2 "$train" "${short[@]}" --checkpoint-dir "$w/r$k" --checkpoint.resume "$w/every/$(printf 'step-%08d.h5' $k)" \
      --metrics "$w/r$k.jsonl" 2>"$w/r$k.err" || fail "$name: resume from step $k failed: $(grep kpipe-train "$w/r$k.err")"
    diff <(losses "$w/s.jsonl" | awk -v k=$k '$1 > k') <(losses "$w/r$k.jsonl") >/dev/null ||
      fail "$name: resumed at step $k: losses differ"
    [ "$(final_checksum "$w/r$k.jsonl")" = "$(final_checksum "$w/s.jsonl")" ] || fail "$name: resumed at step $k: param_checksum differs"
  done
done

# 3. Data parallelism (2 stages x 2 replicas): each update sums the replicas' gradients; replica 0 writes the
# versions in flight, every replica resumes from them, bit for bit.
dp=(--pipeline-size 2 --data-parallel 2 --microbatches 4 --batch 8 --steps 6 "${model[@]}")
for name in pipedream 2bw; do
  w="$dir/dp-$name"
  "$@" -n 4 "$train" "${dp[@]}" --schedule $name --metrics "$w.s.jsonl" 2>/dev/null || fail "dp $name: run failed"
  "$@" -n 4 "$train" "${dp[@]}" --schedule $name --checkpoint-dir "$w" --checkpoint-every 1 --keep 10 \
    --metrics "$w.e.jsonl" 2>/dev/null || fail "dp $name: run with checkpoints failed"
  [ "$(final_checksum "$w.e.jsonl")" = "$(final_checksum "$w.s.jsonl")" ] || fail "dp $name: checkpointing changed the run"
  "$@" -n 4 "$train" "${dp[@]}" --schedule $name --checkpoint-dir "$w.r" --checkpoint.resume "$w/step-00000002.h5" \
    --metrics "$w.r.jsonl" 2>"$w.r.err" || fail "dp $name: resume from step 2 failed: $(grep kpipe-train "$w.r.err")"
  diff <(losses "$w.s.jsonl" | awk '$1 > 2') <(losses "$w.r.jsonl") >/dev/null || fail "dp $name: resumed: losses differ"
  [ "$(final_checksum "$w.r.jsonl")" = "$(final_checksum "$w.s.jsonl")" ] || fail "dp $name: resumed: param_checksum differs"
done

# 4. Bad combinations: exit 2, one line naming the key, on every rank alike.
expect_refused() {  # expect_refused NAME NEEDLE -- COMMAND...
  local what=$1 needle=$2; shift 3
  timeout 60 "$@" >"$dir/out" 2>"$dir/err" </dev/null
  local rc=$? lines
  lines=$(grep -c 'kpipe-train' "$dir/err")
  [ "$rc" -eq 2 ] && [ "$lines" -eq 1 ] && grep -q -- "$needle" "$dir/err" ||
    fail "$what: exit code $rc, $lines lines, expected 2 and one line with '$needle': $(grep kpipe-train "$dir/err")"
}
short=(--pipeline-size 2 --microbatches 2 --batch 4 --steps 6 "${model[@]}")
ck2bw="$dir/2bw/every/step-00000002.h5"
"$@" -n 2 "$train" "${short[@]}" --schedule 1f1b --checkpoint-dir "$dir/sync" --checkpoint-every 2 2>/dev/null || fail "1f1b run failed"
expect_refused "other schedule" "checkpoint.resume" -- "$@" -n 2 "$train" "${short[@]}" --schedule pipedream \
  --checkpoint-dir "$dir/x1" --checkpoint.resume "$ck2bw"
expect_refused "vertical sync changed" "checkpoint.resume" -- "$@" -n 2 "$train" "${short[@]}" --schedule pipedream \
  --vertical-sync 1 --checkpoint-dir "$dir/x2" --checkpoint.resume "$dir/pipedream/every/step-00000002.h5"
expect_refused "other pipeline size" "checkpoint.resume" -- "$@" -n 1 "$train" "${short[@]}" --pipeline-size 1 \
  --schedule 2bw --microbatches 2 --checkpoint-dir "$dir/x3" --checkpoint.resume "$ck2bw"
expect_refused "other micro-batches" "checkpoint.resume" -- "$@" -n 2 "$train" "${short[@]}" --schedule 2bw \
  --microbatches 4 --batch 8 --checkpoint-dir "$dir/x4" --checkpoint.resume "$ck2bw"
expect_refused "other replicas" "pipeline.data_parallel = 2" -- "$@" -n 2 "$train" "${dp[@]}" --data-parallel 1 \
  --schedule pipedream --checkpoint-dir "$dir/x7" --checkpoint.resume "$dir/dp-pipedream/step-00000002.h5"
expect_refused "synchronous checkpoint" "synchronous run" -- "$@" -n 2 "$train" "${short[@]}" --schedule pipedream \
  --checkpoint-dir "$dir/x5" --checkpoint.resume "$dir/sync/step-00000002.h5"
# Three stages, one micro-batch per step: at step 5 of 6 stage 0 has one micro-batch in flight, not two, and
# keeps one older version of two; a longer run would forward two again.
three=(--pipeline-size 3 --microbatches 1 --batch 2 "${model[@]}" --schedule pipedream)
"$@" -n 3 "$train" "${three[@]}" --steps 6 --checkpoint-dir "$dir/p3" --checkpoint-every 5 2>/dev/null || fail "3-stage run failed"
expect_refused "near the end, more steps" "train.steps = 9" -- "$@" -n 3 "$train" "${three[@]}" --steps 9 \
  --checkpoint-dir "$dir/x6" --checkpoint.resume "$dir/p3/step-00000005.h5"
echo "asynchronous checkpoints: $failures failed"
[ $failures -eq 0 ]
