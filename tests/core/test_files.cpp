// Input files are opened without blocking and must be regular files; output paths are checked before any
// work and never replace a device node.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>

#include "data/temp_dir.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/core/files.hpp"

namespace kpipe {
namespace {

TEST(Files, AFifoIsRefusedWithoutBlocking) {
  test::TempDir tmp;
  const std::string fifo = tmp.path("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(unreadable_reason(fifo), "is a FIFO, not a regular file");
  try {
    read_bytes(fifo, "--config = fifo");
    ADD_FAILURE() << "a FIFO was read";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "--config = fifo: cannot open (is a FIFO, not a regular file)");
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));  // no writer ever came
}

TEST(Files, DirectoriesAndDevicesAreNotInputs) {
  test::TempDir tmp;
  EXPECT_EQ(unreadable_reason(tmp.root().string()), "is a directory");
  EXPECT_EQ(unreadable_reason("/dev/null"), "is a character device, not a regular file");
  EXPECT_EQ(unreadable_reason(tmp.path("missing")), "No such file or directory");
  EXPECT_EQ(unreadable_reason(tmp.write("ok.txt", "abc")), "");
  EXPECT_EQ(read_bytes(tmp.path("ok.txt"), "x"), "abc");
  EXPECT_EQ(read_bytes(tmp.path("ok.txt"), "x", 2), "ab");
}

TEST(Files, OutputsAreRegularFilesInExistingDirectories) {
  test::TempDir tmp;
  EXPECT_EQ(unwritable_reason(tmp.path("new.h5")), "");
  EXPECT_EQ(unwritable_reason(tmp.write("old.h5", "x")), "");
  EXPECT_EQ(unwritable_reason("/dev/full"), "is a character device, not a regular file");
  EXPECT_NE(unwritable_reason(tmp.path("missing/out.jsonl")).find("missing': No such file or directory"),
            std::string::npos)
      << unwritable_reason(tmp.path("missing/out.jsonl"));
  EXPECT_EQ(unwritable_reason(tmp.root().string()), "is a directory");
  EXPECT_THROW(require_writable("/dev/full", "--output = /dev/full"), InputError);
}

}  // namespace
}  // namespace kpipe
