#include "kpipe/memory/cgroup.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace kpipe::memory {

namespace {

// One line of proc/self/cgroup: "0::/user.slice/..." (v2) or "4:memory:/slurm/uid_0/job_5/step_0" (v1).
struct Membership {
  int version = 2;
  std::string path;
};

// A mounted cgroup hierarchy: where it is mounted, and which group of it the mount shows as its root
// (not "/" where a container or a bind mount shows a subtree).
struct Mount {
  int version = 2;
  std::string root, point;
};

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, separator)) parts.push_back(part);
  return parts;
}

// mountinfo escapes space, tab, newline and backslash in paths as octal (\040).
std::string unescape(const std::string& text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto octal = [&](std::size_t k) { return k < text.size() && text[k] >= '0' && text[k] <= '7'; };
    if (text[i] == '\\' && octal(i + 1) && octal(i + 2) && octal(i + 3)) {
      out += char((text[i + 1] - '0') * 64 + (text[i + 2] - '0') * 8 + (text[i + 3] - '0'));
      i += 3;
    } else {
      out += text[i];
    }
  }
  return out;
}

std::vector<Membership> memberships(const std::string& root) {
  std::vector<Membership> found;
  std::ifstream in(root + "/proc/self/cgroup");
  for (std::string line; std::getline(in, line);) {
    const auto first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    if (line.compare(0, first, "0") == 0 && controllers.empty()) found.push_back({2, path});
    for (const std::string& c : split(controllers, ','))
      if (c == "memory") found.push_back({1, path});
  }
  return found;
}

std::vector<Mount> mounts(const std::string& root) {
  std::vector<Mount> found;
  std::ifstream in(root + "/proc/self/mountinfo");
  for (std::string line; std::getline(in, line);) {
    // id parent major:minor root point options [optional fields...] - type source super-options
    const std::vector<std::string> fields = split(line, ' ');
    const auto dash = std::find(fields.begin(), fields.end(), "-");
    if (fields.size() < 5 || dash == fields.end() || fields.end() - dash < 4) continue;
    const std::string& type = dash[1];
    const std::vector<std::string> options = split(dash[3], ',');
    if (type == "cgroup2")
      found.push_back({2, unescape(fields[3]), unescape(fields[4])});
    else if (type == "cgroup" && std::find(options.begin(), options.end(), "memory") != options.end())
      found.push_back({1, unescape(fields[3]), unescape(fields[4])});
  }
  return found;
}

// The first figure of a file ("max" and a missing file: none).
std::optional<std::int64_t> read_figure(const std::string& file) {
  std::ifstream in(file);
  std::string text;
  if (!(in >> text) || text == "max") return std::nullopt;
  try {
    return std::stoll(text);
  } catch (const std::exception&) {
    return std::nullopt;  // past int64 (v1's "unlimited" is just below): no limit
  }
}

// `key`'s figure in a memory.stat file, 0 if absent.
std::int64_t stat_figure(const std::string& file, const std::string& key) {
  std::ifstream in(file);
  std::string name;
  std::int64_t value = 0;
  while (in >> name >> value)
    if (name == key) return value;
  return 0;
}

// v1 reports "no limit" as the largest multiple of the page size below 2^63.
constexpr std::int64_t v1_unlimited = std::int64_t(1) << 62;

// The limit and use of one group directory, if it limits memory.
std::optional<CgroupMemory> group_limit(int version, const std::string& dir) {
  CgroupMemory m;
  m.version = version;
  m.group = dir;
  const auto limit = read_figure(dir + (version == 2 ? "/memory.max" : "/memory.limit_in_bytes"));
  if (!limit || *limit >= v1_unlimited) return std::nullopt;
  const auto used = read_figure(dir + (version == 2 ? "/memory.current" : "/memory.usage_in_bytes"));
  const std::int64_t dropped =
      stat_figure(dir + "/memory.stat", version == 2 ? "inactive_file" : "total_inactive_file");
  m.limit = *limit;
  m.used = std::max<std::int64_t>(used.value_or(0) - dropped, 0);
  return m;
}

}  // namespace

std::optional<CgroupMemory> cgroup_memory(const std::string& root) {
  const std::string prefix = root == "/" ? std::string() : root;  // the files' paths begin with it
  std::optional<CgroupMemory> least;
  const std::vector<Mount> mounted = mounts(prefix);
  for (const Membership& member : memberships(prefix)) {
    for (const Mount& mount : mounted) {
      if (mount.version != member.version) continue;
      // The member's group below the mount's root; a group outside what the mount shows cannot be read here.
      const std::string& base = mount.root == "/" ? std::string() : mount.root;
      if (member.path.compare(0, base.size(), base) != 0 ||
          (member.path.size() > base.size() && member.path[base.size()] != '/'))
        continue;
      std::string relative = member.path.substr(base.size());
      // The group, then each parent up to the mount's root.
      for (;;) {
        if (const auto here = group_limit(mount.version, prefix + mount.point + relative))
          if (!least || here->remaining() < least->remaining()) least = here;
        if (relative.empty() || relative == "/") break;
        relative.erase(relative.rfind('/'));
      }
      break;
    }
  }
  if (least) least->group.erase(0, prefix.size());  // as the process sees it
  return least;
}

}  // namespace kpipe::memory
