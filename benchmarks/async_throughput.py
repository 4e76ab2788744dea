#!/usr/bin/env python3
"""Tokens/s of 1f1b and the asynchronous schedules side by side: the bench preset on 2 ranks, m = 8.

    benchmarks/async_throughput.py [--build-dir DIR ...] [--rounds R] [--steps N] [--schedules S ...]

Every round runs each schedule once with each build, one after another (OPENBLAS_NUM_THREADS=1 and
OMP_NUM_THREADS=1 per rank), so that a machine whose speed drifts (another user's jobs) shifts them alike.
A run's figure is the batch's tokens over its median step time, the first two steps left out (start-up and
the warm-up's allocations). Printed: per build and schedule the median over the rounds (min-max), and each
schedule's ratio to 1f1b, paired within a round (median, min-max). Several --build-dir compare builds (a
branch before and after a change).

On a shared machine other processes take the cores from a pipeline's ranks at random, which a pipeline
amplifies (a rank that waits stalls the other). So each run starts once the machine looks idle (no other
runnable process for a second, waiting at most --wait-idle seconds), and its CPU share is printed: the ranks'
CPU time over wall time x 2 (the MPI ranks poll while they wait, so an unshared run is close to 1). The
summary is given over all the runs and over those with a CPU share of at least --min-share.
"""
import argparse
import json
import os
import resource
import shlex
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOKENS_PER_STEP = 16 * 128  # the bench preset: 16 sequences of 128 tokens per step


def wait_idle(limit):
    """Waits until no other process is runnable for a second (at most `limit` seconds)."""
    deadline, idle_since = time.monotonic() + limit, None
    while time.monotonic() < deadline:
        running = int(Path("/proc/loadavg").read_text().split()[3].split("/")[0])  # this one included
        now = time.monotonic()
        idle_since = (idle_since or now) if running <= 1 else None
        if idle_since is not None and now - idle_since >= 1.0:
            return
        time.sleep(0.1)


def children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(build, schedule, args, workdir, tag):
    metrics = Path(workdir) / f"{tag}-{schedule}.jsonl"
    cmd = shlex.split(args.mpiexec) + [
        "-n", "2", str(Path(build) / "apps" / "kpipe-train"), "--preset", "bench", "--pipeline-size", "2",
        "--microbatches", "8", "--steps", str(args.steps), "--schedule", schedule, "--train.eval_batches", "1",
        "--train.log_every", "1000000", "--metrics", str(metrics)]
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    wait_idle(args.wait_idle)
    cpu, start = children_cpu(), time.monotonic()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    share = (children_cpu() - cpu) / ((time.monotonic() - start) * 2)
    lines = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()]
    steps = [x["step_seconds"] for x in lines if not x.get("final")][2:]
    return TOKENS_PER_STEP / statistics.median(steps), share


def spread(values, fmt):
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", action="append", help="a build to run (repeat to compare builds)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--schedules", nargs="+", default=["1f1b", "pipedream", "2bw"])
    parser.add_argument("--mpiexec", default="mpiexec --allow-run-as-root --oversubscribe")
    parser.add_argument("--wait-idle", type=float, default=60, help="most seconds to wait for an idle machine")
    parser.add_argument("--min-share", type=float, default=0.95, help="the CPU share of a run counted as unshared")
    args = parser.parse_args()
    builds = args.build_dir or [str(ROOT / "build")]
    if "1f1b" not in args.schedules:
        args.schedules.insert(0, "1f1b")
    runs = []  # (round, build, schedule, tokens/s, CPU share)
    with tempfile.TemporaryDirectory() as workdir:
        for r in range(args.rounds):
            for i, build in enumerate(builds):
                for schedule in args.schedules:
                    t, share = run_once(build, schedule, args, workdir, f"{r}-{i}")
                    runs.append((r, build, schedule, t, share))
                    print(f"round {r} build {i} {schedule:10s} {t:7.0f} tokens/s  CPU share {share:.2f}", flush=True)
    print(f"\nbench preset, 2 ranks, m = 8, {args.steps} steps, {args.rounds} rounds: median (min-max)")
    summary(runs, builds, args.schedules, "all runs")
    unshared = {(r, b) for r, b, _, _, _ in runs} - {(r, b) for r, b, _, _, share in runs if share < args.min_share}
    summary([x for x in runs if (x[0], x[1]) in unshared], builds, args.schedules,
            f"rounds whose runs all had a CPU share >= {args.min_share}")


def summary(runs, builds, schedules, what):
    print(f"\n{what}:")
    print("| build | schedule | runs | tokens/s | against 1f1b, paired by round |")
    print("|---|---|---:|---:|---:|")
    for i, build in enumerate(builds):
        of = {s: {r: t for r, b, sc, t, _ in runs if b == build and sc == s} for s in schedules}
        for schedule in schedules:
            t = list(of[schedule].values())
            if not t:
                continue
            pairs = [v / of["1f1b"][r] for r, v in of[schedule].items() if r in of["1f1b"]]
            ratio = "" if schedule == "1f1b" or not pairs else spread(pairs, "{:.3f}")
            print(f"| {i}: {build} | {schedule} | {len(t)} | {spread(t, '{:.0f}')} | {ratio} |")

if __name__ == "__main__":
    main()
