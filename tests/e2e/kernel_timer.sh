#!/usr/bin/env bash
# The per-kernel measurement end to end (docs/performance.md, "The work ledger"): kpipe-train with the kernel
# timer loaded (tools/kernel_timer, a Kokkos Tools library) writes each kernel label's launches and seconds, and
# every kernel the ledger lists (kpipe-sim kernels --format csv, the same model) is among them with launches and
# time. A bf16 run: its kernels are the same on both kernel paths (the fp32 MLP's differ on a host-path build).
# kpipe-sim kernels refuses an unknown GPU with one line naming it, exit code 2.
# Usage: kernel_timer.sh KPIPE_TRAIN KPIPE_SIM KERNEL_TIMER_LIBRARY
set -u
train=$1 sim=$2 timer=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }
model=(--preset tiny --precision bf16)

# Kokkos 4 reads KOKKOS_TOOLS_LIBS, Kokkos 3 KOKKOS_PROFILE_LIBRARY; both name the one library.
if ! (cd "$work" && KOKKOS_TOOLS_LIBS=$timer KOKKOS_PROFILE_LIBRARY=$timer KPIPE_KERNEL_TIMES=$work/times.csv \
  "$train" "${model[@]}" --steps 2 \
  --train.eval_batches 1 --train.log_every 1000 --metrics "$work/metrics.jsonl" >"$work/train.log" 2>&1); then
  fail "kpipe-train with the kernel timer"; sed 's/^/     /' "$work/train.log"
fi
"$sim" kernels "${model[@]}" --format csv >"$work/ledger.csv" 2>"$work/sim.err" || fail "kpipe-sim kernels"
if [ -s "$work/times.csv" ] && [ -s "$work/ledger.csv" ]; then
  [ "$(head -1 "$work/times.csv")" = "label,launches,seconds" ] || fail "times.csv header: $(head -1 "$work/times.csv")"
  # Every kernel of the ledger ran, with a positive count and time.
  missing=$(awk -F, 'NR == FNR { if (FNR > 1 && $2 > 0 && $3 > 0) timed[$1] = 1; next }
                     FNR > 1 && $3 == "kernel" && !($2 in timed) { print $2 }' "$work/times.csv" "$work/ledger.csv" |
            sort -u)
  [ -z "$missing" ] || fail "ledger kernels with no launches or time: $missing"
  kernels=$(awk -F, 'FNR > 1 && $3 == "kernel"' "$work/ledger.csv" | cut -d, -f2 | sort -u | wc -l)
  [ "$kernels" -ge 15 ] || fail "only $kernels kernel labels in the ledger"
  timed=$(($(wc -l <"$work/times.csv") - 1))
  [ -z "$missing" ] && echo "ok   $kernels kernel labels of the ledger timed ($timed labels in all)"
else
  fail "no times ($work/times.csv) or no ledger"
fi

"$sim" kernels --gpu a100 >"$work/out" 2>"$work/err"
rc=$?
if [ $rc -eq 2 ] && [ "$(wc -l <"$work/err")" -eq 1 ] && grep -qF -- "--gpu = a100" "$work/err"; then
  echo "ok   unknown GPU refused: $(cat "$work/err")"
else
  fail "kpipe-sim kernels --gpu a100: exit code $rc"; sed 's/^/     /' "$work/err"
fi
exit $((failures > 0))
