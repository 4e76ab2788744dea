#include "kpipe/io/checkpoint_store.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "kpipe/core/error.hpp"
#include "kpipe/core/files.hpp"
#include "kpipe/core/hash.hpp"
#include "kpipe/h5/file.hpp"

namespace kpipe::io {

namespace fs = std::filesystem;

namespace {

constexpr const char* prefix = "step-";
constexpr const char* suffix = ".h5";

// The step of "step-<digits>" followed by `tail`, or -1.
std::int64_t step_before(const std::string& name, const std::string& tail) {
  const std::string head = prefix;
  if (name.size() <= head.size() + tail.size() || name.compare(0, head.size(), head) != 0 ||
      name.compare(name.size() - tail.size(), tail.size(), tail) != 0)
    return -1;
  std::int64_t step = 0;
  for (std::size_t i = head.size(); i < name.size() - tail.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || step > (INT64_MAX - 9) / 10) return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

}  // namespace

std::string checkpoint_file_name(std::int64_t step) { return fmt::format("step-{:08d}.h5", step); }

std::string temporary_file_name(std::int64_t step, const std::string& run_id) {
  return fmt::format("{}.{}.tmp", checkpoint_file_name(step), run_id);
}

std::int64_t step_of_file_name(const std::string& name) { return step_before(name, suffix); }

std::string run_of(const std::string& checkpoint_file) {
  try {
    const auto hdf5 = h5::exclusive();  // the background writer prunes while the training reads tokens
    const h5::QuietErrors quiet;
    const h5::Handle file = h5::open_file(checkpoint_file);
    return h5::read_string_attribute(file.get(), "run_id", checkpoint_file);
  } catch (const InputError&) {
    return "";
  }
}

std::vector<CheckpointRef> checkpoint_files(const std::string& dir) {
  std::vector<CheckpointRef> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return found;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::int64_t step = step_of_file_name(entry.path().filename().string());
    if (step < 0 || !entry.is_regular_file(ec)) continue;
    found.push_back({step, entry.path().string(), run_of(entry.path().string())});
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return found;
}

std::vector<CheckpointRef> old_format_checkpoints(const std::string& dir) {
  std::vector<CheckpointRef> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return found;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::int64_t step = step_before(entry.path().filename().string(), "");
    if (step >= 0 && entry.is_directory(ec) && fs::is_regular_file(entry.path() / "checkpoint.h5", ec))
      found.push_back({step, entry.path().string(), ""});
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return found;
}

Latest read_latest(const std::string& dir) {
  Latest latest;
  std::ifstream in(fs::path(dir) / latest_file);
  if (!in || !std::getline(in, latest.name)) return latest;
  latest.found = !latest.name.empty();
  std::string line;
  while (std::getline(in, line)) {
    const auto space = line.find(' ');
    if (space == std::string::npos) continue;
    const std::string key = line.substr(0, space), value = line.substr(space + 1);
    if (key == "run") latest.run_id = value;
    // manifest_fnv1a64: written before format_version 3 (the name is the file's hash; the value, compared)
    if ((key == "manifest_xxh64" || key == "manifest_fnv1a64") && value.size() == 16 && value.find_first_not_of("0123456789abcdef") == std::string::npos)
      latest.manifest_hash = std::stoull(value, nullptr, 16);
  }
  return latest;
}

void write_latest(const std::string& dir, const Latest& latest) {
  const fs::path tmp = fs::path(dir) / fmt::format("{}.{}.tmp", latest_file, latest.run_id);
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << latest.name << "\nrun " << latest.run_id << "\nmanifest_xxh64 " << hash_hex(latest.manifest_hash)
        << '\n';
    out.close();
    if (!out) throw std::system_error(errno ? errno : EIO, std::generic_category(), "write " + tmp.string());
  }
  fsync_path(tmp.string());
  fs::rename(tmp, fs::path(dir) / latest_file);
  fsync_path(dir);
}

void publish_file(const std::string& tmp, const std::string& final_path) {
  fs::rename(tmp, final_path);  // atomic, replacing a file of the same name
  fsync_path(fs::absolute(final_path).parent_path().string());
}

std::vector<std::string> prune_checkpoints(const std::string& dir, const std::string& run_id, int keep,
                                           bool locked) {
  std::vector<std::string> removed;
  std::vector<CheckpointRef> ours;
  for (auto& c : checkpoint_files(dir))
    if (!run_id.empty() && c.run_id == run_id) ours.push_back(std::move(c));
  for (std::size_t i = 0; i + std::size_t(std::max(keep, 1)) < ours.size(); ++i) {
    fs::remove(ours[i].path);
    removed.push_back(ours[i].path);
  }
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    // step-<N>.h5.<run>.tmp
    const auto dot = name.find(".h5.");
    const bool temporary = dot != std::string::npos && step_before(name.substr(0, dot + 3), suffix) >= 0 &&
                           name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0;
    if (temporary && (locked || name == name.substr(0, dot + 3) + "." + run_id + ".tmp")) {
      fs::remove(entry.path(), ec);
      removed.push_back(entry.path().string());
    }
  }
  fsync_path(dir);
  return removed;
}

}  // namespace kpipe::io
