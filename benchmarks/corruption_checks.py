#!/usr/bin/env python3
"""What the checks for silent data corruption cost. kpipe-train, bench preset, fp32, 2 replicas of one stage
(pipeline.data_parallel = 2, m = 8, 2 ranks):

    benchmarks/corruption_checks.py --build-dir BUILD [--steps S] [--repeats R]

Runs, in rounds of `--repeats`: no check (check.replicas_every = 0), the replicas compared every step (1) and at
the default interval (10), and the recomputation every step (check.recompute_every = 1, replicas not compared).
A check runs between steps, outside the step times in the metrics, so each run's figure is its training loop's
wall time per step (the final metrics' `seconds` over `train.steps`: the first step, which allocates, is in every
run alike), and its CPU seconds per step (both ranks'; less sensitive to other load on a shared machine); the
overhead is against the run without checks of the same round, the median over the rounds. Prints a markdown
table. See docs/performance.md.
"""
import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import loadavg, machine, run_timed  # noqa: E402

# (label, kpipe-train options)
RUNS = [
    ("no check", ["--check.replicas_every", "0"]),
    ("replicas compared every step", ["--check.replicas_every", "1"]),
    ("replicas compared every 10 steps (the default)", ["--check.replicas_every", "10"]),
    ("recomputation every step", ["--check.replicas_every", "0", "--check.recompute_every", "1"]),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--mpiexec", default="", help="MPI launcher and flags (default: mpiexec, plus "
                    "--allow-run-as-root --oversubscribe as root)")
    args = ap.parse_args()
    if args.steps < 10 or args.repeats < 1:
        raise SystemExit("--steps must be at least 10, --repeats at least 1")
    train = str(Path(args.build_dir) / "apps" / "kpipe-train")
    mpiexec = shlex.split(args.mpiexec or "mpiexec" + (" --allow-run-as-root --oversubscribe" if os.geteuid() == 0 else ""))
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    per_step = {label: [] for label, _ in RUNS}
    cpu_per_step = {label: [] for label, _ in RUNS}
    load_before = loadavg()
    with tempfile.TemporaryDirectory() as work:
        for rep in range(args.repeats):
            for k, (label, options) in enumerate(RUNS):
                print(f"round {rep + 1}/{args.repeats}: {label} ...", file=sys.stderr)
                metrics = Path(work) / f"m-{rep}-{k}.jsonl"
                cmd = mpiexec + ["-n", "2", train, "--preset", "bench", "--data-parallel", "2", "--microbatches", "8",
                                 "--steps", str(args.steps), "--train.eval_batches", "1", "--train.log_every",
                                 "1000000", "--metrics", str(metrics)] + options
                _, _, cpu = run_timed(cmd, env)  # exits on a failed run
                final = [json.loads(l) for l in metrics.read_text().splitlines() if '"final"' in l][0]
                per_step[label].append(final["seconds"] / args.steps)
                cpu_per_step[label].append(cpu / args.steps)
    print(f"Machine: {machine().get('model_name', '?')}; bench preset, fp32, 2 replicas x 1 stage, m=8; {args.steps} "
          f"steps x {args.repeats} rounds; load average before / after: {load_before} / {loadavg()}.\n")
    print("| run | loop time per step (s) | overhead (min to max) | CPU s per step | CPU overhead (min to max) |")
    print("|---|---:|---|---:|---|")

    def overhead(figures, label):
        ratios = [t / b - 1 for t, b in zip(figures[label], figures[RUNS[0][0]])]
        return "-" if label == RUNS[0][0] else \
            f"{100 * statistics.median(ratios):+.1f}% ({100 * min(ratios):+.1f}% to {100 * max(ratios):+.1f}%)"

    for label, _ in RUNS:
        print(f"| {label} | {statistics.median(per_step[label]):.3f} | {overhead(per_step, label)} | "
              f"{statistics.median(cpu_per_step[label]):.3f} | {overhead(cpu_per_step, label)} |")


if __name__ == "__main__":
    main()
