#pragma once
// kpipe-sim --kernels: the work ledger of one micro-batch on a GPU (model/kernel_ledger.hpp) with each kernel's
// roofline bound (model/roofline.hpp), as a table or CSV.
//   kpipe-sim --kernels [--gpu h100|h200] [--format table|csv] [--sequences N] [kpipe-train's model options]
namespace kpipe::apps {

// The whole program for a command line holding --kernels: its exit code (2 for bad input, with one line).
int sim_kernels_main(int argc, char** argv);

}  // namespace kpipe::apps
