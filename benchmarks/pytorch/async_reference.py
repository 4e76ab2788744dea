#!/usr/bin/python3
"""kpipe's training written again in PyTorch: the synchronous rule, kpipe's 2BW rule and the paper's, from the
same weights on the same windows, so that a change to 2BW's rule is measured outside kpipe against both.

    /usr/bin/python3 benchmarks/pytorch/async_reference.py --data TEXT --rule 2bw --steps 600 [--seed 4] \
        [--batch 16] [--microbatches 4] [--ranks 2] [--eval-every 25] [--dtype float64] [candidates] > curve.jsonl

Debian's python3-torch (1.13, for /usr/bin/python3) or a later torch; CPU, one thread; about 0.3 s a step of
the small preset. The model is kpipe's small preset (core/config_io.cpp) with kpipe's initial weights (the
Philox streams of core/rng.hpp and model/parameters.cpp), the training windows of data/sampler.cpp, the
validation windows of runtime/evaluator.cpp, kpipe's AdamW arithmetic, clipping and lr schedule
(nn/optimizer.cpp), all written from their definitions, not from kpipe's kernels. In float32 it follows
kpipe-train to a few 1e-4 of validation loss after 600 steps (the sums run in other orders); float64 is the
rule without rounding.

  sync   W(t+1) = W(t) - AdamW(gradient at W(t)), the global gradient norm clipped: every synchronous schedule.
  2bw    kpipe's rule (docs/schedules.md, "Asynchronous schedules"): the first p-1 micro-batches of window t
         (--ranks p) read W(t-1), the rest W(t); W(t+1) = W(t) - AdamW(their gradients) looking ahead by
         2 (p-1) / m, each stage's norm clipped (stage s from layer --stages[s-1] on: 3 for 2 ranks).
  paper  PipeDream-2BW's rule: every micro-batch of window t reads W(t-1); no look-ahead unless --lookahead.
         With --lookahead 1 --lr 1.4142e-3 --warmup 28 it is kpipe's rule before issue 39.
--lr, --warmup and --lookahead replace the rule's. The candidates measured for 2bw and not kept (off by default):
  --sync-warmup K  the first K windows read W(t) (no delay)
  --predict S      stale micro-batches read W(t-1) - S lr m^/(sqrt(v^)+eps), the moments that update t-2 left
                   (what stage 0 holds when it forwards them): the weights extrapolated S updates on
                   (PipeMare / SpecTrain's weight prediction)
  --dc L           the gradient corrected by L g*g*(W(t) - W(read)) (DC-ASGD)
  --beta1 B        AdamW's first-moment decay
Prints one JSON line per step ({"step", "loss", "lr", "grad_norm"}, "val_loss" every --eval-every steps), as
kpipe-train's --metrics, then {"final": true, "val_loss": ...} after the last.
"""
import argparse
import json
import math
import sys

import numpy as np
import torch

M64 = (1 << 64) - 1


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def make_key(seed, a, b, name):
    h = 1469598103934665603
    for c in name.encode():
        h = ((h ^ c) * 1099511628211) & M64
    k = mix64((seed + 0x9E3779B97F4A7C15) & M64)
    k = mix64(k ^ ((a + 0x632BE59BD9B4E019) & M64))
    k = mix64(k ^ ((b + 0x85157AF5) & M64))
    k = mix64(k ^ h)
    return k & 0xFFFFFFFF, k >> 32


def philox(key, counters):
    """Philox-4x32-10 on counters (c, 0) under key: the four words, as uint64 arrays."""
    c = np.asarray(counters, dtype=np.uint64)
    lo32 = np.uint64(0xFFFFFFFF)
    x0, x1 = c & lo32, c >> np.uint64(32)
    x2 = np.zeros_like(c)
    x3 = np.zeros_like(c)
    k0, k1 = key
    for _ in range(10):
        p0 = np.uint64(0xD2511F53) * x0
        p1 = np.uint64(0xCD9E8D57) * x2
        x0, x1, x2, x3 = (p1 >> np.uint64(32)) ^ x1 ^ np.uint64(k0), p1 & lo32, (p0 >> np.uint64(32)) ^ x3 ^ np.uint64(k1), p0 & lo32
        k0, k1 = (k0 + 0x9E3779B9) & 0xFFFFFFFF, (k1 + 0xBB67AE85) & 0xFFFFFFFF
    return x0, x1, x2, x3


def normal(key, n):
    x0, x1, _, _ = philox(key, np.arange(n, dtype=np.uint64))
    unit = lambda x: ((x >> np.uint64(8)) + np.uint64(1)).astype(np.float64) * (1.0 / 16777216.0)
    return np.sqrt(-2.0 * np.log(unit(x0))) * np.cos(6.283185307179586 * unit(x1))


def window_start(seed, step, sequence, tokens, seq_len):
    x0, x1, _, _ = philox(make_key(seed, step, sequence, "sampler"), [0])
    return int(((int(x0[0]) << 32) | int(x1[0])) % (tokens - seq_len))


# kpipe's layers: (global layer index, [(name, shape, init, std, decays)]) for model/desc.cpp's describe().
def describe(c):
    C, T, V, F = c["d_model"], c["seq_len"], c["vocab"], 4 * c["d_model"]
    std, proj = c["init_std"], c["init_std"] / math.sqrt(2.0 * c["n_layers"])
    w = lambda n, r, k, s, decays=True: (n, (r, k), "normal", s, decays)
    v = lambda n, k, init: (n, (k,), init, 0.0, False)
    layers = [(0, [w("wte", V, C, std, False), w("wpe", T, C, std, False)])]
    for b in range(c["n_layers"]):
        layers.append((1 + b, [v("ln1/gamma", C, "ones"), v("ln1/beta", C, "zeros"), w("attn/qkv/weight", 3 * C, C, std),
                               v("attn/qkv/bias", 3 * C, "zeros"), w("attn/proj/weight", C, C, proj),
                               v("attn/proj/bias", C, "zeros"), v("ln2/gamma", C, "ones"), v("ln2/beta", C, "zeros"),
                               w("mlp/fc/weight", F, C, std), v("mlp/fc/bias", F, "zeros"), w("mlp/proj/weight", C, F, proj),
                               v("mlp/proj/bias", C, "zeros")]))
    layers.append((c["n_layers"] + 1, [v("ln_f/gamma", C, "ones"), v("ln_f/beta", C, "zeros"),
                                       w("lm_head/weight", V, C, std)]))
    return layers


def initial_weights(layers, seed, dtype):
    """Per layer, {name: tensor}: kpipe's initialization, T(std * normal(key(seed, layer, 0, name), i))."""
    weights = []
    for index, specs in layers:
        params = {}
        for name, shape, init, std, _ in specs:
            n = int(np.prod(shape))
            if init == "normal":
                values = (std * normal(make_key(seed, index, 0, name), n)).astype(np.float32 if dtype == torch.float32 else np.float64)
            else:
                values = np.full(n, 1.0 if init == "ones" else 0.0)
            params[name] = torch.tensor(values, dtype=dtype).reshape(shape)
        weights.append(params)
    return weights


def layer_norm(x, p, prefix, eps):
    return torch.nn.functional.layer_norm(x, x.shape[-1:], p[prefix + "/gamma"], p[prefix + "/beta"], eps)


def forward(weights, c, inputs, targets):
    """Mean per-token loss of windows inputs[B, T] -> targets[B, T]."""
    B, T = inputs.shape
    C, H = c["d_model"], c["n_heads"]
    emb = weights[0]
    x = emb["wte"][inputs] + emb["wpe"][:T]
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    for p in weights[1:-1]:
        qkv = torch.nn.functional.linear(layer_norm(x, p, "ln1", c["ln_eps"]), p["attn/qkv/weight"], p["attn/qkv/bias"])
        q, k, v = (y.reshape(B, T, H, C // H).transpose(1, 2) for y in qkv.split(C, dim=2))
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(C // H)
        attn = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v
        x = x + torch.nn.functional.linear(attn.transpose(1, 2).reshape(B, T, C), p["attn/proj/weight"], p["attn/proj/bias"])
        h = torch.nn.functional.linear(layer_norm(x, p, "ln2", c["ln_eps"]), p["mlp/fc/weight"], p["mlp/fc/bias"])
        x = x + torch.nn.functional.linear(torch.nn.functional.gelu(h, approximate="tanh"), p["mlp/proj/weight"],
                                           p["mlp/proj/bias"])
    head = weights[-1]
    logits = torch.nn.functional.linear(layer_norm(x, head, "ln_f", c["ln_eps"]), head["lm_head/weight"])
    return torch.nn.functional.cross_entropy(logits.reshape(B * T, -1), targets.reshape(-1))


class Flat:
    """One stage's parameters as one flat buffer (kpipe's ParameterStore), in layer order."""

    def __init__(self, layers, weights, dtype):
        self.names = [(i, name, shape) for i, (_, specs) in enumerate(layers) for name, shape, *_ in specs]
        self.values = torch.cat([weights[i][name].reshape(-1) for i, name, _ in self.names])
        self.decays = torch.cat([torch.full((int(np.prod(s[1])),), 1.0 if s[4] else 0.0, dtype=dtype)
                                 for _, specs in layers for s in specs])

    def gather_grads(self, weights):
        return torch.cat([weights[i][name].grad.reshape(-1) for i, name, _ in self.names])

    def unflatten(self, values, weights):
        at = 0
        for i, name, shape in self.names:
            n = int(np.prod(shape))
            weights[i][name] = values[at:at + n].reshape(shape).clone().requires_grad_(True)
            at += n


def learning_rate(o, step, total):
    if step < o["warmup"]:
        return o["lr"] * (step + 1) / o["warmup"]
    decay = total - o["warmup"]
    since = step - o["warmup"]
    if since >= decay:
        return o["min_lr"]
    return o["min_lr"] + 0.5 * (o["lr"] - o["min_lr"]) * (1 + math.cos(math.pi * since / decay))


def clip_factor(norm, bound):
    return bound / (norm + 1e-6) if bound > 0 and norm > bound else 1.0


def adam_direction(o, m, v, step):
    """m^ / (sqrt(v^) + eps) with the moments as they stand after `step` updates (0: none)."""
    if step == 0:
        return torch.zeros_like(m)
    return (m / (1 - o["beta1"] ** step)) / (torch.sqrt(v / (1 - o["beta2"] ** step)) + o["eps"])


def adamw(o, values, grads, m, v, decays, lr, step, scale, lookahead):
    """kpipe's adamw_step (nn/optimizer.cpp) on a flat stage, step 1-based; returns the new values."""
    b1, b2 = o["beta1"], o["beta2"]
    g = scale * grads
    m_old = m.clone()
    m.mul_(b1).add_((1 - b1) * g)
    v.mul_(b2).add_((1 - b2) * g * g)
    m_hat = m / (1 - b1 ** step)
    if lookahead != 0 and step > 1:
        m_hat = m_hat + lookahead * (m_hat - m_old / (1 - b1 ** (step - 1)))
    update = lr * m_hat / (torch.sqrt(v / (1 - b2 ** step)) + o["eps"])
    return values - (update + lr * o["weight_decay"] * decays * values)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="a kpipe-prepare token file (bytes) or a text file")
    ap.add_argument("--val-fraction", type=float, default=0.1, help="of a text file (a token file has its split)")
    ap.add_argument("--rule", choices=["sync", "2bw", "paper"], default="sync")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--ranks", type=int, default=2, help="pipeline stages")
    ap.add_argument("--stages", type=int, nargs="*", help="first layer of each stage after the first (default: 3 "
                    "for 2 ranks, as kpipe's partition of the small preset)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--eval-every", type=int, default=0)
    ap.add_argument("--eval-batches", type=int, default=8)
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--lookahead", type=float, default=None)
    ap.add_argument("--sync-warmup", type=int, default=0)
    ap.add_argument("--predict", type=float, default=0.0)
    ap.add_argument("--dc", type=float, default=0.0)
    ap.add_argument("--beta1", type=float, default=0.9)
    args = ap.parse_args()
    if args.stages is None:
        if args.ranks > 2:
            ap.error("--stages: give kpipe's partition for more than 2 ranks")
        args.stages = [3] if args.ranks == 2 else []
    if len(args.stages) != args.ranks - 1 or args.batch % args.microbatches or args.microbatches < args.ranks:
        ap.error("--stages needs ranks - 1 layers, --batch a multiple of --microbatches >= --ranks")
    torch.set_num_threads(1)
    dtype = getattr(torch, args.dtype)
    c = dict(vocab=256, seq_len=128, d_model=128, n_layers=4, n_heads=4, init_std=0.02, ln_eps=1e-5)

    if args.data.endswith(".h5"):
        import h5py
        with h5py.File(args.data, "r") as f:
            train, validation = np.asarray(f["train"]), np.asarray(f["validation"])
    else:
        raw = np.frombuffer(open(args.data, "rb").read(), dtype=np.uint8)
        held = min(len(raw), max(0, round(len(raw) * args.val_fraction)))
        train, validation = raw[:len(raw) - held], raw[len(raw) - held:]
    train = torch.tensor(train.astype(np.int64))
    T = c["seq_len"]
    per_mb = args.batch // args.microbatches
    windows = min(len(validation) // (T + 1), args.eval_batches * args.batch)
    windows -= windows % per_mb
    val = torch.tensor(validation[:windows * (T + 1)].astype(np.int64)).reshape(windows, T + 1)

    asynchronous = args.rule != "sync"
    # The micro-batches of a window that read the version before the newest: under kpipe's rule those forwarded
    # on the first stage before the previous window's update (p - 1), under the paper's all m.
    stale_microbatches = {"sync": 0, "2bw": args.ranks - 1, "paper": args.microbatches}[args.rule]
    lookahead = args.lookahead
    if lookahead is None:
        lookahead = 2 * stale_microbatches / args.microbatches if args.rule == "2bw" else 0.0
    o = dict(lr=args.lr, min_lr=min(1e-4, args.lr), warmup=args.warmup, beta1=args.beta1, beta2=0.95, eps=1e-8,
             weight_decay=0.1, clip=1.0)

    layers = describe(c)
    weights = initial_weights(layers, args.seed, dtype)
    bounds = [0] + (args.stages if asynchronous else []) + [len(layers)]
    stages = [(a, b, Flat(layers[a:b], weights[a:b], dtype)) for a, b in zip(bounds, bounds[1:])]
    m = [torch.zeros_like(s.values) for _, _, s in stages]
    v = [torch.zeros_like(s.values) for _, _, s in stages]
    m_before = [torch.zeros_like(x) for x in m]  # the moments before the last update
    v_before = [torch.zeros_like(x) for x in v]
    newest = [s.values.clone() for _, _, s in stages]  # W(t)
    before = [s.values.clone() for _, _, s in stages]  # W(t-1)

    def load(values):
        for (a, b, s), x in zip(stages, values):
            part = weights[a:b]
            s.unflatten(x, part)
            weights[a:b] = part

    def validation_loss(values):
        load(values)
        with torch.no_grad():
            return sum(float(forward(weights, c, val[i:i + per_mb, :-1], val[i:i + per_mb, 1:])) * per_mb
                       for i in range(0, windows, per_mb)) / windows

    for step in range(args.steps):
        starts = [window_start(args.seed, step, s, len(train), T) for s in range(args.batch)]
        batch = torch.stack([train[x:x + T + 1] for x in starts])
        stale = asynchronous and step >= max(1, args.sync_warmup) and stale_microbatches > 0
        old = before
        if stale and args.predict:
            # When window t's first forward runs on stage 0, update t-1 has not run: the newest version is W(t-1)
            # and the moments are those update t-2 left (t-1 updates). Extrapolate S updates on with them.
            old = [w - args.predict * learning_rate(o, step - 1, args.steps) * adam_direction(o, mi, vi, step - 1)
                   for w, mi, vi in zip(before, m_before, v_before)]
        # The window's stale micro-batches (its first) read the old version, the rest the newest; each part's
        # loss weighted by its share of the window's sequences.
        cut = stale_microbatches * per_mb if stale else 0
        loss_sum, grads = 0.0, None
        for read, rows in ((old, slice(0, cut)), (newest, slice(cut, args.batch))):
            part = batch[rows]
            if len(part) == 0:
                continue
            load(read)
            loss = forward(weights, c, part[:, :-1], part[:, 1:]) * (len(part) / args.batch)
            loss.backward()
            part_grads = [s.gather_grads(weights[a:b]) for a, b, s in stages]
            grads = part_grads if grads is None else [g + h for g, h in zip(grads, part_grads)]
            loss_sum += float(loss)
        if args.dc and stale:
            grads = [g + args.dc * g * g * (w - r) for g, w, r in zip(grads, newest, old)]
        norms = [float(torch.sqrt(torch.sum(g.double() ** 2))) for g in grads]
        total = math.sqrt(sum(n * n for n in norms))
        rate = learning_rate(o, step, args.steps)
        updated = []
        for k, (_, _, s) in enumerate(stages):
            scale = clip_factor(norms[k] if asynchronous else total, o["clip"])
            m_before[k], v_before[k] = m[k].clone(), v[k].clone()
            updated.append(adamw(o, newest[k], grads[k], m[k], v[k], s.decays, rate, step + 1, scale,
                                 lookahead if stale else 0.0))
        before, newest = newest, updated
        row = {"step": step, "loss": loss_sum, "lr": rate, "grad_norm": total}
        if args.eval_every and (step + 1) % args.eval_every == 0 and step + 1 < args.steps:
            row["val_loss"] = validation_loss(newest)
        print(json.dumps(row), flush=True)
    print(json.dumps({"final": True, "steps": args.steps, "rule": args.rule, "val_loss": validation_loss(newest)}),
          flush=True)


if __name__ == "__main__":
    main()
