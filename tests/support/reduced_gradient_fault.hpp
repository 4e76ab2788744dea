#pragma once
// A fault injected into one replica's reduced gradient, through MPI's profiling interface: the test program that
// links support/reduced_gradient_fault.cpp defines MPI_Ibcast, MPI_Iallreduce, MPI_Test and MPI_Wait itself
// (each passing the call on to PMPI_*), so kpipe's own calls reach it and nothing in kpipe changes. Once armed
// on a rank, the `nth` broadcast or all-reduce of `count` floats on `comm` (the replicas' gradient sum of one
// chunk, runtime/gradient_reduction.hpp: one per step) gets bit `bit` of element `element` flipped when it
// completes: the sum as that replica received it, before its optimizer step reads it.
// The same file, built as the LD_PRELOAD shim kpipe_test_gradient_fault with gradient_fault_preload.cpp, does
// this to kpipe-train (tests/e2e/silent_corruption.sh).
#include <mpi.h>

namespace kpipe::test {

struct GradientFault {
  MPI_Comm comm = MPI_COMM_NULL;  // the grid's replicas communicator (MPI_COMM_NULL: any)
  int count = 0;                  // elements of the gradient buffer
  int nth = 1;                    // 1: the first such collective (step 0's)
  int element = 0;
  int bit = 0;
};

// Arms the fault on this rank (replacing one armed before); disarm() or a completed flip ends it.
void arm(const GradientFault& fault);
void disarm();
// Whether the armed fault has flipped its bit.
bool gradient_fault_fired();

}  // namespace kpipe::test
