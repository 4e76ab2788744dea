#!/usr/bin/env python3
"""Convergence of the asynchronous schedules against 1F1B: validation loss after training, same samples.

    benchmarks/convergence.py --build-dir BUILD [--data TEXT] [--ranks 2 4] [--steps 150 300]
                              [--microbatches 4] [--max-gap PCT] [-- KPIPE-TRAIN OPTIONS...]

For every (steps, ranks) it runs kpipe-train with the small preset on the text file (default the GPL-3 of
/usr/share/common-licenses) as 1f1b, pipedream, pipedream --vertical-sync 1 and 2bw, --pipeline-size =
ranks, m micro-batches per step, one thread and OPENBLAS_NUM_THREADS=1 per rank, and prints a markdown table
of the validation loss after the last step (the --metrics file's final line) and each asynchronous one's
difference from 1F1B in %. Options after `--` go to every run (e.g. `-- --lr 2e-3` to give the lr instead of
leaving it to the asynchronous schedules' rule, docs/schedules.md "A stable step under delay"). The lr notes
kpipe-train printed are listed under the table. With --max-gap it exits 1 when an asynchronous schedule ends
more than PCT % above 1F1B. The runs are deterministic: the same build gives the same figures on any
machine load. See docs/performance.md.
"""
import argparse
import json
import os
import shlex
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import loadavg, run_timed  # noqa: E402

# (label, kpipe-train options)
SCHEDULES = [
    ("1f1b", ["--schedule", "1f1b"]),
    ("pipedream", ["--schedule", "pipedream"]),
    ("vertical sync", ["--schedule", "pipedream", "--vertical-sync", "1"]),
    ("2bw", ["--schedule", "2bw"]),
]


def validation_loss(metrics):
    final = [json.loads(l) for l in Path(metrics).read_text().splitlines() if '"final"' in l]
    return final[-1]["val_loss"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--data", default="/usr/share/common-licenses/GPL-3")
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--steps", type=int, nargs="+", default=[150, 300])
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--max-gap", type=float, default=None, help="exit 1 if an asynchronous schedule ends more "
                    "than this many %% above 1f1b")
    ap.add_argument("--mpiexec", default="", help="MPI launcher and flags (default: mpiexec, plus "
                    "--allow-run-as-root --oversubscribe as root)")
    ap.add_argument("extra", nargs="*", help="options for every kpipe-train run (after --)")
    args = ap.parse_args()
    train = str(Path(args.build_dir) / "apps" / "kpipe-train")
    mpiexec = shlex.split(args.mpiexec or "mpiexec" + (" --allow-run-as-root --oversubscribe" if os.geteuid() == 0 else ""))
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    rows, notes, worst = [], set(), float("-inf")
    load_before = loadavg()
    with tempfile.TemporaryDirectory() as work:
        for steps in args.steps:
            for ranks in args.ranks:
                losses = []
                for label, options in SCHEDULES:
                    print(f"{steps} steps, {ranks} ranks: {label} ...", file=sys.stderr)
                    metrics = Path(work) / f"{steps}-{ranks}-{len(losses)}.jsonl"
                    cmd = mpiexec + ["-n", str(ranks), train, "--preset", "small", "--data", args.data,
                                     "--pipeline-size", str(ranks), "--microbatches", str(args.microbatches),
                                     "--steps", str(steps), "--train.log_every", "1000000", "--metrics",
                                     str(metrics)] + options + args.extra
                    proc, _, _ = run_timed(cmd, env)
                    notes.update(l.strip() for l in proc.stderr.splitlines() if "kpipe-train: note:" in l)
                    losses.append(validation_loss(metrics))
                gaps = [100 * (loss / losses[0] - 1) for loss in losses[1:]]
                worst = max([worst] + gaps)
                rows.append((steps, ranks, losses, gaps))
    print(f"small preset on {args.data}, m = {args.microbatches}, options {shlex.join(args.extra) or '(defaults)'}; "
          f"load average before / after: {load_before} / {loadavg()}\n")
    print("| steps | ranks | " + " | ".join(label for label, _ in SCHEDULES) + " |")
    print("|---:|---:|" + "---:|" * len(SCHEDULES))
    for steps, ranks, losses, gaps in rows:
        cells = [f"{losses[0]:.4f}"] + [f"{loss:.4f} ({gap:+.1f}%)" for loss, gap in zip(losses[1:], gaps)]
        print(f"| {steps} | {ranks} | " + " | ".join(cells) + " |")
    for note in sorted(notes):
        print(f"\n    {note}")
    if args.max_gap is not None and worst > args.max_gap:
        print(f"\nan asynchronous schedule ends {worst:.1f}% above 1f1b, more than --max-gap {args.max_gap}%",
              file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
