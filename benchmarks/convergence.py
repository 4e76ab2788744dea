#!/usr/bin/env python3
"""Convergence of the asynchronous schedules against 1F1B, and of the same rules written again in PyTorch.

    benchmarks/convergence.py --build-dir BUILD [--data TEXT] [--runs 150x16 600x16 300x32] [--ranks 2]
        [--microbatches 4] [--seed 4] [--schedules 1f1b pipedream 2bw] [--reference sync 2bw paper]
        [--eval-every 25] [--json OUT] [--max-gap PCT] [-- KPIPE-TRAIN OPTIONS...]

For every run STEPSxBATCH and rank count it trains the small preset on the text file (default the GPL-3 of
/usr/share/common-licenses) with kpipe-train, each schedule given only as `--schedule` (so the asynchronous ones
take kpipe's defaults, docs/schedules.md "A stable step under delay"), --pipeline-size = ranks, m micro-batches
per step, one thread and OPENBLAS_NUM_THREADS=1 per rank, and the validation loss every --eval-every steps. On 2
ranks it runs beside them the PyTorch loops of benchmarks/pytorch/async_reference.py, from the same weights on
the same windows (--reference: `sync`, kpipe's `2bw` rule, the `paper`'s; `--reference` alone runs none;
`--schedules` alone runs only those), with --python (default /usr/bin/python3, Debian's python3-torch). Prints a
markdown table of the validation loss after the last step, each asynchronous run's difference from its
synchronous one in %, and the notes kpipe-train printed; --json writes every curve for
benchmarks/plot_convergence.py. With --max-gap it exits 1 when a kpipe schedule
ends more than PCT % above 1F1B. The runs are deterministic: the same build gives the same losses at any load.
See docs/performance.md.
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import loadavg, run_timed  # noqa: E402

SCHEDULES = {"1f1b": ["--schedule", "1f1b"], "pipedream": ["--schedule", "pipedream"],
             "vertical sync": ["--schedule", "pipedream", "--vertical-sync", "1"], "2bw": ["--schedule", "2bw"]}
REFERENCE = Path(__file__).resolve().parent / "pytorch" / "async_reference.py"


def kpipe_run(args, mpiexec, env, steps, batch, ranks, options, work):
    metrics = Path(work) / "metrics.jsonl"
    cmd = mpiexec + ["-n", str(ranks), str(Path(args.build_dir) / "apps" / "kpipe-train"), "--preset", "small",
                     "--data", args.data, "--pipeline-size", str(ranks), "--microbatches", str(args.microbatches),
                     "--steps", str(steps), "--train.batch", str(batch), "--train.seed", str(args.seed),
                     "--train.eval_every", str(args.eval_every), "--train.log_every", "1000000",
                     "--metrics", str(metrics)] + options + args.extra
    proc, _, _ = run_timed(cmd, env)
    curve = [[int(s), float(v)] for s, v in re.findall(r"step +(\d+) \| validation loss ([0-9.]+)", proc.stderr)]
    final = [json.loads(l) for l in metrics.read_text().splitlines() if '"final"' in l][-1]
    notes = [l.strip() for l in proc.stderr.splitlines() if "kpipe-train: note:" in l]
    return curve + [[steps, final["val_loss"]]], notes


def reference_run(args, steps, batch, rule):
    cmd = [args.python, str(REFERENCE), "--data", args.data, "--rule", rule, "--steps", str(steps), "--batch",
           str(batch), "--microbatches", str(args.microbatches), "--seed", str(args.seed), "--eval-every",
           str(args.eval_every)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{shlex.join(cmd)} failed:\n{out.stderr}")
    rows = [json.loads(l) for l in out.stdout.splitlines()]
    curve = [[r["step"], r["val_loss"]] for r in rows if "val_loss" in r and not r.get("final")]
    return curve + [[steps, rows[-1]["val_loss"]]]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--data", default="/usr/share/common-licenses/GPL-3")
    ap.add_argument("--runs", nargs="+", default=["150x16", "600x16", "300x32"], help="STEPSxBATCH")
    ap.add_argument("--ranks", type=int, nargs="+", default=[2])
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--seed", type=int, default=4)
    ap.add_argument("--schedules", nargs="*", default=["1f1b", "pipedream", "2bw"], choices=list(SCHEDULES))
    ap.add_argument("--reference", nargs="*", default=["sync", "2bw", "paper"], choices=["sync", "2bw", "paper"])
    ap.add_argument("--python", default="/usr/bin/python3", help="a python with torch, for --reference")
    ap.add_argument("--eval-every", type=int, default=25)
    ap.add_argument("--json", help="write every curve here (benchmarks/plot_convergence.py draws them)")
    ap.add_argument("--max-gap", type=float, default=None, help="exit 1 if a kpipe schedule ends more than this "
                    "many %% above 1f1b")
    ap.add_argument("--mpiexec", default="", help="MPI launcher and flags (default: mpiexec, plus "
                    "--allow-run-as-root --oversubscribe as root)")
    ap.add_argument("extra", nargs="*", help="options for every kpipe-train run (after --)")
    args = ap.parse_args()
    if args.schedules and "1f1b" not in args.schedules:
        args.schedules.insert(0, "1f1b")  # the baseline of every gap
    if args.reference and "sync" not in args.reference:
        args.reference.insert(0, "sync")
    mpiexec = shlex.split(args.mpiexec or "mpiexec" + (" --allow-run-as-root --oversubscribe" if os.geteuid() == 0 else ""))
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    results, notes, worst = [], set(), float("-inf")
    load_before = loadavg()
    with tempfile.TemporaryDirectory() as work:
        for run in args.runs:
            steps, batch = (int(x) for x in run.split("x"))
            for ranks in args.ranks:
                for label in args.schedules:
                    print(f"{steps} steps, batch {batch}, {ranks} ranks: kpipe {label} ...", file=sys.stderr)
                    curve, said = kpipe_run(args, mpiexec, env, steps, batch, ranks, SCHEDULES[label], work)
                    notes.update(said)
                    results.append(dict(steps=steps, batch=batch, ranks=ranks, source="kpipe", label=label, curve=curve))
                for rule in args.reference if ranks == 2 else []:  # the reference splits the model as 2 ranks do
                    print(f"{steps} steps, batch {batch}: PyTorch {rule} ...", file=sys.stderr)
                    curve = reference_run(args, steps, batch, rule)
                    results.append(dict(steps=steps, batch=batch, ranks=ranks, source="pytorch", label=rule, curve=curve))
    for r in results:
        base = next(b for b in results if (b["steps"], b["batch"], b["ranks"], b["source"]) ==
                    (r["steps"], r["batch"], r["ranks"], r["source"]) and b["label"] in ("1f1b", "sync"))
        r["final"], r["gap"] = r["curve"][-1][1], 100 * (r["curve"][-1][1] / base["curve"][-1][1] - 1)
        if r["source"] == "kpipe":
            worst = max(worst, r["gap"])
    columns = [("kpipe", s) for s in args.schedules] + [("pytorch", r) for r in args.reference]
    print(f"small preset on {args.data}, m = {args.microbatches}, seed {args.seed}, options "
          f"{shlex.join(args.extra) or '(defaults)'}; load average before / after: {load_before} / {loadavg()}\n")
    print("| steps | batch | ranks | " + " | ".join(f"{label}" if source == "kpipe" else f"PyTorch {label}"
                                                   for source, label in columns) + " |")
    print("|---:|---:|---:|" + "---:|" * len(columns))
    for run in args.runs:
        steps, batch = (int(x) for x in run.split("x"))
        for ranks in args.ranks:
            cells = []
            for source, label in columns:
                r = next((r for r in results if (r["steps"], r["batch"], r["ranks"], r["source"], r["label"]) ==
                          (steps, batch, ranks, source, label)), None)
                cells.append("" if r is None else f"{r['final']:.4f}" if label in ("1f1b", "sync")
                             else f"{r['final']:.4f} ({r['gap']:+.1f}%)")
            print(f"| {steps} | {batch} | {ranks} | " + " | ".join(cells) + " |")
    for note in sorted(notes):
        print(f"\n    {note}")
    if args.json:
        Path(args.json).write_text(json.dumps(dict(data=args.data, microbatches=args.microbatches, seed=args.seed,
                                                   extra=args.extra, load=[load_before, loadavg()], runs=results),
                                              indent=1) + "\n")
    if args.max_gap is not None and worst > args.max_gap:
        print(f"\na kpipe schedule ends {worst:.1f}% above 1f1b, more than --max-gap {args.max_gap}%", file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
