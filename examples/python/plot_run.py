#!/usr/bin/env python3
"""Reads what a kpipe run wrote -- a checkpoint, an activation trace and a timeline -- with plain h5py
(no kpipe code) and draws them with matplotlib.

    python3 plot_run.py CKPT TRACE TIMELINE OUT.png

CKPT is a step-<N>.h5 checkpoint file, or a checkpoint.dir (the file its `latest` names); TRACE the file of
kpipe-train --trace, TIMELINE the file of kpipe-train --timeline. The PNG has six panels:
  loss curve         the timeline's /steps table (loss and learning rate per optimizer step)
  output std         per traced layer, the standard deviation of its output per traced step
  gradient absmax    per traced layer, the largest |dL/d output| per traced step
  timeline           the last step's actions per rank (F, B, I, W as bars; waits for messages hatched)
  tensor norms       the L2 norm of every model tensor in the checkpoint, by global layer
  tokenizer          what the checkpoint's token ids mean (bytes, or a BPE model's vocabulary)
The layouts are in docs/checkpoint-format.md and docs/traces.md.
"""
import os
import sys

import h5py
import matplotlib

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

OP_NAMES = ["F", "B", "I", "W", "S", "send_activation", "recv_activation", "send_gradient", "recv_gradient",
            "send_sum", "recv_sum", "U"]
OP_COLORS = {"F": "#4c72b0", "B": "#dd8452", "I": "#c44e52", "W": "#55a868", "S": "#8172b3", "U": "#b83a3a"}


def text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def step_numbers(f, steps):
    """Steps as kpipe numbers them everywhere, from 1 (step N: the Nth optimizer step, as in a checkpoint's
    step); traces and timelines of format_version 1 numbered them from 0."""
    return steps + 1 if int(f.attrs["format_version"]) == 1 else steps


def checkpoint_file(path):
    """The checkpoint's HDF5 file: the one a checkpoint.dir's `latest` names (its first line), or the file."""
    if os.path.isdir(path):
        with open(os.path.join(path, "latest")) as f:
            path = os.path.join(path, f.readline().strip())
    return path


def checkpoint(path):
    """(step, {'/model/layers/07/attn/qkv/weight': array, ...}, tokenizer description)."""
    tensors = {}
    with h5py.File(checkpoint_file(path), "r") as f:
        step = int(f.attrs["step"])

        def keep(name, obj):
            if isinstance(obj, h5py.Dataset):
                tensors["/model/" + name] = obj[()]

        f["model"].visititems(keep)  # one file of plain datasets: visititems sees every tensor
        tokenizer = "bytes (vocabulary 256)"  # a checkpoint without /tokenizer predates tokenizers
        if "tokenizer" in f:
            t = f["tokenizer"]
            kind, vocab = text(t.attrs["kind"]), int(t.attrs["vocab"])
            tokenizer = f"{kind} (vocabulary {vocab})"
            if "model" in t:
                tokenizer += f", model of {t['model'].shape[0]} bytes"
    return step, tensors, tokenizer


def trace(path):
    """{(layer, kind): (steps, stats[rows, 6])} and the column names."""
    series = {}
    with h5py.File(path, "r") as f:
        columns = text(f.attrs["stats_columns"]).split(",")
        for layer in f.get("layers", {}):
            for kind in ("output", "gradient"):
                g = f.get(f"layers/{layer}/{kind}")
                if g is not None:
                    series[(int(layer), kind)] = (step_numbers(f, g["step"][()]), g["stats"][()])
    return series, columns


def timeline(path):
    """(the /timeline columns, the /steps columns) as dicts of arrays."""
    with h5py.File(path, "r") as f:
        actions = {k: f["timeline"][k][()] for k in f["timeline"]}
        steps = {k: f["steps"][k][()] for k in f["steps"]} if "steps" in f else {}
        actions["step"] = step_numbers(f, actions["step"])
        if "step" in steps:
            steps["step"] = step_numbers(f, steps["step"])
    return actions, steps


def per_step(steps, values):
    """Mean over micro-batches, one value per traced step."""
    unique = np.unique(steps)
    return unique, np.array([np.nanmean(values[steps == s]) for s in unique])


def plot_loss(ax, steps):
    if not steps or len(steps["step"]) == 0:
        ax.set_title("loss: no /steps table in this timeline")
        return
    x = steps["step"]
    ax.plot(x, steps["loss"], color="#4c72b0", label="training loss")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats per token)")
    lr = ax.twinx()
    lr.plot(x, steps["lr"], color="#aaaaaa", linewidth=0.8)
    lr.set_ylabel("learning rate", color="#888888")
    tokens = int(np.sum(steps["tokens"]))
    ax.set_title(f"loss: {steps['loss'][0]:.2f} -> {steps['loss'][-1]:.2f} over {len(x)} steps, {tokens} tokens")


def plot_trace(ax_std, ax_grad, series, columns):
    std_col, absmax_col = columns.index("std"), columns.index("absmax")
    for (layer, kind), (steps, stats) in sorted(series.items()):
        if kind == "output":
            ax_std.plot(*per_step(steps, stats[:, std_col]), marker="o", markersize=3, label=f"layer {layer}")
        else:
            ax_grad.semilogy(*per_step(steps, stats[:, absmax_col]), marker="o", markersize=3, label=f"layer {layer}")
    ax_std.set_title("output std per layer (mean over micro-batches)")
    ax_grad.set_title("gradient absmax per layer (mean over micro-batches)")
    for ax in (ax_std, ax_grad):
        ax.set_xlabel("step")
        ax.legend(fontsize=6, ncol=2)


def plot_timeline(ax, actions):
    if len(actions["step"]) == 0:
        ax.set_title("timeline: no steps")
        return
    last = actions["step"].max()
    mask = actions["step"] == last
    ranks = np.unique(actions["rank"][mask])
    for rank, op, mb, start, end in zip(actions["rank"][mask], actions["op"][mask], actions["microbatch"][mask],
                                        actions["start"][mask], actions["end"][mask]):
        name = OP_NAMES[op] if 0 <= op < len(OP_NAMES) else "?"
        y = rank
        if name in OP_COLORS:
            ax.barh(y, (end - start) * 1e3, left=start * 1e3, height=0.7, color=OP_COLORS[name], edgecolor="white",
                    linewidth=0.4)
            if end - start > 0:
                ax.text((start + end) / 2 * 1e3, y, f"{name}{mb}", ha="center", va="center", fontsize=5, color="white")
        elif name.startswith("recv") and end - start > 0:
            ax.barh(y, (end - start) * 1e3, left=start * 1e3, height=0.3, color="none", edgecolor="#999999",
                    hatch="////", linewidth=0.3)
    ax.set_yticks(list(ranks))
    ax.set_yticklabels([f"rank {r}" for r in ranks])
    ax.invert_yaxis()
    ax.set_xlabel("ms since the step began")
    # The measured bubble is kpipe-train's and kpipe-inspect timeline's figure (src/kpipe/schedule/bubble.hpp).
    ax.set_title(f"timeline of step {last}")


def plot_norms(ax, step, tensors):
    names = sorted(tensors)
    norms = [float(np.linalg.norm(tensors[n].astype(np.float64))) for n in names]
    ax.bar(range(len(names)), norms, color="#3b75af")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels([n.replace("/model/layers/", "") for n in names], rotation=90, fontsize=5)
    ax.set_ylabel("L2 norm")
    ax.set_title(f"checkpoint step {step}: {len(names)} model tensors")


def main(argv):
    if len(argv) != 5:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    ckpt, trace_path, timeline_path, out = argv[1:]
    step, tensors, tokenizer = checkpoint(ckpt)
    series, columns = trace(trace_path)
    actions, steps = timeline(timeline_path)

    fig, axes = plt.subplots(2, 3, figsize=(18, 9))
    plot_loss(axes[0, 0], steps)
    plot_trace(axes[0, 1], axes[0, 2], series, columns)
    plot_timeline(axes[1, 0], actions)
    plot_norms(axes[1, 1], step, tensors)
    axes[1, 2].axis("off")
    axes[1, 2].text(0.0, 0.6, f"tokenizer: {tokenizer}\nparameters: {sum(t.size for t in tensors.values())}",
                    fontsize=11, va="top")
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    print(f"wrote {out}: loss over {len(steps.get('step', []))} steps, {len(series)} traced series, "
          f"{len(actions['step'])} timeline actions, {len(tensors)} tensors; tokenizer {tokenizer}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
