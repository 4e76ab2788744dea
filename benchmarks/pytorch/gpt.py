#!/usr/bin/env python3
"""kpipe's GPT in PyTorch, for the side-by-side benchmark (benchmarks/run.py): one process, one thread.

Same model as kpipe (docs/user-guide.md, src/kpipe/model/desc.cpp): byte vocabulary, learned position
embeddings, pre-LayerNorm blocks with a fused QKV projection, causal attention, tanh-GeLU MLP of width
mlp_ratio * d_model, final LayerNorm, LM head without bias and not tied; weights normal(0, init_std), the
two residual projections of each block normal(0, init_std / sqrt(2 n_layers)), biases 0, LayerNorm gains 1;
AdamW (betas 0.9/0.95, eps 1e-8, weight decay 0.1 on 2-D non-embedding weights), global gradient clipping
at 1.0; a mini-batch of `batch` random windows of seq_len + 1 bytes, split into micro-batches whose
gradients are accumulated. The numbers are not kpipe's (different RNG), the work per step is the same.

    python3 benchmarks/pytorch/gpt.py --steps 10 --microbatches 8
    python3 benchmarks/pytorch/gpt.py --device cuda --precision bf16   # autocast, as PyTorch users run it
    python3 benchmarks/pytorch/gpt.py --device cuda --precision bf16 --compile   # torch.compile'd model

--precision: fp32 (no TF32 anywhere), tf32 (TF32 matrix products, fp32 storage) or bf16 (torch.autocast to
bfloat16 around the forward and the loss: fp32 weights and optimizer, bf16 products), on CUDA. Prints one
JSON object: tokens/s (median over the steps after the first two), step seconds, CPU seconds. --compile
runs the model through torch.compile (its first steps compile, and are not among the timed ones).
"""
import argparse
import json
import math
import os
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# The bench preset (src/kpipe/core/config.cpp, preset "bench").
BENCH = dict(vocab=256, seq_len=128, d_model=256, n_layers=8, n_heads=8, mlp_ratio=4, init_std=0.02,
             ln_eps=1e-5, batch=16)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, f = c["d_model"], c["mlp_ratio"] * c["d_model"]
        self.n_heads = c["n_heads"]
        self.ln1 = nn.LayerNorm(d, eps=c["ln_eps"])
        self.qkv = nn.Linear(d, 3 * d)
        self.attn_proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d, eps=c["ln_eps"])
        self.fc = nn.Linear(d, f)
        self.mlp_proj = nn.Linear(f, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        heads = lambda y: y.view(b, t, self.n_heads, d // self.n_heads).transpose(1, 2)
        y = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Embedding(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.wte = nn.Embedding(c["vocab"], c["d_model"])
        self.wpe = nn.Parameter(torch.empty(c["seq_len"], c["d_model"]))

    def forward(self, tokens):
        return self.wte(tokens) + self.wpe[: tokens.shape[1]]


class Head(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_f = nn.LayerNorm(c["d_model"], eps=c["ln_eps"])
        self.lm_head = nn.Linear(c["d_model"], c["vocab"], bias=False)

    def forward(self, x):
        return self.lm_head(self.ln_f(x))


def layers(c):
    """kpipe's layer list: embedding, n_layers blocks, head (final LayerNorm + LM head)."""
    return [Embedding(c)] + [Block(c) for _ in range(c["n_layers"])] + [Head(c)]


def init_(model, c):
    """kpipe's initialization scheme (not its numbers: torch's RNG, not Philox keyed by layer and name)."""
    proj_std = c["init_std"] / math.sqrt(2 * c["n_layers"])
    for name, p in model.named_parameters():
        leaf = name.rsplit(".", 1)
        if p.dim() == 2:
            std = proj_std if leaf[0].endswith(("attn_proj", "mlp_proj")) else c["init_std"]
            nn.init.normal_(p, 0.0, std)
        elif "ln" in leaf[0] and leaf[1] == "weight":
            nn.init.ones_(p)
        else:
            nn.init.zeros_(p)


def param_groups(model):
    """Weight decay on 2-D weights other than the embeddings."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.dim() == 2 and "wte" not in name and "wpe" not in name else no_decay).append(p)
    return [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]


def adamw(model, lr):
    return torch.optim.AdamW(param_groups(model), lr=lr, betas=(0.9, 0.95), eps=1e-8)


def corpus(path, tokens, seed):
    """Bytes of a file, or `tokens` random bytes."""
    if path:
        with open(path, "rb") as f:
            return torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).long()
    return torch.randint(0, 256, (tokens,), generator=torch.Generator().manual_seed(seed))


def windows(data, batch, seq_len, generator):
    """`batch` random windows of seq_len + 1 tokens: inputs and next-token targets."""
    starts = torch.randint(0, data.numel() - seq_len - 1, (batch,), generator=generator)
    w = torch.stack([data[s: s + seq_len + 1] for s in starts.tolist()])
    return w[:, :-1].contiguous(), w[:, 1:].contiguous()


def flops_per_token(c):
    """Model FLOPs per token, the formulas of src/kpipe/model/desc.cpp (forward + backward, all layers)."""
    C, T, V, H, L = c["d_model"], c["seq_len"], c["vocab"], c["n_heads"], c["n_layers"]
    Fw = c["mlp_ratio"] * C
    linear = 2.0 * T * (3 * C * C + C * C + 2 * C * Fw)
    attention = 4.0 * T * T * C
    elementwise = T * (10.0 * C + 8.0 * Fw) + 5.0 * T * T * H
    block = (linear + attention + elementwise) + (linear + 2 * attention + 2 * elementwise) + linear
    embedding = T * C + 2.0 * T * C
    head = (2.0 * T * C * V + T * (8.0 * C + 5.0 * V)) + (2.0 * T * C * V + T * (8.0 * C + 3.0 * V)) + 2.0 * T * C * V
    return (embedding + L * block + head) / T


def summary(step_seconds, cpu_seconds, tokens_per_step, c, skip=2):
    kept = step_seconds[skip:] if len(step_seconds) > skip else step_seconds
    kept_cpu = cpu_seconds[skip:] if len(cpu_seconds) > skip else cpu_seconds
    median = statistics.median(kept)
    return {"tokens_per_s": tokens_per_step / median, "step_seconds_median": median,
            "cpu_seconds_median": statistics.median(kept_cpu),
            "gflop_per_s": flops_per_token(c) * tokens_per_step / median / 1e9,
            "steps_timed": len(kept), "torch": torch.__version__, "threads": torch.get_num_threads()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--microbatches", type=int, default=1)
    ap.add_argument("--batch", type=int, default=BENCH["batch"])
    ap.add_argument("--n-layers", type=int, default=BENCH["n_layers"])
    ap.add_argument("--d-model", type=int, default=BENCH["d_model"])
    ap.add_argument("--seq-len", type=int, default=BENCH["seq_len"])
    ap.add_argument("--n-heads", type=int, default=BENCH["n_heads"])
    ap.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "bf16"])
    ap.add_argument("--data", default="", help="a file whose bytes are the corpus (default: random bytes)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda for the GPU (scripts/gpu-check.sh)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (forward and backward)")
    args = ap.parse_args()
    if args.batch % args.microbatches:
        raise SystemExit(f"--microbatches = {args.microbatches}: must divide --batch = {args.batch}")
    torch.set_num_threads(args.threads)
    c = dict(BENCH, n_layers=args.n_layers, d_model=args.d_model, seq_len=args.seq_len, batch=args.batch,
             n_heads=args.n_heads)
    # TF32 only where asked for (PyTorch's default for matrix products is off; cuDNN's is on).
    torch.backends.cuda.matmul.allow_tf32 = args.precision == "tf32"
    torch.backends.cudnn.allow_tf32 = args.precision == "tf32"
    autocast = torch.autocast(device_type=args.device.split(":")[0], dtype=torch.bfloat16,
                              enabled=args.precision == "bf16")
    torch.manual_seed(args.seed)
    model = nn.Sequential(*layers(c))
    init_(model, c)
    device = torch.device(args.device)
    model.to(device)
    step_model = torch.compile(model) if args.compile else model
    # A step is timed from its start until the device has finished it.
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    opt = adamw(model, 1e-3)
    data = corpus(args.data, 1 << 20, args.seed)
    gen = torch.Generator().manual_seed(args.seed + 1)
    step_seconds, cpu_seconds = [], []
    for _ in range(args.steps):
        x, y = windows(data, args.batch, c["seq_len"], gen)
        x, y = x.to(device), y.to(device)
        sync()
        wall0, cpu0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        for xm, ym in zip(x.chunk(args.microbatches), y.chunk(args.microbatches)):
            with autocast:
                logits = step_model(xm)
                loss = F.cross_entropy(logits.view(-1, c["vocab"]), ym.view(-1)) / args.microbatches
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sync()
        step_seconds.append(time.perf_counter() - wall0)
        cpu_seconds.append(time.process_time() - cpu0)
    result = summary(step_seconds, cpu_seconds, args.batch * c["seq_len"], c)
    result.update(kind="pytorch-compiled" if args.compile else "pytorch", device=args.device,
                  precision=args.precision, ranks=1, microbatches=args.microbatches,
                  num_params=sum(p.numel() for p in model.parameters()), final_loss=loss.item() * args.microbatches)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
