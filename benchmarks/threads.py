#!/usr/bin/env python3
"""Ranks or threads: how to spend a node's cores on one model. kpipe-train, bench preset, fp32:

    benchmarks/threads.py --build-dir BUILD [--cores N] [--steps S] [--repeats R]

BUILD is a kpipe build against a Kokkos with the OpenMP backend (e.g. Kokkos 4.6 OpenMP; with Debian's
Kokkos 3.4 Serial a rank cannot have more than one thread). On N cores (default: all of them) it runs, each
`--repeats` times, in rounds:
  * 1 rank x 1 thread (m=8): the baseline;
  * 1 rank x N threads (m=8): pipeline.threads_per_rank = N for Kokkos' kernels and OPENBLAS_NUM_THREADS = N
    for the gemms, once with OpenMP's default wait policy and once with OMP_WAIT_POLICY=passive (idle OpenMP
    threads sleep instead of spinning while OpenBLAS' own threads run a gemm);
  * N ranks x 1 thread: a pipeline of N stages, 1F1B, m=8.
tokens/s is the batch's tokens over the median step time, pooled over the repeats, the first two steps of each
run left out (as benchmarks/run.py). Prints a markdown table. See docs/performance.md.
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
from run import PRESETS, flops_per_token, loadavg, machine, run_timed  # noqa: E402

# (label, ranks, threads per rank, schedule, micro-batches, extra environment)
def configurations(n):
    return [
        ("1 rank x 1 thread", 1, 1, "1f1b", 8, {}),
        (f"1 rank x {n} threads", 1, n, "1f1b", 8, {}),
        (f"1 rank x {n} threads, OMP_WAIT_POLICY=passive", 1, n, "1f1b", 8, {"OMP_WAIT_POLICY": "passive"}),
        (f"{n} ranks x 1 thread, 1F1B", n, 1, "1f1b", 8, {}),
    ]


def command(args, c, ranks, threads, schedule, m, metrics):
    cmd = [args.train_bin, "--steps", str(args.steps), "--batch", str(c["batch"]), "--microbatches", str(m),
           "--pipeline-size", str(ranks), "--schedule", schedule, "--threads-per-rank", str(threads),
           "--train.eval_batches", "1", "--train.log_every", "1000000", "--metrics", str(metrics)]
    for key in ["vocab", "seq_len", "d_model", "n_layers", "n_heads", "mlp_ratio"]:
        cmd += [f"--model.{key}", str(c[key])]
    if ranks > 1:
        cmd = shlex.split(args.mpiexec) + ["-n", str(ranks)] + cmd
    return cmd


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--cores", type=int, default=os.cpu_count())
    ap.add_argument("--steps", type=int, default=10, help="steps per run (the first two are not timed)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--mpiexec", default="", help="MPI launcher and flags (default: mpiexec --bind-to none, "
                    "plus --allow-run-as-root --oversubscribe as root)")
    args = ap.parse_args()
    if args.steps < 3 or args.repeats < 1 or args.cores < 2:
        raise SystemExit("--steps must be at least 3, --repeats at least 1, --cores at least 2")
    args.train_bin = str(Path(args.build_dir) / "apps" / "kpipe-train")
    if not args.mpiexec:
        args.mpiexec = "mpiexec --bind-to none" + (" --allow-run-as-root --oversubscribe" if os.geteuid() == 0 else "")
    cache = (Path(args.build_dir) / "CMakeCache.txt").read_text()
    if "OPENMP" not in next((l for l in cache.splitlines() if l.startswith("KPIPE_KOKKOS_DEVICES")), ""):
        raise SystemExit(f"{args.build_dir}: its Kokkos has no OpenMP backend: nothing to compare")
    c = PRESETS["bench"]
    tokens = c["batch"] * c["seq_len"]
    runs = configurations(args.cores)
    steps = {r[0]: [] for r in runs}
    load_before = loadavg()
    with tempfile.TemporaryDirectory() as work:
        for rep in range(args.repeats):
            for label, ranks, threads, schedule, m, extra in runs:
                print(f"round {rep + 1}/{args.repeats}: {label} ...", file=sys.stderr)
                env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
                           OMP_PROC_BIND="false", **extra)
                if "OMP_WAIT_POLICY" not in extra:
                    env.pop("OMP_WAIT_POLICY", None)  # OpenMP's default (spin a while, then sleep)
                metrics = Path(work) / f"m-{rep}-{ranks}-{threads}-{len(extra)}.jsonl"
                run_timed(command(args, c, ranks, threads, schedule, m, metrics), env)
                lines = [json.loads(l) for l in metrics.read_text().splitlines() if l.strip()]
                per_step = [x["step_seconds"] for x in lines if not x.get("final")]
                steps[label] += per_step[2:]
    base = tokens / statistics.median(steps[runs[0][0]])
    print(f"Machine: {machine().get('model_name', '?')}, {args.cores} cores; preset bench, fp32, m=8; "
          f"{args.steps} steps x {args.repeats} runs, median step time over the steps after the first two; "
          f"load average before / after: {load_before} / {loadavg()}.\n")
    print("| run | tokens/s | GFLOP/s | vs 1 rank x 1 thread | step time min-max (s) |")
    print("|---|---:|---:|---:|---|")
    for label, *_ in runs:
        median = statistics.median(steps[label])
        rate = tokens / median
        print(f"| {label} | {rate:.0f} | {rate * flops_per_token(c) / 1e9:.1f} | {rate / base:.2f}x | "
              f"{min(steps[label]):.3f}-{max(steps[label]):.3f} |")


if __name__ == "__main__":
    main()
