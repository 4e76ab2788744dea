#!/usr/bin/env python3
"""The block's Linear products in PyTorch (its BLAS: MKL in the PyPI wheel), one thread, at the shapes
kpipe_bench_linear measures: forward x W^T, input gradient dy W, weight gradient dW += dy^T x, for 256 and
2048 rows, and a 2048 square product beside kpipe_bench_step's BM_SgemmPeak. GFLOP/s per line, so the two
BLAS libraries can be compared call for call (docs/performance.md).

    python benchmarks/pytorch/linear_gemm.py        # with a Python that has torch
"""
import time

import torch

torch.set_num_threads(1)


def rate(f, flops, reps=50):
    for _ in range(5):
        f()
    start = time.perf_counter()
    for _ in range(reps):
        f()
    return flops * reps / (time.perf_counter() - start) / 1e9


def main():
    print(f"torch {torch.__version__}, BLAS: {torch.backends.mkl.is_available() and 'MKL' or 'not MKL'}")
    for rows in (256, 2048):
        # qkv, attention projection, MLP up, MLP down (d_model 256)
        for n_in, n_out in ((256, 768), (256, 256), (256, 1024), (1024, 256)):
            x, w = torch.randn(rows, n_in), torch.randn(n_out, n_in)
            dy, dw = torch.randn(rows, n_out), torch.zeros(n_out, n_in)
            flops = 2.0 * rows * n_in * n_out
            forward = rate(lambda: torch.mm(x, w.t()), flops)
            backward_input = rate(lambda: torch.mm(dy, w), flops)
            backward_weight = rate(lambda: dw.addmm_(dy.t(), x), flops)
            print(f"rows {rows} in {n_in} out {n_out}: forward {forward:.0f}, input gradient {backward_input:.0f}, "
                  f"weight gradient {backward_weight:.0f} GFLOP/s")
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    print(f"square 2048: {rate(lambda: torch.mm(a, b), 2.0 * 2048 ** 3, 8):.0f} GFLOP/s")


if __name__ == "__main__":
    main()
