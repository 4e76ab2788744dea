#!/usr/bin/env python3
"""kpipe's GPT pipelined in PyTorch: torch.distributed.pipelining, Schedule1F1B, 2 gloo ranks on the CPU,
one thread per rank. The model (gpt.py) is cut like kpipe's uniform partition of its layer list (embedding,
n_layers blocks, head): the first ceil(layers / 2) layers on rank 0, the rest on rank 1. Gradients are
clipped by the global norm over both stages (an all-reduce of the squared norms), as kpipe does.

    python3 benchmarks/pytorch/pipeline.py --steps 10 --microbatches 8

rank 0 prints one JSON object: tokens/s (median over the steps after the first two), step seconds, CPU
seconds of each rank.
"""
import argparse
import json
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.pipelining import PipelineStage, Schedule1F1B

import gpt


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stage_layers(c, rank, ranks):
    """Build every layer with the same seed on each rank (the same weights, as kpipe's init by layer id),
    keep this rank's contiguous share."""
    torch.manual_seed(1234)
    model = nn.Sequential(*gpt.layers(c))
    gpt.init_(model, c)
    n = len(model)
    base, extra = divmod(n, ranks)
    first = rank * base + min(rank, extra)
    last = first + base + (1 if rank < extra else 0)
    return nn.Sequential(*list(model)[first:last])


def clip_global_(params, max_norm):
    sq = torch.zeros(1, dtype=torch.float64)
    for p in params:
        if p.grad is not None:
            sq += p.grad.double().pow(2).sum()
    dist.all_reduce(sq)
    scale = max_norm / (sq.sqrt().item() + 1e-6)
    if scale < 1.0:
        for p in params:
            if p.grad is not None:
                p.grad.mul_(scale)


def worker(rank, ranks, args, port, queue):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=ranks)
    c = dict(gpt.BENCH, n_layers=args.n_layers, d_model=args.d_model, seq_len=args.seq_len, batch=args.batch)
    module = stage_layers(c, rank, ranks)
    mb = args.batch // args.microbatches
    example = (torch.zeros(mb, c["seq_len"], dtype=torch.long) if rank == 0
               else torch.zeros(mb, c["seq_len"], c["d_model"]))
    stage = PipelineStage(module, rank, ranks, torch.device("cpu"), input_args=(example,))

    def loss_fn(logits, targets):
        return F.cross_entropy(logits.reshape(-1, c["vocab"]), targets.reshape(-1))

    schedule = Schedule1F1B(stage, n_microbatches=args.microbatches, loss_fn=loss_fn)
    opt = gpt.adamw(module, 1e-3)
    data = gpt.corpus(args.data, 1 << 20, args.seed)
    gen = torch.Generator().manual_seed(args.seed + 1)  # the same windows on both ranks
    step_seconds, cpu_seconds = [], []
    for _ in range(args.steps):
        x, y = gpt.windows(data, args.batch, c["seq_len"], gen)
        dist.barrier()
        wall0, cpu0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        if rank == 0:
            schedule.step(x)
        elif rank == ranks - 1:
            schedule.step(target=y, losses=[])
        else:
            schedule.step()
        clip_global_(list(module.parameters()), 1.0)
        opt.step()
        step_seconds.append(time.perf_counter() - wall0)
        cpu_seconds.append(time.process_time() - cpu0)
    times = [None] * ranks
    dist.all_gather_object(times, (step_seconds, cpu_seconds))
    if rank == 0:
        # A step ends when the slower rank is done.
        steps = [max(t[0][i] for t in times) for i in range(args.steps)]
        result = gpt.summary(steps, times[0][1], args.batch * c["seq_len"], c)
        result["cpu_seconds_median_per_rank"] = [gpt.summary(t[0], t[1], 1, c)["cpu_seconds_median"] for t in times]
        result.update(kind="pytorch-pipeline", schedule="1f1b", ranks=ranks, microbatches=args.microbatches)
        queue.put(result)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--batch", type=int, default=gpt.BENCH["batch"])
    ap.add_argument("--n-layers", type=int, default=gpt.BENCH["n_layers"])
    ap.add_argument("--d-model", type=int, default=gpt.BENCH["d_model"])
    ap.add_argument("--seq-len", type=int, default=gpt.BENCH["seq_len"])
    ap.add_argument("--data", default="")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    if args.batch % args.microbatches:
        raise SystemExit(f"--microbatches = {args.microbatches}: must divide --batch = {args.batch}")
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.spawn(worker, args=(args.ranks, args, free_port(), queue), nprocs=args.ranks, join=True)
    print(json.dumps(queue.get()))


if __name__ == "__main__":
    main()
