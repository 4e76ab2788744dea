#!/usr/bin/env python3
"""kpipe-train configurations side by side: the same machine, the same minutes, alternating.

    benchmarks/side_by_side.py [--rounds R] [--steps S] [--ranks N] [--bin KPIPE-TRAIN]
                               --run LABEL "OPTIONS" [--run LABEL "OPTIONS" ...]
    # a run may name its own binary (another build, e.g. an older commit's): --run LABEL "OPTIONS" --run-bin PATH

Every round runs each configuration once, in the order given, so a drift of the host's speed (10% over
minutes on a shared VM) falls on all of them alike. Each run is `mpiexec -n N kpipe-train OPTIONS --steps S
--metrics FILE` with one thread per rank (OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=1); the first two steps are not
timed (allocation, first touch). Prints a markdown table: tokens/s from the median step time of all rounds'
timed steps pooled, the ratio to the first configuration (pooled, and per round: median and range), the
final param_checksum of each configuration (the same in every round: the runs are deterministic, and equal
checksums of two builds show they computed the same bits) and the load average before the first round and
after the last.
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
from run import loadavg, run_timed  # noqa: E402


def once(train, options, ranks, steps, mpiexec, env, metrics):
    cmd = [train] + shlex.split(options) + ["--steps", str(steps), "--metrics", str(metrics)]
    if ranks > 1 or mpiexec:
        cmd = shlex.split(mpiexec) + ["-n", str(ranks)] + cmd
    run_timed(cmd, env)
    lines = [json.loads(line) for line in Path(metrics).read_text().splitlines() if line.strip()]
    per_step = [x for x in lines if not x.get("final")]
    final = next(x for x in lines if x.get("final"))
    tokens = per_step[-1]["tokens_per_s"] * per_step[-1]["step_seconds"]
    return [x["step_seconds"] for x in per_step[2:]], tokens, final["param_checksum"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/apps/kpipe-train", help="kpipe-train of every run without --run-bin")
    ap.add_argument("--run", nargs=2, action="append", metavar=("LABEL", "OPTIONS"), required=True)
    ap.add_argument("--run-bin", action="append", default=[], metavar="PATH",
                    help="the binary of the --run just before it (repeat per run; '' keeps --bin)")
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mpiexec", default="", help="launcher and flags (default: mpiexec, plus "
                    "--allow-run-as-root --oversubscribe as root, for more than one rank)")
    args = ap.parse_args()
    if args.steps < 3:
        ap.error(f"--steps = {args.steps}: the first two steps are not timed, give at least 3")
    bins = [b or args.bin for b in args.run_bin] + [args.bin] * (len(args.run) - len(args.run_bin))
    for b in set(bins):
        if not os.access(b, os.X_OK):
            ap.error(f"kpipe-train binary '{b}' is not an executable file")
    mpiexec = args.mpiexec
    if not mpiexec and args.ranks > 1:
        mpiexec = "mpiexec" + (" --allow-run-as-root --oversubscribe" if os.geteuid() == 0 else "")
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")

    steps = [[] for _ in args.run]
    rounds = [[] for _ in args.run]  # each round's median step
    checksums = [set() for _ in args.run]
    tokens = [None] * len(args.run)
    load_before = loadavg()
    with tempfile.TemporaryDirectory() as work:
        for r in range(args.rounds):
            for i, ((label, options), train) in enumerate(zip(args.run, bins)):
                timed, tokens[i], checksum = once(train, options, args.ranks, args.steps, mpiexec, env,
                                                  Path(work) / f"{i}-{r}.jsonl")
                steps[i] += timed
                rounds[i].append(statistics.median(timed))
                checksums[i].add(checksum)
                print(f"round {r + 1}/{args.rounds}: {label}: {tokens[i] / statistics.median(timed):.0f} tokens/s",
                      file=sys.stderr)
    load_after = loadavg()

    print(f"{args.ranks} rank(s), {args.steps} steps per run ({args.steps - 2} timed), {args.rounds} rounds; "
          f"load average {load_before} before, {load_after} after\n")
    print("| configuration | tokens/s | ratio to the first | ratio per round: median (range) | param_checksum |")
    print("|---|---:|---:|---|---|")
    first = statistics.median(steps[0])
    for i, (label, options) in enumerate(args.run):
        median = statistics.median(steps[i])
        paired = [rounds[0][r] / rounds[i][r] for r in range(args.rounds)]
        print(f"| {label} | {tokens[i] / median:.0f} | {first / median:.3f} | {statistics.median(paired):.3f} "
              f"({min(paired):.3f} to {max(paired):.3f}) | {', '.join(sorted(checksums[i]))} |")


if __name__ == "__main__":
    main()
