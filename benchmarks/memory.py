#!/usr/bin/env python3
"""Figures of docs/performance.md's memory section: memory per rank, the cost of recomputation, ZB-V's
bubble, and the ordered data-parallel reduction.

    benchmarks/memory.py [--build-dir DIR] [--rounds R] [--steps N] [--out DIR] [--base-train BIN]
                         [--sections memory,recompute,bubble,reduction]

Every run is kpipe-train with the bench preset (fp32, OPENBLAS_NUM_THREADS=1 per rank) and its --metrics
file, whose final object holds every rank's memory by category as the plan predicted it and as the
Kokkos allocation callbacks measured it, and the measured and simulated bubble:
  memory     2 and 4 ranks, gpipe / 1f1b / interleaved (2 chunks) / zb-h1 / zb-v, m = 8, each recomputation
             mode: predicted and measured bytes per rank (they must be equal: the script says if not);
             deterministic, so one short run each
  recompute  one rank (m = 8) and 1f1b on two ranks: median step time per mode, the modes alternated within
             each round, and the activation + backward bytes they need
  bubble     two ranks, m = 8, balanced partition: 1f1b, zb-h1, zb-v, interleaved: measured and simulated
             bubble, median over the rounds; and kpipe-sim's at equal stage costs on 4 ranks
  reduction  one pipeline stage x 2 replicas, m = 8: ordered with groups of 1, 2 and 4, and allreduce: median
             step time and the measured bytes; with --base-train, the same with a kpipe-train from before
             the reduction became a pass (its W's deferred behind the previous replica's sum): its step
             time and its maximum resident set per rank (/usr/bin/time)
Step times drop the first two steps of each run and pool the rest over the rounds. Writes memory.md and
memory.json into --out (default <build-dir>/memory-results).
"""
import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SCHEDULES = [("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("zb-h1", 1), ("zb-v", 2)]
MODES = ["none", "attention", "mlp", "block"]
CATEGORIES = ["parameters", "gradients", "optimizer", "weight_versions", "activations", "backward", "messages",
              "workspaces"]
MIB = 1024.0 * 1024.0


def loadavg():
    return os.getloadavg()[0]


def train(args, ranks, extra, steps, prefix=None):
    """kpipe-train --preset bench on `ranks` ranks; returns (final metrics, step seconds, stderr)."""
    with tempfile.TemporaryDirectory() as tmp:
        metrics = Path(tmp) / "metrics.jsonl"
        binary = prefix or [args.train]
        cmd = binary + ["--preset", "bench", "--steps", str(steps), "--train.eval_batches", "1",
                        "--train.log_every", "1000000", "--metrics", str(metrics)] + extra
        if ranks > 1:
            cmd = shlex.split(args.mpiexec) + ["-n", str(ranks)] + cmd
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr}")
        lines = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()]
        steps_s = [x["step_seconds"] for x in lines if not x.get("final")]
        final = next(x for x in lines if x.get("final"))
        return final, steps_s[2:] if len(steps_s) > 2 else steps_s, proc.stderr


def mib(b):
    return f"{b / MIB:.1f}"


def memory_section(args, out):
    rows = []
    for ranks in (2, 4):
        for schedule, chunks in SCHEDULES:
            for mode in MODES:
                extra = ["--pipeline-size", str(ranks), "--schedule", schedule, "--chunks", str(chunks),
                         "--microbatches", "8", "--recompute", mode]
                final, _, _ = train(args, ranks, extra, 2)
                pred = [sum(r["predicted"].values()) for r in final["memory"]]
                meas = [sum(r["measured"].values()) for r in final["memory"]]
                act = [r["measured"]["activations"] + r["measured"]["backward"] for r in final["memory"]]
                same = all(r["predicted"] == r["measured"] for r in final["memory"])
                rows.append(dict(ranks=ranks, schedule=schedule, chunks=chunks, recompute=mode, predicted=pred,
                                 measured=meas, activations_backward=act, equal=same, memory=final["memory"]))
                print(f"memory {ranks} {schedule} {mode}: {pred} {'=' if same else '!='} {meas}", file=sys.stderr)
    out["memory"] = rows
    md = ["### Memory per rank, predicted and measured (bench preset, m = 8)", "",
          "`python3 benchmarks/memory.py --sections memory`: kpipe-train --preset bench --microbatches 8 on 2 and 4 "
          "ranks; MiB per rank, total of every category (predicted = measured in every run: "
          f"{'yes' if all(r['equal'] for r in rows) else 'NO'}), and in brackets the activations + backward buffers.",
          "", "| ranks | schedule | none | attention | mlp | block |", "|---|---|---|---|---|---|"]
    for ranks in (2, 4):
        for schedule, chunks in SCHEDULES:
            cells = []
            for mode in MODES:
                r = next(x for x in rows if x["ranks"] == ranks and x["schedule"] == schedule and x["recompute"] == mode)
                cells.append(" / ".join(f"{mib(t)} ({mib(a)})" for t, a in zip(r["measured"], r["activations_backward"])))
            name = schedule + (f" v={chunks}" if chunks > 1 else "")
            md.append(f"| {ranks} | {name} | " + " | ".join(cells) + " |")
    return md


def recompute_section(args, out):
    configs = [(1, []), (2, ["--pipeline-size", "2", "--schedule", "1f1b"])]
    steps = {(r, m): [] for r, _ in configs for m in MODES}
    memory = {}
    loads = []
    for _ in range(args.rounds):
        for ranks, extra in configs:
            for mode in MODES:
                loads.append(loadavg())
                final, s, _ = train(args, ranks, extra + ["--microbatches", "8", "--recompute", mode], args.steps)
                steps[(ranks, mode)] += s
                memory[(ranks, mode)] = [r["measured"]["activations"] + r["measured"]["backward"] for r in final["memory"]]
    # Within one run the recomputation's share is measured directly: a layer profile times each block's
    # forward, input and weight gradient and recomputation (fenced), immune to the load changing between runs.
    shares = {}
    for mode in MODES[1:]:
        with tempfile.TemporaryDirectory() as tmp:
            profile = Path(tmp) / "layers.toml"
            train(args, 1, ["--microbatches", "8", "--recompute", mode, "--output.profile", str(profile)], args.steps)
            text = profile.read_text()
            f, i, w, r = [float(x) for x in re.search(r"block = \[([^\]]*)\]", text).group(1).split(",")]
            shares[mode] = dict(forward=f, input=i, weight=w, recompute=r, of_forward=r / f, of_block=r / (f + i + w))
    rows = []
    for ranks, _ in configs:
        base = statistics.median(steps[(ranks, "none")])
        for mode in MODES:
            med = statistics.median(steps[(ranks, mode)])
            fastest = min(steps[(ranks, mode)])
            rows.append(dict(ranks=ranks, recompute=mode, step_seconds=med, slowdown=med / base, fastest=fastest,
                             fastest_slowdown=fastest / min(steps[(ranks, "none")]),
                             activations_backward=memory[(ranks, mode)]))
    out["recompute"] = dict(rows=rows, loadavg=[min(loads), max(loads)], profile=shares)
    md = ["### What recomputation saves and costs (bench preset, m = 8)", "",
          f"`python3 benchmarks/memory.py --sections recompute --rounds {args.rounds} --steps {args.steps}` "
          f"(load average {min(loads):.2f} to {max(loads):.2f}): median step time over the rounds (the modes "
          "alternated within each) and the fastest step (less sensitive to other processes on the shared cores), and "
          "the activation slots + backward buffers each rank allocated.", "",
          "| layout | recompute | median step (s) | vs none | fastest step (s) | vs none | activations + backward, MiB "
          "per rank |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        layout = "1 rank" if r["ranks"] == 1 else "2 ranks, 1f1b"
        md.append(f"| {layout} | {r['recompute']} | {r['step_seconds']:.3f} | {r['slowdown']:.2f}x | "
                  f"{r['fastest']:.3f} | {r['fastest_slowdown']:.2f}x | " + " / ".join(mib(a) for a in r["activations_backward"]) + " |")
    md += ["", "Measured within one run (one rank, `--output.profile`): a block's recomputation, per sequence.", "",
           "| recompute | recompute (ms) | of the block's forward | of the block's F + I + W |", "|---|---|---|---|"]
    for mode, x in shares.items():
        md.append(f"| {mode} | {1e3 * x['recompute']:.2f} | {100 * x['of_forward']:.0f}% | {100 * x['of_block']:.0f}% |")
    return md


def bubble_section(args, out):
    runs = [("1f1b", 1), ("zb-h1", 1), ("zb-v", 2), ("interleaved", 2)]
    got = {name: dict(measured=[], simulated=[], steps=[]) for name, _ in runs}
    loads = []
    for _ in range(args.rounds):
        for name, chunks in runs:
            loads.append(loadavg())
            final, s, _ = train(args, 2, ["--pipeline-size", "2", "--schedule", name, "--chunks", str(chunks),
                                          "--microbatches", "8", "--pipeline.partition", "balanced"], args.steps)
            got[name]["measured"].append(final["measured_bubble"])
            got[name]["simulated"].append(final["simulated_bubble"])
            got[name]["steps"] += s
    sim4 = {}
    for name, chunks in runs:
        cost = ["--cost-f", "0.5", "--cost-i", "0.5", "--cost-w", "0.5", "--cost-b", "1"] if chunks == 2 else \
               ["--cost-f", "1", "--cost-i", "1", "--cost-w", "1", "--cost-b", "2"]
        text = subprocess.run([args.sim, "schedule", "--schedule", name, "--chunks", str(chunks), "--pipeline-size",
                               "4", "--microbatches", "8", "--no-gantt"] + cost, capture_output=True, text=True).stdout
        sim4[name] = float(re.search(r"bubble ([\d.]+)%", text).group(1)) / 100
    rows = [dict(schedule=n, measured=statistics.median(got[n]["measured"]),
                 simulated=statistics.median(got[n]["simulated"]), step_seconds=statistics.median(got[n]["steps"]),
                 simulated_4_ranks_equal_costs=sim4[n]) for n, _ in runs]
    out["bubble"] = dict(rows=rows, loadavg=[min(loads), max(loads)])
    md = ["### ZB-V's bubble beside zb-h1, 1f1b and interleaved", "",
          f"`python3 benchmarks/memory.py --sections bubble --rounds {args.rounds} --steps {args.steps}` "
          f"(load average {min(loads):.2f} to {max(loads):.2f}): two ranks, bench preset, m = 8, medians over the "
          "rounds, balanced partition; and kpipe-sim on 4 ranks, m = 8, at equal stage costs (F = I = W = 1 per stage: 0.5 per chunk "
          "for two chunks).", "",
          "| schedule | step (s), 2 ranks | bubble measured / simulated, 2 ranks | simulated, 4 ranks, equal costs |",
          "|---|---|---|---|"]
    for r in rows:
        md.append(f"| {r['schedule']} | {r['step_seconds']:.3f} | {r['measured']:.3f} / {r['simulated']:.3f} | "
                  f"{r['simulated_4_ranks_equal_costs']:.3f} |")
    return md


def reduction_section(args, out):
    variants = [("ordered, groups of 1", ["--pipeline.dp_reduction_group", "1"], None),
                ("ordered, groups of 2", ["--pipeline.dp_reduction_group", "2"], None),
                ("ordered, groups of 4", ["--pipeline.dp_reduction_group", "4"], None),
                ("allreduce", ["--pipeline.dp_reduction", "allreduce"], None)]
    if args.base_train:
        variants.append(("before: W's deferred behind the sum", [], [args.base_train]))
    got = {name: dict(steps=[], bytes=None, rss=[]) for name, _, _ in variants}
    loads = []
    for _ in range(args.rounds):
        for name, extra, binary in variants:
            loads.append(loadavg())
            prefix = ["/usr/bin/time", "-f", "maxrss_kib %M"] + (binary or [args.train])
            final, s, err = train(args, 2, ["--data-parallel", "2", "--microbatches", "8"] + extra, args.steps, prefix)
            got[name]["steps"] += s
            got[name]["rss"] += [int(x) for x in re.findall(r"maxrss_kib (\d+)", err)]
            if "memory" in final:
                got[name]["bytes"] = [r["measured"]["activations"] + r["measured"]["backward"] for r in final["memory"]]
    rows = [dict(variant=n, step_seconds=statistics.median(g["steps"]), activations_backward=g["bytes"],
                 max_rss_mib=max(g["rss"]) / 1024 if g["rss"] else None) for n, g in got.items()]
    out["reduction"] = dict(rows=rows, loadavg=[min(loads), max(loads)])
    md = ["### The ordered reduction: groups, traffic, memory", "",
          f"`python3 benchmarks/memory.py --sections reduction --rounds {args.rounds} --steps {args.steps}"
          f"{' --base-train ...' if args.base_train else ''}` (load average {min(loads):.2f} to {max(loads):.2f}): "
          "bench preset, 1 stage x 2 replicas, m = 8 (4 per replica); the running sum is the whole model's "
          "gradients, 24.7 MiB per hop.", "",
          "| reduction | step (s) | hops of the sum per step | activations + backward, MiB per rank | max RSS, MiB |",
          "|---|---|---|---|---|"]
    hops = {"ordered, groups of 1": "7", "ordered, groups of 2": "3", "ordered, groups of 4": "1", "allreduce": "-",
            "before: W's deferred behind the sum": "1"}
    for r in rows:
        b = " / ".join(mib(x) for x in r["activations_backward"]) if r["activations_backward"] else "not reported"
        rss = f"{r['max_rss_mib']:.0f}" if r["max_rss_mib"] else "-"
        md.append(f"| {r['variant']} | {r['step_seconds']:.3f} | {hops.get(r['variant'], '?')} | {b} | {rss} |")
    return md


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    root = Path(__file__).resolve().parent.parent
    parser.add_argument("--build-dir", default=str(root / "build"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--out")
    parser.add_argument("--mpiexec", default="mpiexec --oversubscribe" + (" --allow-run-as-root" if os.geteuid() == 0 else ""))
    parser.add_argument("--base-train", help="a kpipe-train from before the ordered reduction became a pass")
    parser.add_argument("--sections", default="memory,recompute,bubble,reduction")
    args = parser.parse_args()
    build = Path(args.build_dir)
    args.train = str(build / "apps" / "kpipe-train")
    args.sim = str(build / "apps" / "kpipe-sim")
    out_dir = Path(args.out or build / "memory-results")
    out_dir.mkdir(parents=True, exist_ok=True)
    out, md = {}, []
    sections = dict(memory=memory_section, recompute=recompute_section, bubble=bubble_section,
                    reduction=reduction_section)
    for name in args.sections.split(","):
        md += sections[name](args, out) + [""]
    (out_dir / "memory.json").write_text(json.dumps(out, indent=1))
    (out_dir / "memory.md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
