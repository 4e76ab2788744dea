#!/usr/bin/env python3
"""Draws the validation-loss curves that benchmarks/convergence.py --json wrote: one panel per run (steps,
batch, ranks), kpipe's schedules solid, the PyTorch reference loops dashed.

    benchmarks/plot_convergence.py convergence.json [more.json ...] -o docs/images/convergence.png

Needs matplotlib (Debian: python3-matplotlib, for /usr/bin/python3).
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLOURS = {"1f1b": "black", "sync": "black", "pipedream": "tab:green", "vertical sync": "tab:olive",
           "2bw": "tab:blue", "paper": "tab:red"}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", nargs="+", help="convergence.py --json files (their runs drawn together)")
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args()
    files = [json.load(open(name)) for name in args.json]
    data = dict(files[0], runs=[r for f in files for r in f["runs"]])
    panels = list(dict.fromkeys((r["steps"], r["batch"], r["ranks"]) for r in data["runs"]))  # as they were run
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False)
    for ax, (steps, batch, ranks) in zip(axes[0], panels):
        for r in data["runs"]:
            if (r["steps"], r["batch"], r["ranks"]) != (steps, batch, ranks):
                continue
            x, y = zip(*r["curve"])
            kpipe = r["source"] == "kpipe"
            name = r["label"] if kpipe else "PyTorch, the paper's 2BW" if r["label"] == "paper" else f"PyTorch {r['label']}"
            ax.plot(x, y, "-" if kpipe else "--", color=COLOURS.get(r["label"], "gray"), lw=1.6 if kpipe else 1.1,
                    label=f"{name}: {r['final']:.3f}")
        ax.set_title(f"{steps} steps, batch {batch}, {ranks} ranks", fontsize=10)
        ax.set_xlabel("step")
        ax.set_ylim(top=min(ax.get_ylim()[1], 3.4))  # the first evaluations, far above, would flatten the rest
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("validation loss")
    fig.suptitle(f"small preset, m = {data['microbatches']}, seed {data['seed']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(args.output, dpi=90)


if __name__ == "__main__":
    main()
