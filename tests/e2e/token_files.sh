#!/usr/bin/env bash
# Token files end to end: kpipe-prepare streams text from files and directories (a progress line with MB/s
# and an ETA; the same file as the text in one piece), kpipe-train on it gives the same weights on 1 and 2
# ranks; and bad input: a truncated token file, a damaged chunk (kpipe-train reports it when read, kpipe-eval
# before any work), a directory holding an unreadable file, an empty split. Each is exit code 2 with one line
# naming the file, within a bound, and nothing half-written is ever left under the output's name (an older
# file there stays as it was).
# Usage: token_files.sh KPIPE_PREPARE KPIPE_TRAIN KPIPE_EVAL MPIEXEC [MPIEXEC_FLAGS...]
set -u
prepare=$1; train=$2; eval_app=$3; shift 3
mpiexec=("$@")
source "$(dirname "$0")/checkpoint_common.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
passes=0
ok() { passes=$((passes + 1)); echo "ok   $*"; }

# expect NAME PROGRAM LINES NEEDLE... -- COMMAND...: exit code 2 and LINES lines "PROGRAM...error:" (any: at
# least one) on stderr, holding every NEEDLE.
expect() {
  local name=$1 program=$2 lines=$3; shift 3
  local needles=()
  while [ "$1" != "--" ]; do needles+=("$1"); shift; done
  shift
  timeout 60 "$@" >"$dir/out" 2>"$dir/err" </dev/null
  local rc=$? count
  count=$(grep -c "^$program.*error:" "$dir/err")
  local good=1
  [ "$rc" -eq 2 ] || { fail "$name: exit code $rc, expected 2"; good=0; }
  if [ "$lines" = any ]; then [ "$count" -ge 1 ] || { fail "$name: no error line"; good=0; }
  else [ "$count" -eq "$lines" ] || { fail "$name: $count error lines, expected $lines"; good=0; }; fi
  for n in "${needles[@]}"; do grep -qF -- "$n" "$dir/err" || { fail "$name: stderr lacks '$n'"; good=0; }; done
  if [ $good -eq 1 ]; then ok "$name: $(grep -m1 "error:" "$dir/err")"; else sed 's/^/     /' "$dir/err" | head -5; fi
}

# flip FILE OFFSET: one bit of the byte at OFFSET inverted, in place.
flip() {
  local byte
  byte=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
  printf "$(printf '\\%03o' $((byte ^ 16)))" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}

# About 300 kB of text (five 64 KiB chunks of /train), in two files and a directory of two more.
seq 1 6000 | awk '{ printf "line %d: the quick brown fox %d jumps over the lazy dog %d\n", $1, $1 * 7 % 13, $1 % 97 }' \
  >"$dir/all.txt"
mkdir -p "$dir/parts/more"
head -c 100000 "$dir/all.txt" >"$dir/parts/a.txt"
tail -c +100001 "$dir/all.txt" | head -c 100000 >"$dir/parts/more/b.txt"
tail -c +200001 "$dir/all.txt" | head -c 50000 >"$dir/parts/more/c.txt"
tail -c +250001 "$dir/all.txt" >"$dir/parts/d.txt"

# Streamed from the files and directories (batches far smaller than the text), or in one piece: one text.
"$prepare" "$dir/parts/a.txt" "$dir/parts/more" "$dir/parts/d.txt" -o "$dir/parts.h5" --threads 2 \
  >"$dir/prepare.out" 2>"$dir/prepare.err" || fail "prepare from parts: $(cat "$dir/prepare.err")"
grep -qE "encoded .* \(100%\), [0-9.]+ MB/s, ETA" "$dir/prepare.err" && ok "progress line: $(tail -1 "$dir/prepare.err")" \
  || fail "no progress line: $(cat "$dir/prepare.err")"
"$prepare" "$dir/all.txt" -o "$dir/all.h5" --quiet >/dev/null 2>&1 || fail "prepare from one file"
[ ! -e "$dir/all.h5.partial" ] && [ ! -e "$dir/parts.h5.partial" ] || fail "a .partial file was left"
for f in parts all; do
  timeout 120 "${mpiexec[@]}" -n 1 "$train" --preset tiny --steps 4 --data "$dir/$f.h5" --metrics "$dir/$f-1.jsonl" \
    2>"$dir/train.err" || fail "train on $f.h5: $(tail -3 "$dir/train.err")"
done
timeout 120 "${mpiexec[@]}" -n 2 "$train" --preset tiny --steps 4 --data "$dir/parts.h5" --pipeline.pipeline_size 2 \
  --metrics "$dir/parts-2.jsonl" 2>"$dir/train.err" || fail "train on 2 ranks: $(tail -3 "$dir/train.err")"
a=$(final_checksum "$dir/parts-1.jsonl"); b=$(final_checksum "$dir/all-1.jsonl"); c=$(final_checksum "$dir/parts-2.jsonl")
[ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" = "$c" ] && ok "same weights from the parts and the whole text, on 1 and 2 ranks ($a)" \
  || fail "param_checksum differs: parts $a, whole $b, parts on 2 ranks $c"
timeout 120 "${mpiexec[@]}" -n 1 "$train" --preset tiny --steps 2 --data "$dir/parts.h5" --checkpoint-dir "$dir/ck" \
  --checkpoint-every 2 2>/dev/null || fail "training for a checkpoint"

# A truncated token file: refused when opened, on every rank, before any work.
cp "$dir/parts.h5" "$dir/truncated.h5"
truncate -s $(($(stat -c %s "$dir/truncated.h5") / 2)) "$dir/truncated.h5"
expect truncated-train kpipe-train 1 "$dir/truncated.h5" -- "${mpiexec[@]}" -n 2 "$train" --preset tiny --steps 2 \
  --data "$dir/truncated.h5" --pipeline.pipeline_size 2

# A damaged chunk in the middle of /train: the file opens (its metadata is intact); the first read of the
# chunk stops the run, naming the file and the chunk, never training on it.
cp "$dir/parts.h5" "$dir/damaged.h5"
flip "$dir/damaged.h5" $(($(stat -c %s "$dir/damaged.h5") / 3))
expect damaged-train kpipe-train 1 "$dir/damaged.h5" "/train tokens" "chunk" -- \
  "${mpiexec[@]}" -n 1 "$train" --preset tiny --steps 30 --data "$dir/damaged.h5"
expect damaged-train-2-ranks kpipe-train any "$dir/damaged.h5" "chunk" -- \
  "${mpiexec[@]}" -n 2 "$train" --preset tiny --steps 30 --data "$dir/damaged.h5" --pipeline.pipeline_size 2
expect damaged-eval kpipe-eval 1 "$dir/damaged.h5" "chunk" -- \
  "${mpiexec[@]}" -n 2 "$eval_app" "$dir/ck" --data "$dir/damaged.h5" --split train --pipeline-size 2

# A directory holding a file that cannot be read (a FIFO: refused, never opened; also an unreadable file
# where permissions bind): nothing is written, and an older output stays as it was.
cp "$dir/all.h5" "$dir/kept.h5"
cp "$dir/all.h5" "$dir/before.h5"
mkdir -p "$dir/bad"
cp "$dir/parts/a.txt" "$dir/bad/a.txt"
mkfifo "$dir/bad/b.fifo"
expect fifo-in-directory kpipe-prepare 1 "$dir/bad/b.fifo" "FIFO" -- "$prepare" "$dir/bad" -o "$dir/kept.h5"
cmp -s "$dir/kept.h5" "$dir/before.h5" && [ ! -e "$dir/kept.h5.partial" ] && ok "the older output is untouched" \
  || fail "the output was changed or a .partial left"
if [ "$(id -u)" -ne 0 ]; then
  rm "$dir/bad/b.fifo"
  cp "$dir/parts/a.txt" "$dir/bad/locked.txt" && chmod 000 "$dir/bad/locked.txt"
  expect unreadable-in-directory kpipe-prepare 1 "$dir/bad/locked.txt" "Permission denied" -- \
    "$prepare" "$dir/bad" -o "$dir/out.h5"
fi

# Empty splits: a text too short to hold out anything, an empty directory; a token file whose validation
# split holds no window.
printf 'abc' >"$dir/tiny.txt"  # 3 bytes x 0.1: nothing held out
expect empty-validation kpipe-prepare 1 "$dir/tiny.txt" "a validation split of 0 tokens" -- "$prepare" "$dir/tiny.txt" -o "$dir/out.h5"
mkdir -p "$dir/empty"
expect empty-directory kpipe-prepare 1 "$dir/empty" "no text" -- "$prepare" "$dir/empty" -o "$dir/out.h5"
[ ! -e "$dir/out.h5" ] && [ ! -e "$dir/out.h5.partial" ] && ok "nothing written for the refused inputs" || fail "out.h5 was written"
head -c 3000 "$dir/all.txt" >"$dir/short.txt"
"$prepare" "$dir/short.txt" -o "$dir/short.h5" --val-fraction 0.01 --quiet >/dev/null || fail "prepare short.txt"
expect validation-without-a-window kpipe-train 1 "$dir/short.h5" "validation split has 30 tokens" -- \
  "${mpiexec[@]}" -n 2 "$train" --preset tiny --steps 2 --data "$dir/short.h5" --pipeline.pipeline_size 2

echo "$passes passed, $failures failed"
[ $failures -eq 0 ]
