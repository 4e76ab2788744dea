#include "kpipe/io/checkpoint_store.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <system_error>

namespace kpipe::io {

namespace fs = std::filesystem;

namespace {

// The step of a directory named step-<digits>, or -1.
std::int64_t step_of(const std::string& name) {
  const std::string prefix = "step-";
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return -1;
  std::int64_t step = 0;
  for (std::size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

bool is_stale_tmp(const std::string& name) {
  const std::string suffix = ".tmp";
  return name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
         step_of(name.substr(0, name.size() - suffix.size())) >= 0;
}

}  // namespace

std::string step_dir_name(std::int64_t step) { return fmt::format("step-{:08d}", step); }

std::vector<CheckpointRef> complete_checkpoints(const std::string& dir) {
  std::vector<CheckpointRef> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return found;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const std::int64_t step = step_of(name);
    if (step < 0 || !entry.is_directory(ec)) continue;
    if (!fs::is_regular_file(entry.path() / checkpoint_entry_file, ec)) continue;
    found.push_back({step, entry.path().string()});
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return found;
}

CheckpointRef latest_checkpoint(const std::string& dir) {
  const auto all = complete_checkpoints(dir);
  std::ifstream in(fs::path(dir) / latest_file);
  std::string name;
  if (in && std::getline(in, name)) {
    for (const auto& c : all)
      if (fs::path(c.path).filename() == name) return c;
  }
  return all.empty() ? CheckpointRef{} : all.back();
}

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "open " + path);
  const int rc = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  // Some file systems refuse fsync on directories (EINVAL): nothing more can be done there.
  if (rc != 0 && error != EINVAL) throw std::system_error(error, std::generic_category(), "fsync " + path);
}

void write_latest(const std::string& dir, const std::string& name) {
  const fs::path tmp = fs::path(dir) / (std::string(latest_file) + ".tmp");
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << name << '\n';
    out.close();
    if (!out) throw std::system_error(errno, std::generic_category(), "write " + tmp.string());
  }
  fsync_path(tmp.string());
  fs::rename(tmp, fs::path(dir) / latest_file);
  fsync_path(dir);
}

void prune_checkpoints(const std::string& dir, int keep) {
  const auto all = complete_checkpoints(dir);
  for (std::size_t i = 0; i + std::size_t(std::max(keep, 1)) < all.size(); ++i) fs::remove_all(all[i].path);
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (is_stale_tmp(entry.path().filename().string())) fs::remove_all(entry.path(), ec);
  fsync_path(dir);
}

void publish_directory(const std::string& tmp, const std::string& final_path) {
  fsync_path(tmp);
  std::error_code ec;
  if (fs::exists(final_path, ec)) {
    // A checkpoint of the same step from an earlier attempt: set it aside, then remove it once replaced.
    const std::string old = final_path + ".old";
    fs::remove_all(old, ec);
    fs::rename(final_path, old);
    fs::rename(tmp, final_path);
    fs::remove_all(old);
  } else {
    fs::rename(tmp, final_path);
  }
  fsync_path(fs::absolute(final_path).parent_path().string());
}

}  // namespace kpipe::io
