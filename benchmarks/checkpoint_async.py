#!/usr/bin/env python3
"""Step time with checkpoints written while the training waits and beside it (docs/performance.md).

For a model on 2 ranks (the bench preset, or `gigabyte`: d_model 1024, 7 layers, 1.06 GB of checkpoint):
kpipe_bench_checkpoint's figures first (the disk's own `dd ... conv=fsync` speed beside the checkpoint's write
speeds, waiting and beside the training, the snapshot copy and the read), then kpipe-train in rounds, a
checkpoint every EVERY steps: none, checkpoint.async = off, checkpoint.async = on. Per kind of run: the time per
step (step_seconds + checkpoint_wait_seconds of --metrics, the steps after the first, pooled over the rounds:
what the training stopped for checkpoints included) and the median step_seconds. The target for the
asynchronous runs: within 5% of no checkpoint plus the snapshot copy (bytes / the measured copy speed) per
EVERY steps.

    benchmarks/checkpoint_async.py --build-dir build --model bench --steps 33 --every 4
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

MODELS = {
    "bench": ["--preset", "bench", "--microbatches", "2"],
    "gigabyte": ["--preset", "bench", "--model.d_model", "1024", "--model.n_heads", "16", "--model.n_layers", "7",
                 "--model.seq_len", "32", "--batch", "4", "--microbatches", "2"],
}


def mpiexec(args):
    return ["mpiexec", "--oversubscribe", "--allow-run-as-root", "-n", "2"] + args


def train(build, model, steps, every, kind, work):
    metrics = os.path.join(work, f"{kind}.jsonl")
    ck = os.path.join(work, f"ck-{kind}")
    shutil.rmtree(ck, ignore_errors=True)
    cmd = [os.path.join(build, "apps", "kpipe-train")] + MODELS[model] + [
        "--pipeline-size", "2", "--steps", str(steps), "--train.eval_every", "0", "--train.eval_batches", "1",
        "--train.log_every", "1000000",
        "--metrics", metrics]
    if kind != "none":
        cmd += ["--checkpoint-dir", ck, "--checkpoint-every", str(every), "--keep", "2", "--checkpoint.async", kind]
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", OMP_WAIT_POLICY="passive")
    subprocess.run(mpiexec(cmd), check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    shutil.rmtree(ck, ignore_errors=True)
    rows = [json.loads(line) for line in open(metrics) if '"step_seconds"' in line]  # the steps' records alone
    return [(r["step_seconds"], r.get("checkpoint_wait_seconds", 0.0)) for r in rows[1:]]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-dir", default="build")
    parser.add_argument("--model", choices=sorted(MODELS), default="bench")
    parser.add_argument("--steps", type=int, default=33)
    parser.add_argument("--every", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--dir", default=None, help="where checkpoints go (default: a temporary directory)")
    a = parser.parse_args()
    work = tempfile.mkdtemp(dir=a.dir)
    try:
        bench = subprocess.run(mpiexec([os.path.join(a.build_dir, "benchmarks", "kpipe_bench_checkpoint"), "3",
                                        os.path.join(work, "io"), a.model]),
                               check=True, capture_output=True, text=True).stdout
        print(bench, end="")
        copy = re.search(r"snapshot copy ([0-9.]+) s", bench)
        copy_s = float(copy.group(1)) if copy else 0.0
        steps = {"none": [], "off": [], "on": []}
        for _ in range(a.rounds):
            for kind in steps:
                steps[kind] += train(a.build_dir, a.model, a.steps, a.every, kind, work)
        print(f"kpipe-train, {a.model} model, 2 ranks, {a.steps} steps x {a.rounds} rounds, a checkpoint every "
              f"{a.every} steps (steps after the first):")
        per_step = {}
        for kind, rows in steps.items():
            per_step[kind] = sum(s + w for s, w in rows) / len(rows)
            waits = [w for _, w in rows if w > 0]
            print(f"  checkpoints {kind:>4}: {per_step[kind]:.4f} s per step with the waits, median step "
                  f"{statistics.median(s for s, _ in rows):.4f} s, training stopped {statistics.mean(waits) if waits else 0:.4f} s "
                  f"per checkpoint")
        target = per_step["none"] + copy_s / a.every
        print(f"  target for on: {target:.4f} s x 1.05 = {1.05 * target:.4f} s (no checkpoint + the snapshot copy "
              f"{copy_s:.4f} s / {a.every}); measured {per_step['on']:.4f} s: "
              f"{'met' if per_step['on'] <= 1.05 * target else 'missed'}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
