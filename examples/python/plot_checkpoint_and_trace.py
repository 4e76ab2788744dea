#!/usr/bin/env python3
"""Reads a kpipe checkpoint and an activation trace with h5py and plots them with matplotlib.

    python3 plot_checkpoint_and_trace.py CKPT TRACE OUT.png

CKPT is a step-<N>.h5 checkpoint file, or a checkpoint.dir (the file its `latest` names); TRACE a file
written by kpipe-train --trace.
The PNG has three panels: the L2 norm of every model tensor (by global layer), and per traced layer the
standard deviation of its output and the largest |gradient| over the traced steps (mean over micro-batches).
"""
import os
import sys

import h5py
import matplotlib

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def checkpoint_tensors(path):
    """{'/model/layers/07/attn/qkv/weight': array, ...}: every model tensor of one checkpoint file."""
    if os.path.isdir(path):  # a checkpoint.dir: the first line of `latest` names the file
        with open(os.path.join(path, "latest")) as f:
            path = os.path.join(path, f.readline().strip())
    tensors = {}
    with h5py.File(path, "r") as f:
        step = int(f.attrs["step"])

        def keep(name, obj):
            if isinstance(obj, h5py.Dataset):
                tensors["/model/" + name] = obj[()]

        f["model"].visititems(keep)  # plain datasets: visititems sees every one
    return step, tensors


def trace_series(path):
    """{(layer, kind): (steps, microbatches, stats[rows, 6])} and the column names."""
    series = {}
    with h5py.File(path, "r") as f:
        columns = f.attrs["stats_columns"]
        columns = (columns.decode() if isinstance(columns, bytes) else columns).split(",")
        for layer in f.get("layers", {}):
            for kind in ("output", "gradient"):
                g = f.get(f"layers/{layer}/{kind}")
                if g is None:
                    continue
                series[(int(layer), kind)] = (g["step"][()], g["microbatch"][()], g["stats"][()])
    return series, columns


def per_step(steps, values):
    """Mean over micro-batches, one value per traced step."""
    unique = np.unique(steps)
    return unique, np.array([np.nanmean(values[steps == s]) for s in unique])


def main(argv):
    if len(argv) != 4:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    ckpt, trace, out = argv[1:]
    step, tensors = checkpoint_tensors(ckpt)
    series, columns = trace_series(trace)
    std_col, absmax_col = columns.index("std"), columns.index("absmax")

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    names = sorted(tensors)
    norms = [float(np.linalg.norm(tensors[n].astype(np.float64))) for n in names]
    axes[0].bar(range(len(names)), norms, color="#3b75af")
    axes[0].set_xticks(range(len(names)))
    axes[0].set_xticklabels([n.replace("/model/layers/", "") for n in names], rotation=90, fontsize=6)
    axes[0].set_ylabel("L2 norm")
    axes[0].set_title(f"checkpoint step {step}: {len(names)} model tensors")

    for (layer, kind), (steps, _, stats) in sorted(series.items()):
        if kind == "output":
            x, y = per_step(steps, stats[:, std_col])
            axes[1].plot(x, y, marker="o", label=f"layer {layer}")
        else:
            x, y = per_step(steps, stats[:, absmax_col])
            axes[2].semilogy(x, y, marker="o", label=f"layer {layer}")
    axes[1].set_title("output std (mean over micro-batches)")
    axes[2].set_title("gradient absmax (mean over micro-batches)")
    for ax in axes[1:]:
        ax.set_xlabel("step")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    print(f"wrote {out}: {len(names)} tensors, {len(series)} traced series")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
