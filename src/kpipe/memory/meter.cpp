#include "kpipe/memory/meter.hpp"

#include <Kokkos_Core.hpp>
#include <cstring>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace kpipe::memory {

namespace {

// Kokkos Tools callbacks are plain function pointers, so what they count lives here, for the one Meter.
struct Tally {
  Kokkos::Tools::Experimental::EventSet previous{};
  std::vector<int> regions;  // open regions: a category, or -1 for a region that is not kpipe::memory's
  Bytes live{}, peak{};
  std::int64_t other_live = 0, other_peak = 0;
  std::unordered_map<const void*, std::pair<int, std::uint64_t>> blocks;  // pointer -> (category or -1, bytes)
};
Tally* tally = nullptr;

int category_of_region(const char* name) {
  for (Category c : all_categories)
    if (std::strcmp(name, region_name(c)) == 0) return int(c);
  return -1;
}

int current_category() {
  for (auto it = tally->regions.rbegin(); it != tally->regions.rend(); ++it)
    if (*it >= 0) return *it;
  return -1;
}

void on_push(const char* name) {
  tally->regions.push_back(category_of_region(name));
  if (tally->previous.push_region) tally->previous.push_region(name);
}

void on_pop() {
  if (!tally->regions.empty()) tally->regions.pop_back();
  if (tally->previous.pop_region) tally->previous.pop_region();
}

void on_allocate(Kokkos_Profiling_SpaceHandle space, const char* label, const void* ptr, std::uint64_t size) {
  const int c = current_category();
  tally->blocks[ptr] = {c, size};
  if (c >= 0) {
    tally->live[c] += std::int64_t(size);
    tally->peak[c] = std::max(tally->peak[c], tally->live[c]);
  } else {
    tally->other_live += std::int64_t(size);
    tally->other_peak = std::max(tally->other_peak, tally->other_live);
  }
  if (tally->previous.allocate_data) tally->previous.allocate_data(space, label, ptr, size);
}

void on_deallocate(Kokkos_Profiling_SpaceHandle space, const char* label, const void* ptr, std::uint64_t size) {
  const auto it = tally->blocks.find(ptr);
  if (it != tally->blocks.end()) {  // allocated while the meter ran
    const auto [c, bytes] = it->second;
    (c >= 0 ? tally->live[c] : tally->other_live) -= std::int64_t(bytes);
    tally->blocks.erase(it);
  }
  if (tally->previous.deallocate_data) tally->previous.deallocate_data(space, label, ptr, size);
}

}  // namespace

Meter::Meter() {
  if (tally) throw std::logic_error("memory::Meter: one meter at a time");
  tally = new Tally;
  tally->previous = Kokkos::Tools::Experimental::get_callbacks();
  Kokkos::Tools::Experimental::set_push_region_callback(on_push);
  Kokkos::Tools::Experimental::set_pop_region_callback(on_pop);
  Kokkos::Tools::Experimental::set_allocate_data_callback(on_allocate);
  Kokkos::Tools::Experimental::set_deallocate_data_callback(on_deallocate);
}

Meter::~Meter() {
  Kokkos::Tools::Experimental::set_callbacks(tally->previous);
  delete tally;
  tally = nullptr;
}

Bytes Meter::live() const { return tally->live; }
Bytes Meter::peak() const { return tally->peak; }
std::int64_t Meter::other_live() const { return tally->other_live; }
std::int64_t Meter::other_peak() const { return tally->other_peak; }

}  // namespace kpipe::memory
