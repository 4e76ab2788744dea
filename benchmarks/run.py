#!/usr/bin/env python3
"""Whole-step benchmark of kpipe, one rank and two ranks with each schedule, beside PyTorch where it imports.

    benchmarks/run.py [--build-dir DIR] [--steps N] [--repeats R] [--out DIR]

Builds kpipe-train, kpipe-sim and kpipe_bench_step if needed (Release), then on this machine, fp32,
OPENBLAS_NUM_THREADS=1 per rank:
  * the one-core sgemm peak (kpipe_bench_step --benchmark_filter=SgemmPeak, median of the repetitions,
    the larger of the two sizes) and the share of a one-rank step spent in gemm (BM_TrainingStep);
  * kpipe-train with the bench preset on one rank (m=1, m=8) and on two ranks with gpipe, 1f1b,
    interleaved (2 chunks) and zb-h1 (m=8), each `--repeats` times: tokens/s is the batch's tokens over the
    median step time, pooled over the repeats, the first two steps of each run left out;
  * benchmarks/pytorch/gpt.py (one process, m=1 and m=8) and pipeline.py (Schedule1F1B, 2 gloo ranks)
    where `python -c "import torch"` works; otherwise it says so and skips them.
Every configuration runs once per round, each PyTorch run right after the kpipe run it is compared with, and
the rounds repeat `--repeats` times: a machine whose speed drifts shifts both sides alike. The kpipe/PyTorch
ratio is given both from the pooled medians and paired by round (median, min-max over the rounds).
Writes results.md and results.json into --out (default <build-dir>/bench-results). See docs/performance.md.

How the figures are computed:
  GFLOP/s      tokens/s x model FLOPs per token, FLOPs from the formulas of src/kpipe/model/desc.cpp
               (repeated below in flops_per_sequence; forward + input and weight gradients, attention
               counted as the full T x T products)
  % of peak    GFLOP/s / (ranks x the sgemm peak of one core)
  speedup      tokens/s of the run / tokens/s of one rank with the same m
  bubble       kpipe-train's measured bubble (idle share of each rank's step, mean over ranks) and the
               simulator's with that run's measured per-action costs, from its --metrics file
  activation   peak activation memory per rank: the schedule (kpipe-sim schedule --print-schedule) is walked,
  memory       each forward adding the stash bytes of its chunk (sum of stash_elems of the chunk's layers in
               desc.cpp x sequences per micro-batch x 4 bytes), each B or W removing them; the measured peak
               stash count (kpipe-train, two ranks) is printed beside the predicted one
  CPU time     user + system seconds of the whole run, all ranks (getrusage of the children), beside
               its wall time: cpu / (wall x ranks) well under 1 on one rank means other processes had the core
"""
import argparse
import json
import os
import platform
import re
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Presets of src/kpipe/core/config.cpp (model and batch); the script passes every key explicitly so that its
# FLOP and memory arithmetic describes exactly the model that runs.
PRESETS = {
    "bench": dict(vocab=256, seq_len=128, d_model=256, n_layers=8, n_heads=8, mlp_ratio=4, batch=16),
    "tiny": dict(vocab=256, seq_len=64, d_model=64, n_layers=2, n_heads=4, mlp_ratio=4, batch=8),
}

# (name, ranks, schedule, chunks, micro-batches)
KPIPE_RUNS = [
    ("1 rank, m=1", 1, "1f1b", 1, 1),
    ("1 rank, m=8", 1, "1f1b", 1, 8),
    ("2 ranks, gpipe", 2, "gpipe", 1, 8),
    ("2 ranks, 1f1b", 2, "1f1b", 1, 8),
    ("2 ranks, interleaved v=2", 2, "interleaved", 2, 8),
    ("2 ranks, zb-h1", 2, "zb-h1", 1, 8),
]


# ---- the model description (src/kpipe/model/desc.cpp), per sequence of seq_len tokens -------------------
def layer_figures(c):
    """Per global layer: (FLOPs forward + backward, stash elements), as desc.cpp computes them."""
    C, T, V, H, L = c["d_model"], c["seq_len"], c["vocab"], c["n_heads"], c["n_layers"]
    F = c["mlp_ratio"] * C
    t = float(T)
    layers = [(t * C + 2 * t * C, 0)]  # embedding: position add; weight gradient
    linear = 2.0 * t * (3 * C * C + C * C + 2 * C * F)
    attention = 4.0 * t * t * C
    elementwise = t * (10.0 * C + 8.0 * F) + 5.0 * t * t * H
    block_flops = (linear + attention + elementwise) + (linear + 2 * attention + 2 * elementwise) + linear
    block_stash = T * (C * 8 + 2 * F) + H * T * T + 4 * T
    layers += [(block_flops, block_stash)] * L
    head_flops = (2 * t * C * V + t * (8.0 * C + 5.0 * V)) + (2 * t * C * V + t * (8.0 * C + 3.0 * V)) + 2 * t * C * V
    layers.append((head_flops, T * (2 * C + V) + 2 * T))
    return layers


def flops_per_token(c):
    return sum(f for f, _ in layer_figures(c)) / c["seq_len"]


def uniform_partition(n_layers, stages):
    """src/kpipe/partition: contiguous ranges, the first (layers % stages) stages one layer more."""
    base, extra = divmod(n_layers, stages)
    ranges, first = [], 0
    for s in range(stages):
        size = base + (1 if s < extra else 0)
        ranges.append((first, first + size))
        first += size
    return ranges


def chunk_stash_bytes(c, ranks, chunks, microbatches):
    """bytes[rank][chunk] stashed by one micro-batch's forward (virtual stage k = chunk * ranks + rank)."""
    layers = layer_figures(c)
    sequences = c["batch"] // microbatches
    ranges = uniform_partition(len(layers), ranks * chunks)
    return [[sum(layers[i][1] for i in range(*ranges[ch * ranks + r])) * sequences * 4 for ch in range(chunks)]
            for r in range(ranks)]


def peak_activation_bytes(schedule_text, stash_bytes):
    """Walk each rank's actions (kpipe-sim text form: F<mb>[.<chunk>], B, I, W, S): F adds its chunk's stash,
    B or W (the last use of it) removes it, as schedule::peak_stash counts."""
    peaks = []
    for r, line in enumerate(schedule_text):
        held = peak = 0
        for token in line.split():
            m = re.fullmatch(r"([FBIW])(\d+)(?:\.(\d+))?", token)
            if not m:
                continue
            size = stash_bytes[r][int(m.group(3) or 0)]
            if m.group(1) == "F":
                held += size
                peak = max(peak, held)
            elif m.group(1) in "BW":
                held -= size
        peaks.append(peak)
    return peaks


# ---- running things ---------------------------------------------------------------------------------------
def run_timed(cmd, env=None, timeout=1800):
    """Run cmd; return (completed process, wall seconds, CPU seconds of it and all its descendants)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        sys.stderr.write(f"failed ({proc.returncode}): {shlex.join(cmd)}\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}\n")
        raise SystemExit(1)
    return proc, wall, cpu


def loadavg():
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except OSError:
        return None


def build(args):
    if args.no_build:
        return
    build_dir = Path(args.build_dir)
    if not (build_dir / "CMakeCache.txt").exists():
        subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release"], check=True)
    cache = (build_dir / "CMakeCache.txt").read_text()
    if "CMAKE_BUILD_TYPE:STRING=Release" not in cache:
        print(f"warning: {build_dir} is not a Release build: the figures will be low", file=sys.stderr)
    targets = ["kpipe-train", "kpipe-sim", "kpipe_bench_step"]
    subprocess.run(["cmake", "--build", str(build_dir), f"-j{args.jobs}", "--target", *targets], check=True)


def sgemm_peak(args, env):
    if not args.bench_bin or not Path(args.bench_bin).exists():
        print("kpipe_bench_step not built: no sgemm peak", file=sys.stderr)
        return None
    proc, _, _ = run_timed([args.bench_bin, "--benchmark_filter=SgemmPeak", "--benchmark_format=json",
                            f"--benchmark_repetitions={args.repeats}"], env)
    runs = [b for b in json.loads(proc.stdout)["benchmarks"] if b.get("run_type") == "iteration"]
    by_size = {}
    for b in runs:
        by_size.setdefault(b["run_name"], []).append(b["GFLOP_per_s"] / 1e9)
    medians = {name: statistics.median(v) for name, v in by_size.items()}
    return {"gflop_per_s": max(medians.values()), "per_size": medians}


def gemm_share(args, env):
    if not args.bench_bin or not Path(args.bench_bin).exists() or args.preset != "bench":
        return None
    proc, _, _ = run_timed([args.bench_bin, "--benchmark_filter=TrainingStep", "--benchmark_format=json"], env)
    return {b["name"]: {"gemm_share": b["gemm_share"], "gflop_per_s": b["GFLOP_per_s"], "tokens_per_s": b["tokens_per_s"]}
            for b in json.loads(proc.stdout)["benchmarks"]}


def simulate(args, ranks, schedule, chunks, m):
    cmd = [args.sim_bin, "schedule", "--pipeline-size", str(ranks), "--schedule", schedule, "--chunks", str(chunks),
           "--microbatches", str(m), "--no-gantt", "--print-schedule"]
    proc, _, _ = run_timed(cmd)
    return [line for line in proc.stdout.splitlines() if re.match(r"^F\d", line)][:ranks]


def kpipe_command(args, c, ranks, schedule, chunks, m):
    model_keys = ["vocab", "seq_len", "d_model", "n_layers", "n_heads", "mlp_ratio"]
    cmd = [args.train_bin, "--steps", str(args.steps), "--batch", str(c["batch"]), "--microbatches", str(m),
           "--pipeline-size", str(ranks), "--schedule", schedule, "--chunks", str(chunks),
           "--train.eval_batches", "1", "--train.log_every", "1000000"]
    for key in model_keys:
        cmd += [f"--model.{key}", str(c[key])]
    if ranks > 1:
        cmd = shlex.split(args.mpiexec) + ["-n", str(ranks)] + cmd
    return cmd


def kpipe_once(args, env, c, run, rep, workdir):
    """One kpipe-train run of configuration `run` (an entry of KPIPE_RUNS): its timed steps and figures."""
    name, ranks, schedule, chunks, m = run
    metrics = Path(workdir) / f"metrics-{ranks}-{schedule}-{m}-{rep}.jsonl"
    load = loadavg()
    proc, wall, cpu = run_timed(kpipe_command(args, c, ranks, schedule, chunks, m) + ["--metrics", str(metrics)], env)
    lines = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    per_step = [x["step_seconds"] for x in lines if not x.get("final")]
    final = next(x for x in lines if x.get("final"))
    kept = per_step[2:] if len(per_step) > 2 else per_step
    stash = {int(r): (int(meas), int(pred), int(slots)) for r, _, _, meas, pred, slots in
             re.findall(r"(\d+):([\d.]+)/([\d.]+)/(\d+)/(\d+)/(\d+)", proc.stdout + proc.stderr)}
    return {"steps": kept, "step_seconds_median": statistics.median(kept), "wall_s": wall, "cpu_s": cpu,
            "cpu_share": cpu / (wall * ranks), "loadavg_before": load,
            "measured_bubble": final.get("measured_bubble"), "simulated_bubble": final.get("simulated_bubble"),
            "peak_stash_measured_predicted": stash}


def kpipe_summary(args, c, run, repeats):
    name, ranks, schedule, chunks, m = run
    steps = [s for r in repeats for s in r.pop("steps")]
    tokens = c["batch"] * c["seq_len"]
    median = statistics.median(steps)
    schedule_text = simulate(args, ranks, schedule, chunks, m)
    mem = peak_activation_bytes(schedule_text, chunk_stash_bytes(c, ranks, chunks, m))
    stash = repeats[-1]["peak_stash_measured_predicted"]
    return {"name": name, "ranks": ranks, "schedule": schedule, "chunks": chunks, "microbatches": m,
            "tokens_per_s": tokens / median, "step_seconds_median": median,
            "step_seconds_min_max": [min(steps), max(steps)],
            "gflop_per_s": flops_per_token(c) * tokens / median / 1e9,
            "measured_bubble": statistics.median(r["measured_bubble"] for r in repeats),
            "simulated_bubble": statistics.median(r["simulated_bubble"] for r in repeats),
            "peak_stash_measured": [stash[r][0] for r in sorted(stash)] if stash else None,
            "peak_stash_predicted": [stash[r][1] for r in sorted(stash)] if stash else None,
            "slots_allocated": [stash[r][2] for r in sorted(stash)] if stash else None,
            "peak_activation_bytes": mem, "repeats": repeats}


def torch_available(python):
    return subprocess.run([python, "-c", "import torch"], capture_output=True).returncode == 0


# PyTorch's side: (key, script, extra arguments, the kpipe run it is compared with).
TORCH_RUNS = [
    ("one_process_m1", "gpt.py", ["--microbatches", "1"], "1 rank, m=1"),
    ("one_process_m8", "gpt.py", ["--microbatches", "8"], "1 rank, m=8"),
    ("pipeline_1f1b", "pipeline.py", ["--microbatches", "8"], "2 ranks, 1f1b"),
]


def torch_once(args, env, c, script, extra):
    cmd = [args.python, str(ROOT / "benchmarks" / "pytorch" / script), "--steps", str(args.steps),
           "--batch", str(c["batch"]), "--n-layers", str(c["n_layers"]), "--d-model", str(c["d_model"]),
           "--seq-len", str(c["seq_len"])] + extra
    load = loadavg()
    proc, wall, cpu = run_timed(cmd, env)
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    r.update(wall_s=wall, cpu_s=cpu, loadavg_before=load)
    return r


def torch_summary(c, results):
    median = statistics.median(r["step_seconds_median"] for r in results)
    tokens = c["batch"] * c["seq_len"]
    return {"tokens_per_s": tokens / median, "step_seconds_median": median,
            "gflop_per_s": flops_per_token(c) * tokens / median / 1e9, "torch": results[0]["torch"],
            "repeats": results}


# ---- report -----------------------------------------------------------------------------------------------
def machine():
    info = {"platform": platform.platform(), "cpus": os.cpu_count()}
    if shutil.which("lscpu"):
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for key in ("Model name", "Flags"):
            m = re.search(rf"^{key}:\s*(.*)$", out, re.M)
            if m:
                info[key.lower().replace(" ", "_")] = m.group(1).strip()
        if "flags" in info:
            info["flags"] = " ".join(f for f in info["flags"].split() if f.startswith(("avx", "fma")))
    return info


def markdown(res):
    c, peak = res["config"], res["sgemm_peak"]
    peak_g = peak["gflop_per_s"] if peak else None
    one = {r["microbatches"]: r["tokens_per_s"] for r in res["kpipe"] if r["ranks"] == 1}
    out = [f"Machine: {res['machine'].get('model_name', '?')}, {res['machine']['cpus']} cores; "
           f"preset {res['preset']} ({c['n_layers']} layers, d_model {c['d_model']}, seq_len {c['seq_len']}, "
           f"batch {c['batch']}), fp32, one thread per rank; {res['steps']} steps x {res['repeats']} runs, "
           f"median step time over the steps after the first two.",
           f"Model FLOPs per token: {res['flops_per_token'] / 1e6:.2f} M. "
           + (f"sgemm peak of one core: {peak_g:.1f} GFLOP/s." if peak else "sgemm peak: not measured."),
           f"Load average before / after: {res['loadavg_before']} / {res['loadavg_after']}.", "",
           "| run | tokens/s | GFLOP/s | % of sgemm peak | speedup vs 1 rank | bubble measured / simulated "
           "| peak stash per rank, measured / predicted | slots allocated per rank | peak activation MiB per rank "
           "| CPU/(wall x ranks) |",
           "|---|---:|---:|---:|---:|---|---|---|---|---:|"]
    for r in res["kpipe"]:
        share = f"{100 * r['gflop_per_s'] / (r['ranks'] * peak_g):.0f}%" if peak else "-"
        speedup = r["tokens_per_s"] / one[r["microbatches"]] if r["microbatches"] in one else None
        stash = (f"{', '.join(map(str, r['peak_stash_measured']))} / {', '.join(map(str, r['peak_stash_predicted']))}"
                 if r["peak_stash_measured"] else "-")
        slots = ", ".join(map(str, r["slots_allocated"])) if r.get("slots_allocated") else "-"
        mem = " / ".join(f"{b / 2**20:.1f}" for b in r["peak_activation_bytes"])
        cpu_share = statistics.median(x["cpu_share"] for x in r["repeats"])
        out.append(f"| kpipe {r['name']} | {r['tokens_per_s']:.0f} | {r['gflop_per_s']:.1f} | {share} | "
                   f"{speedup:.2f}x | {r['measured_bubble']:.3f} / {r['simulated_bubble']:.3f} | {stash} | {slots} | {mem} | "
                   f"{cpu_share:.2f} |")
    if res.get("gemm_share"):
        out.append("")
        out.append("Share of a one-rank step inside KokkosBlas::gemm (kpipe_bench_step BM_TrainingStep): "
                   + ", ".join(f"{k}: {100 * v['gemm_share']:.0f}%" for k, v in res["gemm_share"].items()) + ".")
    t = res.get("pytorch")
    out.append("")
    if not t:
        out.append(f"PyTorch: {res.get('pytorch_skipped', 'skipped')}.")
        return "\n".join(out) + "\n"
    k = {r["name"]: r for r in res["kpipe"]}
    rows = [("one process, m=1", t["one_process_m1"], k["1 rank, m=1"]),
            ("one process, m=8", t["one_process_m8"], k["1 rank, m=8"]),
            ("2 ranks, 1F1B, m=8", t["pipeline_1f1b"], k["2 ranks, 1f1b"])]
    out += [f"PyTorch {t['one_process_m1']['torch']} side by side (same model, shapes and initialization scheme; "
            "PyTorch pipelined with torch.distributed.pipelining Schedule1F1B on 2 gloo ranks):", "",
            "| run | kpipe tokens/s | PyTorch tokens/s | kpipe / PyTorch | same, paired by round (min-max) "
            "| PyTorch GFLOP/s |",
            "|---|---:|---:|---:|---|---:|"]
    for label, tr, kr in rows:
        rounds = tr["ratio_by_round"]
        out.append(f"| {label} | {kr['tokens_per_s']:.0f} | {tr['tokens_per_s']:.0f} | "
                   f"{kr['tokens_per_s'] / tr['tokens_per_s']:.2f} | {tr['paired_ratio']:.2f} "
                   f"({min(rounds):.2f}-{max(rounds):.2f}) | {tr['gflop_per_s']:.1f} |")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default=str(ROOT / "build"))
    ap.add_argument("--steps", type=int, default=10, help="steps per run (the first two are not timed)")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each configuration")
    ap.add_argument("--out", default="", help="results directory (default <build-dir>/bench-results)")
    ap.add_argument("--preset", default="bench", choices=sorted(PRESETS), help="tiny: a smoke test in seconds")
    ap.add_argument("--jobs", type=int, default=1, help="build parallelism")
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--no-torch", action="store_true", help="skip the PyTorch side")
    ap.add_argument("--python", default=sys.executable, help="the Python that runs benchmarks/pytorch")
    ap.add_argument("--mpiexec", default="", help="MPI launcher and its flags (default: mpiexec, "
                    "with --allow-run-as-root --oversubscribe as root)")
    ap.add_argument("--train-bin", default="")
    ap.add_argument("--sim-bin", default="")
    ap.add_argument("--bench-bin", default="", help="kpipe_bench_step ('none': skip the sgemm peak)")
    args = ap.parse_args()
    if args.steps < 3 or args.repeats < 1:
        raise SystemExit("--steps must be at least 3 and --repeats at least 1")
    build_dir = Path(args.build_dir)
    args.train_bin = args.train_bin or str(build_dir / "apps" / "kpipe-train")
    args.sim_bin = args.sim_bin or str(build_dir / "apps" / "kpipe-sim")
    args.bench_bin = "" if args.bench_bin == "none" else args.bench_bin or str(build_dir / "benchmarks" / "kpipe_bench_step")
    if not args.mpiexec:
        args.mpiexec = "mpiexec" + (" --allow-run-as-root --oversubscribe" if os.geteuid() == 0 else "")
    out = Path(args.out or build_dir / "bench-results")
    out.mkdir(parents=True, exist_ok=True)
    build(args)

    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    c = PRESETS[args.preset]
    res = {"preset": args.preset, "config": c, "steps": args.steps, "repeats": args.repeats,
           "flops_per_token": flops_per_token(c), "machine": machine(), "loadavg_before": loadavg()}
    print("sgemm peak ...", file=sys.stderr)
    res["sgemm_peak"] = sgemm_peak(args, env)
    res["gemm_share"] = gemm_share(args, env)
    if args.no_torch:
        res["pytorch_skipped"] = "skipped (--no-torch)"
    elif not torch_available(args.python):
        res["pytorch_skipped"] = f"not installed for {args.python} (pip install torch): skipped"
    torch_runs = [] if "pytorch_skipped" in res else TORCH_RUNS
    # Rounds: every configuration once per round, kpipe and PyTorch alternating, so that a machine whose
    # speed drifts over minutes (shared hosts do) shifts both sides alike instead of favouring one.
    kpipe_repeats = {run[0]: [] for run in KPIPE_RUNS}
    torch_repeats = {key: [] for key, *_ in torch_runs}
    with tempfile.TemporaryDirectory() as workdir:
        for rep in range(args.repeats):
            for run in KPIPE_RUNS:
                print(f"round {rep + 1}/{args.repeats}: kpipe {run[0]} ...", file=sys.stderr)
                kpipe_repeats[run[0]].append(kpipe_once(args, env, c, run, rep, workdir))
                for key, script, extra, partner in torch_runs:
                    if partner == run[0]:
                        print(f"round {rep + 1}/{args.repeats}: PyTorch {key} ...", file=sys.stderr)
                        torch_repeats[key].append(torch_once(args, env, c, script, extra))
    res["kpipe"] = [kpipe_summary(args, c, run, kpipe_repeats[run[0]]) for run in KPIPE_RUNS]
    if torch_runs:
        res["pytorch"] = {key: torch_summary(c, torch_repeats[key]) for key in torch_repeats}
        # kpipe / PyTorch per round (the two ran back to back), then the median over rounds.
        k = {r["name"]: r for r in res["kpipe"]}
        for key, _, _, partner in torch_runs:
            pairs = zip(k[partner]["repeats"], res["pytorch"][key]["repeats"])
            ratios = [t["step_seconds_median"] / kr["step_seconds_median"] for kr, t in pairs]
            res["pytorch"][key].update(ratio_by_round=ratios, paired_ratio=statistics.median(ratios))
    res["loadavg_after"] = loadavg()
    (out / "results.json").write_text(json.dumps(res, indent=1) + "\n")
    table = markdown(res)
    (out / "results.md").write_text(table)
    print(table)
    print(f"written: {out / 'results.md'}, {out / 'results.json'}", file=sys.stderr)


if __name__ == "__main__":
    main()
