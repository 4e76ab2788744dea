// A Kokkos Tools library that times every kernel by its label: loaded into any Kokkos program through
//   KOKKOS_TOOLS_LIBS=libkpipe_kernel_timer.so KPIPE_KERNEL_TIMES=times.csv kpipe-train ...
// (KOKKOS_PROFILE_LIBRARY instead of KOKKOS_TOOLS_LIBS for Kokkos 3)
// it asks Kokkos to fence around every kernel (so a GPU kernel's time is its own, not its launch's), adds up
// each label's launches and seconds, and at finalize writes them as CSV (label,launches,seconds) to the file
// KPIPE_KERNEL_TIMES names (nothing when it is unset; under mpiexec, rank N > 0 writes to that name + ".N").
// scripts/gpu-check.sh sets both and prints the figures beside the ledger's bounds (kpipe-sim kernels).
//
// A tool is configured through the environment by nature (Kokkos loads it before main sees its arguments), and
// its callbacks are plain C functions, so its state is this file's. It needs no Kokkos to build: the callbacks'
// signatures and the settings struct are Kokkos Tools' stable C interface (impl/Kokkos_Profiling_C_Interface.h).
// A Kokkos that never asks for the settings does not fence; its host backends run kernels synchronously anyway.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

namespace {

using Clock = std::chrono::steady_clock;

struct LabelTimes {
  long launches = 0;
  double seconds = 0;
};

struct Running {
  std::string label;
  Clock::time_point start;
};

// The tool's state, for the program's lifetime.
struct Timer {
  std::mutex mutex;
  std::map<std::string, LabelTimes> labels;
  std::unordered_map<std::uint64_t, Running> running;  // by the kernel id begin handed out
  std::uint64_t next_id = 0;
};
Timer timer;

void begin(const char* name, std::uint64_t* id) {
  const std::lock_guard<std::mutex> lock(timer.mutex);
  *id = timer.next_id++;
  timer.running[*id] = {name, Clock::now()};
}

void end(std::uint64_t id) {
  const Clock::time_point now = Clock::now();
  const std::lock_guard<std::mutex> lock(timer.mutex);
  const auto it = timer.running.find(id);
  if (it == timer.running.end()) return;
  LabelTimes& t = timer.labels[it->second.label];
  ++t.launches;
  t.seconds += std::chrono::duration<double>(now - it->second.start).count();
  timer.running.erase(it);
}

// A CSV field: quoted where the label holds a comma or a quote (Kokkos' labels are free text).
std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (const char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

// This process's rank as the MPI launcher tells it (Open MPI, MPICH/Slurm's PMI), 0 without one.
int launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"})
    if (const char* value = std::getenv(name)) return std::atoi(value);
  return 0;
}

}  // namespace

// Kokkos Tools' settings request (Kokkos_Tools_ToolSettings in the C interface): one flag, then padding.
struct Kokkos_Tools_ToolSettings {
  bool requires_global_fencing;
  bool padding[255];
};

extern "C" {

void kokkosp_init_library(int, std::uint64_t, std::uint32_t, void*) {}

void kokkosp_request_tool_settings(std::uint32_t, Kokkos_Tools_ToolSettings* settings) {
  settings->requires_global_fencing = true;
}

void kokkosp_begin_parallel_for(const char* name, std::uint32_t, std::uint64_t* id) { begin(name, id); }
void kokkosp_end_parallel_for(std::uint64_t id) { end(id); }
void kokkosp_begin_parallel_reduce(const char* name, std::uint32_t, std::uint64_t* id) { begin(name, id); }
void kokkosp_end_parallel_reduce(std::uint64_t id) { end(id); }
void kokkosp_begin_parallel_scan(const char* name, std::uint32_t, std::uint64_t* id) { begin(name, id); }
void kokkosp_end_parallel_scan(std::uint64_t id) { end(id); }

void kokkosp_finalize_library() {
  const char* given = std::getenv("KPIPE_KERNEL_TIMES");
  if (!given || !*given) return;
  std::string path = given;
  if (const int rank = launcher_rank(); rank > 0) path += "." + std::to_string(rank);
  std::FILE* out = std::fopen(path.c_str(), "w");
  if (!out) {
    std::fprintf(stderr, "kpipe_kernel_timer: KPIPE_KERNEL_TIMES = %s: cannot open it for writing\n", path.c_str());
    return;
  }
  const std::lock_guard<std::mutex> lock(timer.mutex);
  std::fprintf(out, "label,launches,seconds\n");
  for (const auto& [label, t] : timer.labels)
    std::fprintf(out, "%s,%ld,%.9g\n", csv_field(label).c_str(), t.launches, t.seconds);
  std::fclose(out);
}

}  // extern "C"
