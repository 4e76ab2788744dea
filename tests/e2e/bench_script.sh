#!/usr/bin/env bash
# benchmarks/run.py end to end on the tiny preset, without PyTorch: it runs every configuration and writes a
# markdown table and a JSON file whose figures are consistent (checked here, not timed).
# Usage: bench_script.sh PYTHON RUN_PY KPIPE_TRAIN KPIPE_SIM KPIPE_BENCH_STEP|none MPIEXEC [MPIEXEC_FLAGS...]
set -u
python=$1 run_py=$2 train=$3 sim=$4 bench=$5; shift 5
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$python" "$run_py" --no-build --no-torch --preset tiny --steps 3 --repeats 1 --out "$out" \
  --train-bin "$train" --sim-bin "$sim" --bench-bin "$bench" --mpiexec "$*" >"$out/stdout" 2>"$out/stderr"
rc=$?
failures=0
[ "$rc" -eq 0 ] || { echo "FAIL: exit code $rc"; cat "$out/stderr"; exit 1; }
for needle in "kpipe 1 rank, m=8" "kpipe 2 ranks, gpipe" "kpipe 2 ranks, 1f1b" "kpipe 2 ranks, interleaved v=2" \
              "kpipe 2 ranks, zb-h1" "PyTorch: skipped"; do
  grep -qF "$needle" "$out/results.md" || { echo "FAIL: results.md lacks '$needle'"; failures=1; }
done
"$python" - "$out/results.json" <<'EOF' || failures=1
import json, sys
res = json.load(open(sys.argv[1]))
runs = {r["name"]: r for r in res["kpipe"]}
problems = []
if len(runs) != 6:
    problems.append(f"{len(runs)} kpipe runs, expected 6")
for name, r in runs.items():
    if not r["tokens_per_s"] > 0:
        problems.append(f"{name}: tokens/s {r['tokens_per_s']}")
    if len(r["peak_activation_bytes"]) != r["ranks"] or min(r["peak_activation_bytes"]) <= 0:
        problems.append(f"{name}: peak activation bytes {r['peak_activation_bytes']}")
    if r["ranks"] == 2 and r["peak_stash_measured"] != r["peak_stash_predicted"]:
        problems.append(f"{name}: peak stash measured {r['peak_stash_measured']} predicted {r['peak_stash_predicted']}")
    # The slot pools hold exactly the stash (receives land in spare buffers, sends take theirs along), one
    # pool per chunk: with several chunks per rank the pools' peaks may come at different times.
    if r["ranks"] == 2 and r["chunks"] == 1 and r["slots_allocated"] != r["peak_stash_measured"]:
        problems.append(f"{name}: slots allocated {r['slots_allocated']} != peak stash {r['peak_stash_measured']}")
    if r["ranks"] == 2 and any(s < m for s, m in zip(r["slots_allocated"], r["peak_stash_measured"])):
        problems.append(f"{name}: slots allocated {r['slots_allocated']} below the stash {r['peak_stash_measured']}")
    if not 0 <= r["simulated_bubble"] < 1:
        problems.append(f"{name}: simulated bubble {r['simulated_bubble']}")
# GPipe holds all 8 micro-batches on stage 0, 1F1B at most p = 2: p/m of GPipe's memory.
gpipe, f1b = runs["2 ranks, gpipe"], runs["2 ranks, 1f1b"]
if gpipe["peak_stash_measured"][0] != 8 or f1b["peak_stash_measured"][0] != 2:
    problems.append(f"stage 0 peak stash gpipe {gpipe['peak_stash_measured']} 1f1b {f1b['peak_stash_measured']}")
if abs(f1b["peak_activation_bytes"][0] * 8 - gpipe["peak_activation_bytes"][0] * 2) > 0:
    problems.append(f"stage 0 bytes 1f1b {f1b['peak_activation_bytes'][0]} != 2/8 of gpipe {gpipe['peak_activation_bytes'][0]}")
# FLOPs per token of the tiny model from desc.cpp's formulas, worked by hand: 52.06 MFLOP per sequence of 64.
if abs(res["flops_per_token"] * 64 - 52_064_256) > 1:
    problems.append(f"FLOPs per token {res['flops_per_token']}")
for p in problems:
    print("FAIL:", p)
sys.exit(1 if problems else 0)
EOF
[ "$failures" -eq 0 ] && echo "bench script: all checks passed"
exit "$failures"
