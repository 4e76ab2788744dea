#pragma once
// The precisions a build instantiates, listed once. Every file that explicitly instantiates a template over
// precisions expands one of these lists (Kokkos Kernels' ETI lists work the same way), so a precision is added
// or dropped here, in one line.
//
// A precision is a pair (T, A): T accumulates and holds the master weights; A stores the activations, the
// gradients passed between layers and the weights' compute copy: T itself, or bf16 with T = float (mixed
// precision). Each A appears once in a list, so a template over A alone expands a pair list and ignores T.
// Templates take their parameters in this order, then the kernel path: <T, A, P> (nn/linear.hpp).
//
// Macros, against the project's rule, because an explicit instantiation must name its types in a declaration,
// which no template or constexpr can write. A file defines a local macro instantiating its templates for one
// entry, expands a list with it, and #undefs it right after.
#include "kpipe/core/bfloat16.hpp"
#include "kpipe/core/kernel_path.hpp"

// The mixed precisions (A is not T): bf16 storage with float accumulation.
#define KPIPE_MIXED_PRECISIONS(X) X(float, bf16)
// What a run trains in: float, and the mixed precisions.
#define KPIPE_TRAINING_PRECISIONS(X) X(float, float) KPIPE_MIXED_PRECISIONS(X)
// Those and float64, against which the tests check gradients and mixed precision (the layers and the model).
#define KPIPE_CHECKED_PRECISIONS(X) KPIPE_TRAINING_PRECISIONS(X) X(double, double)

// The accumulation types T of the lists above, each once: for templates over T alone (a loss, an optimizer).
#define KPIPE_TRAINING_ACCUMULATIONS(X) X(float)
#define KPIPE_CHECKED_ACCUMULATIONS(X) KPIPE_TRAINING_ACCUMULATIONS(X) X(double)

// The same lists for a kernel with a split (core/kernel_path.hpp), as (T, A, P) or (T, P). The training
// precisions on both paths, whatever the backend, as tests/nn/test_kernel_paths.cpp calls the one beside the
// other; float64, which only the float64 checks use, on the build's own path alone.
#define KPIPE_KERNEL_PATHS(X, ...) X(__VA_ARGS__, KernelPath::host) X(__VA_ARGS__, KernelPath::device)
#define KPIPE_MIXED_KERNELS(X) KPIPE_KERNEL_PATHS(X, float, bf16)
#define KPIPE_CHECKED_KERNELS(X) \
  KPIPE_KERNEL_PATHS(X, float, float) KPIPE_MIXED_KERNELS(X) X(double, double, default_kernel_path)
#define KPIPE_CHECKED_ACCUMULATION_KERNELS(X) KPIPE_KERNEL_PATHS(X, float) X(double, default_kernel_path)
