// support/reduced_gradient_fault.cpp as an LD_PRELOAD shim for a program the test does not build (kpipe-train):
// armed at load from the environment, in the MPI process of one world rank only.
//   KPIPE_GRADIENT_FAULT       COUNT:NTH:ELEMENT:BIT (the fields of test::GradientFault; any communicator)
//   KPIPE_GRADIENT_FAULT_RANK  the world rank (OMPI_COMM_WORLD_RANK, PMIX_RANK or PMI_RANK)
#include <cstdio>
#include <cstdlib>
#include <string>

#include "support/reduced_gradient_fault.hpp"

namespace {

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

__attribute__((constructor)) void arm_from_environment() {
  std::string rank = env("OMPI_COMM_WORLD_RANK");
  if (rank.empty()) rank = env("PMIX_RANK");
  if (rank.empty()) rank = env("PMI_RANK");
  if (rank.empty() || rank != env("KPIPE_GRADIENT_FAULT_RANK")) return;
  kpipe::test::GradientFault fault;
  if (std::sscanf(env("KPIPE_GRADIENT_FAULT").c_str(), "%d:%d:%d:%d", &fault.count, &fault.nth, &fault.element,
                  &fault.bit) != 4) {
    std::fprintf(stderr, "gradient_fault_preload: KPIPE_GRADIENT_FAULT = '%s': expected COUNT:NTH:ELEMENT:BIT\n",
                 env("KPIPE_GRADIENT_FAULT").c_str());
    std::exit(99);
  }
  kpipe::test::arm(fault);
}

}  // namespace
