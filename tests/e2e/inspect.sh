#!/usr/bin/env bash
# Traces, timelines and kpipe-inspect as a user runs them: a two-stage 1F1B run writes a timeline, an
# activation trace and checkpoints; kpipe-inspect reads each (Chrome trace checked event by event; steps
# numbered from 1, as the progress lines and the checkpoints number them), diff tells checkpoints apart by its
# exit code, bad input (a file that is no checkpoint among it) gets one line and exit 2, an asynchronous run's
# timeline is drawn with its updates, and a run whose loss turns non-finite (huge learning rate, no clipping)
# stops with exit code 4 after train.max_skipped_steps.
# Usage: inspect.sh KPIPE_TRAIN KPIPE_INSPECT MPIEXEC [MPIEXEC_FLAGS...]
set -u
train=$1; inspect=$2; shift 2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir"
failures=0; passes=0
check() {  # check DESCRIPTION COMMAND...: the command must succeed
  local what=$1; shift
  if "$@"; then passes=$((passes + 1)); else echo "FAIL: $what"; failures=$((failures + 1)); fi
}
expect_rc() {  # expect_rc WANT DESCRIPTION COMMAND...: exit code WANT, output in out.txt / err.txt
  local want=$1 what=$2; shift 2
  "$@" >out.txt 2>err.txt
  local rc=$?
  check "$what: exit code $rc, expected $want ($(head -c 300 err.txt))" test "$rc" -eq "$want"
}

# 1. Two stages, 4 micro-batches, 3 steps: timeline every step, trace every 2 steps, checkpoints every step.
expect_rc 0 "two-stage run" "$@" -n 2 "$train" --pipeline-size 2 --microbatches 4 --steps 3 --timeline tl.h5 \
  --trace tr.h5 --trace-every 2 --trace-layers "0,layers/02,3" --checkpoint-dir ck --checkpoint-every 1 --keep 3
cp err.txt train.txt

# 2. Timeline: bubble per rank printed, SVG drawn, Chrome trace with every action of every rank.
expect_rc 0 "inspect timeline" "$inspect" timeline tl.h5 --chrome chrome.json --svg tl.svg
check "bubble printed per rank" grep -q "rank   1:" out.txt
check "the last step shown is step 3, one chunk per rank" \
  grep -q "^timeline tl.h5: schedule 1f1b, 2 ranks (pipeline 2 x data parallel 1), 1 chunk per rank, 4 micro-batches per replica, 3 steps" out.txt
check "... its chart titled step 3" grep -q "^step 3 (seconds" out.txt
expect_rc 0 "inspect timeline --step 1: the first step" "$inspect" timeline tl.h5 --step 1
check "... shown" grep -q "^step 1 (seconds" out.txt
check "the trace: steps 2 (--trace-every 2)" grep -q "^activation trace tr.h5: every 2 steps" <("$inspect" activations tr.h5)
measured=$(sed -n 's/^pipeline: bubble measured \([0-9.]*\),.*/\1/p' train.txt)
check "kpipe-inspect's measured bubble is kpipe-train's ($measured): one definition, the same timings" \
  test -n "$measured" -a "$measured" = "$(sed -n 's/^  mean    : //p' out.txt)"
check "SVG written" grep -q "<svg" tl.svg
check "Chrome trace: every action of each rank, per step, start <= end" python3 - <<'PY'
import collections, json, sys
events = [e for e in json.load(open("chrome.json"))["traceEvents"] if e["ph"] == "X"]
count = collections.Counter((e["args"]["step"], e["tid"], e["cat"], e["name"][:2]) for e in events)
ok = True
for step in (1, 2, 3):  # numbered as the progress lines and checkpoints number them
    for rank in range(2):
        for kind in ("F", "B"):  # 1F1B: four forwards and four backwards on each rank, every step
            n = sum(v for (s, r, c, _), v in count.items() if (s, r, c) == (step, rank, kind))
            if n != 4: print(f"step {step} rank {rank}: {n} {kind}, expected 4"); ok = False
        # Rank 0 sends 4 activations and receives 4 gradients; rank 1 the other way round.
        want = {"sa": 4, "rg": 4} if rank == 0 else {"ra": 4, "sg": 4}
        for token, n_want in want.items():
            n = count.get((step, rank, "message", token), 0)
            if n != n_want: print(f"step {step} rank {rank}: {n} {token}, expected {n_want}"); ok = False
compute = [e for e in events if e["cat"] in "FBIW"]
if len(compute) != 3 * 2 * 8: print(f"{len(compute)} compute events, expected 48"); ok = False
if any(e["dur"] < 0 for e in events): print("an event ends before it starts"); ok = False
if any(e["args"]["bytes"] <= 0 for e in events if e["cat"] == "message"): print("a message moved no bytes"); ok = False
sys.exit(0 if ok else 1)
PY

# 3. Activation trace: the three chosen layers, output and gradient, all finite.
expect_rc 0 "inspect activations" "$inspect" activations tr.h5
check "six series (layers 0, 2, 3)" test "$(grep -cE '^[023] +(output|gradient)' out.txt)" -eq 6
check "all values finite" grep -q "all values finite" out.txt

# 4. Checkpoints: inspect, diff of different steps (1) and of a checkpoint with itself (0).
expect_rc 0 "inspect checkpoint" "$inspect" ck
check "step and tensors listed" grep -q "^step 3 " out.txt
check "model tensor with type and shape" grep -qE "/model/layers/00/wte +float32 +\[256, 64\]" out.txt
check "the tokenizer, not as a tensor" grep -q "^tokenizer: bytes, vocabulary 256" out.txt
check "no /tokenizer dataset among the tensors" test "$(grep -c "^/tokenizer" out.txt)" -eq 0
check "every byte verified" grep -q "^verified: " out.txt
# HDF5's own tools see the whole model in the one file (no external links: HDF5_EXT_PREFIX changes nothing).
if command -v h5dump >/dev/null; then
  datasets=$(sed -n 's/^\([0-9]*\) datasets$/\1/p' out.txt)
  HDF5_EXT_PREFIX=/nonexistent h5dump -H ck/step-00000003.h5 >dump.txt 2>&1
  check "h5dump -H lists every dataset and the manifest ($datasets + 1)" test "$(grep -c '^ *DATASET "' dump.txt)" -eq "$((datasets + 1))"
  check "h5dump -H shows a tensor's shape" grep -A 2 -E '^ *DATASET "wte"' dump.txt -m 1 >wte.txt
  check "... [256, 64]" grep -q 'SIMPLE { ( 256, 64 )' wte.txt
else
  echo "skipping the h5dump checks: no h5dump here (Debian: hdf5-tools)"
fi
expect_rc 1 "diff of steps 1 and 3" "$inspect" diff ck/step-00000001.h5 ck/step-00000003.h5
check "diff names the differing count" grep -q "datasets differ" out.txt
expect_rc 0 "diff of a checkpoint with itself" "$inspect" diff ck ck/step-00000003.h5
# A damaged checkpoint (a flipped byte in the middle, where tensor bytes are) is named and exits 3; so is one
# whose file holds another step.
cp ck/step-00000003.h5 damaged.h5
python3 -c "
import sys; b = bytearray(open('damaged.h5', 'rb').read()); b[len(b) // 2] ^= 0x40; open('damaged.h5', 'wb').write(b)"
expect_rc 3 "inspect a damaged checkpoint" "$inspect" damaged.h5
check "the damaged dataset is named" grep -q "DAMAGED: checkpoint file 'damaged.h5': dataset /" out.txt
mkdir other && cp ck/step-00000002.h5 other/step-00000003.h5
expect_rc 3 "inspect a file of another step under this step's name" "$inspect" other/step-00000003.h5
check "the step mismatch is named" grep -q "name says step 3, its manifest step 2" out.txt

# 5. Bad input: exit 2, nothing on stdout and one line on stderr. Files that are no checkpoint (a text, a trace,
#    a timeline: a mistyped path) are bad input, not a damaged checkpoint (exit 3).
echo "some text" >text.txt
for args in "missing-dir" "timeline tr.h5" "activations tl.h5" "diff ck" "timeline tl.h5 --step 99" \
            "timeline tl.h5 --step -1" "timeline tl.h5 --step 0" "timeline tl.h5 --svg /dev/full" \
            "activations missing.h5" "timeline tl.h5 --bogus" "text.txt" "tr.h5" "tl.h5" ""; do
  # shellcheck disable=SC2086
  expect_rc 2 "kpipe-inspect $args" "$inspect" $args
  check "kpipe-inspect $args: one line on stderr, none on stdout" test "$(wc -l <err.txt)" -eq 1 -a ! -s out.txt
  check "kpipe-inspect $args: the line is kpipe-inspect's" grep -q "^kpipe-inspect: error: " err.txt
done
check "a text is named as not HDF5" grep -q "text.txt: not a kpipe checkpoint: not an HDF5 file" \
  <("$inspect" text.txt 2>&1)
check "a trace is named as a trace" grep -q "tr.h5: not a kpipe checkpoint: an HDF5 file of format 'kpipe-activation-trace'" \
  <("$inspect" tr.h5 2>&1)
# The help texts name the program and the command as typed.
check "help: Usage: kpipe-inspect" grep -q "^Usage: kpipe-inspect \[OPTIONS\] \[CKPT\] \[SUBCOMMAND\]" <("$inspect" --help)
check "timeline --help: Usage: kpipe-inspect timeline" grep -q "^Usage: kpipe-inspect timeline \[OPTIONS\] FILE" \
  <("$inspect" timeline --help)
check "diff --help: its exit codes" grep -q "the checkpoints differ" <("$inspect" diff --help)
# An asynchronous run's timeline: drawn with its updates (U), its bubble measured.
expect_rc 0 "pipedream run" "$@" -n 2 "$train" --pipeline-size 2 --microbatches 4 --steps 3 --schedule pipedream \
  --timeline async.h5
expect_rc 0 "inspect an asynchronous timeline" "$inspect" timeline async.h5
check "updates drawn" grep -qE "^rank 0 \|.*U" out.txt
check "bubble measured" grep -q "^  mean    : 0\." out.txt

# 6. Non-finite: lr 1e30 without clipping blows the weights up after step 1; steps 2.. are skipped on every
#    rank and the run stops with exit code 4 after 3 of them in a row.
expect_rc 4 "non-finite run stops" "$@" -n 2 "$train" --pipeline-size 2 --microbatches 2 --steps 20 --lr 1e30 \
  --optim.grad_clip 0 --train.max_skipped_steps 3 --metrics nf.jsonl --trace nf.h5 --trace-layers 3
check "skipped steps reported" grep -q "skipped: loss" err.txt
check "stop explained" grep -q "train.max_skipped_steps = 3" err.txt
check "three skipped steps in the metrics" test "$(grep -c '"skipped":true' nf.jsonl)" -eq 3
check "the loss really was not finite" grep -q '"loss":null' nf.jsonl
expect_rc 0 "inspect the non-finite trace" "$inspect" activations nf.h5
check "non-finite values shown in the trace" grep -q "non-finite values in" out.txt

# 7. Mixed precision: a bf16 run's checkpoint says so (its tensors are the fp32 masters), and its trace names
#    the dtype its activations were stored in; an fp32 run resumes from it.
expect_rc 0 "bf16 run" "$@" -n 2 "$train" --pipeline-size 2 --microbatches 2 --steps 2 --precision bf16 \
  --checkpoint-dir bf --checkpoint-every 2 --trace bf.h5 --trace-layers 1
expect_rc 0 "inspect the bf16 checkpoint" "$inspect" bf
check "precision shown" grep -q "precision bf16 (float32 masters)" out.txt
expect_rc 0 "inspect the bf16 trace" "$inspect" activations bf.h5
check "trace dtype shown" grep -q "tensors stored in bf16" out.txt
expect_rc 0 "an fp32 run resumes from the bf16 checkpoint" "$@" -n 2 "$train" --pipeline-size 2 --microbatches 2 \
  --steps 3 --checkpoint-dir bf --resume
check "resumed at step 2" grep -q "resumed from checkpoint" err.txt

echo "$passes passed, $failures failed"
[ "$failures" -eq 0 ]
