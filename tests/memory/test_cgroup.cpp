// The memory a cgroup still allows (memory/cgroup.hpp), read from fake file-system roots laid out as the kernel
// shows them: cgroup v2 under Slurm (the job's group limits, the step's does not), v1, a subtree that a container
// or bind mount shows as its root, escaped mount points, a hybrid layout, and nothing limited at all.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "data/temp_dir.hpp"
#include "kpipe/memory/cgroup.hpp"

namespace kpipe {
namespace {

constexpr std::int64_t MiB = 1 << 20;

// A fake root: proc/self/cgroup and proc/self/mountinfo, and the group files put().
struct FakeRoot {
  test::TempDir dir;
  FakeRoot(const std::string& cgroup, const std::string& mountinfo) {
    std::filesystem::create_directories(dir.path("proc/self"));
    dir.write("proc/self/cgroup", cgroup);
    dir.write("proc/self/mountinfo", mountinfo);
  }
  void put(const std::string& file, const std::string& text) {
    std::filesystem::create_directories(std::filesystem::path(dir.path(file)).parent_path());
    dir.write(file, text);
  }
  std::string root() const { return dir.root().string(); }
};

const std::string v2_mount = "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw\n";
const std::string v1_mount =
    "40 33 0:35 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:17 - cgroup cgroup rw,memory\n";

TEST(Cgroup, V2TheJobsLimitBindsItsSteps) {
  FakeRoot fake("0::/system.slice/slurmstepd.scope/job_5/step_0/user/task_0\n",
                "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n" + v2_mount);
  const std::string job = "sys/fs/cgroup/system.slice/slurmstepd.scope/job_5";
  fake.put(job + "/memory.max", std::to_string(1536 * MiB) + "\n");
  fake.put(job + "/memory.current", std::to_string(300 * MiB) + "\n");
  fake.put(job + "/memory.stat", "anon 200000\nfile 9000\ninactive_file " + std::to_string(100 * MiB) + "\n");
  fake.put(job + "/step_0/memory.max", "max\n");
  fake.put(job + "/step_0/memory.current", std::to_string(280 * MiB) + "\n");
  const auto m = memory::cgroup_memory(fake.root());
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->version, 2);
  EXPECT_EQ(m->group, "/" + job);
  EXPECT_EQ(m->limit, 1536 * MiB);
  EXPECT_EQ(m->used, 200 * MiB);  // the inactive page cache does not count: the kernel drops it first
  EXPECT_EQ(m->remaining(), 1336 * MiB);
}

TEST(Cgroup, TheGroupWithTheLeastLeftBinds) {
  FakeRoot fake("0::/a/b\n", v2_mount);
  fake.put("sys/fs/cgroup/a/memory.max", std::to_string(1000 * MiB));
  fake.put("sys/fs/cgroup/a/memory.current", std::to_string(900 * MiB));
  fake.put("sys/fs/cgroup/a/b/memory.max", std::to_string(500 * MiB));
  fake.put("sys/fs/cgroup/a/b/memory.current", std::to_string(100 * MiB));
  const auto m = memory::cgroup_memory(fake.root());
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->group, "/sys/fs/cgroup/a");  // 100 MiB left there, 400 MiB in b
  EXPECT_EQ(m->remaining(), 100 * MiB);
}

TEST(Cgroup, V1AndItsUnlimitedValue) {
  FakeRoot fake("12:pids:/x\n5:cpu,cpuacct:/x\n4:memory:/slurm/uid_0/job_7/step_0\n0::/\n",
                v1_mount + "41 33 0:36 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n");
  const std::string base = "sys/fs/cgroup/memory/slurm/uid_0/job_7";
  fake.put(base + "/memory.limit_in_bytes", std::to_string(2048 * MiB));
  fake.put(base + "/memory.usage_in_bytes", std::to_string(48 * MiB));
  fake.put(base + "/memory.stat", "cache 1000\ninactive_file 7\ntotal_inactive_file " + std::to_string(8 * MiB) + "\n");
  fake.put(base + "/step_0/memory.limit_in_bytes", "9223372036854771712\n");  // v1's "no limit"
  fake.put(base + "/step_0/memory.usage_in_bytes", std::to_string(40 * MiB));
  fake.put("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  const auto m = memory::cgroup_memory(fake.root());
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->version, 1);
  EXPECT_EQ(m->group, "/" + base);
  EXPECT_EQ(m->remaining(), 2048 * MiB - 40 * MiB);
}

// A container (or a bind mount) shows a subtree as the hierarchy's root: the group's path is read below it.
TEST(Cgroup, AMountOfASubtree) {
  FakeRoot fake("4:memory:/kpipe-node1/job_3\n",
                "40 33 0:35 /kpipe-node1 /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n");
  fake.put("sys/fs/cgroup/memory/job_3/memory.limit_in_bytes", std::to_string(64 * MiB));
  fake.put("sys/fs/cgroup/memory/job_3/memory.usage_in_bytes", std::to_string(4 * MiB));
  const auto m = memory::cgroup_memory(fake.root());
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->group, "/sys/fs/cgroup/memory/job_3");
  EXPECT_EQ(m->remaining(), 60 * MiB);
  // A group outside what the mount shows cannot be read: no limit known.
  FakeRoot outside("4:memory:/elsewhere/job_3\n",
                   "40 33 0:35 /kpipe-node1 /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n");
  EXPECT_FALSE(memory::cgroup_memory(outside.root()).has_value());
}

TEST(Cgroup, EscapedMountPointsAndAHybridLayout) {
  // v2 mounted without the memory controller (no memory.max), v1's memory where a space is \040.
  FakeRoot fake("0::/user.slice\n4:memory:/g\n",
                "30 23 0:26 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
                "40 33 0:35 / /mnt/cg\\040memory rw - cgroup cgroup rw,memory\n");
  fake.put("sys/fs/cgroup/unified/user.slice/cgroup.procs", "1\n");
  fake.put("mnt/cg memory/g/memory.limit_in_bytes", std::to_string(10 * MiB));
  fake.put("mnt/cg memory/g/memory.usage_in_bytes", std::to_string(2 * MiB));
  const auto m = memory::cgroup_memory(fake.root());
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->version, 1);
  EXPECT_EQ(m->group, "/mnt/cg memory/g");
  EXPECT_EQ(m->remaining(), 8 * MiB);
}

TEST(Cgroup, NoLimitAnywhereOrNoCgroupsAtAll) {
  FakeRoot unlimited("0::/user.slice/session-1.scope\n", v2_mount);
  unlimited.put("sys/fs/cgroup/user.slice/session-1.scope/memory.max", "max\n");
  unlimited.put("sys/fs/cgroup/user.slice/memory.max", "max\n");
  EXPECT_FALSE(memory::cgroup_memory(unlimited.root()).has_value());
  FakeRoot none("", "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n");
  EXPECT_FALSE(memory::cgroup_memory(none.root()).has_value());
  test::TempDir empty;
  EXPECT_FALSE(memory::cgroup_memory(empty.root().string()).has_value());
  // Use beyond the limit: nothing left, not a negative figure.
  FakeRoot over("0::/a\n", v2_mount);
  over.put("sys/fs/cgroup/a/memory.max", std::to_string(10 * MiB));
  over.put("sys/fs/cgroup/a/memory.current", std::to_string(12 * MiB));
  ASSERT_TRUE(memory::cgroup_memory(over.root()).has_value());
  EXPECT_EQ(memory::cgroup_memory(over.root())->remaining(), 0);
}

}  // namespace
}  // namespace kpipe
