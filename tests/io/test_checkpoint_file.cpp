// The checkpoint file API on one process: named tensors and blobs in, the same back by name, every one
// checked against the manifest; attributes; names given twice; names that are not there.
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "data/temp_dir.hpp"
#include "kpipe/io/checkpoint_file.hpp"

namespace kpipe {
namespace {

TEST(CheckpointFile, TensorsAndBlobsComeBackByName) {
  test::TempDir tmp;
  const std::string path = tmp.path("x.h5");
  const std::vector<float> weights = {1.5f, -2.25f, 3.0f, 0.125f, -0.5f, 7.0f};
  const std::vector<double> version = {0.1, 0.2, 0.3};
  std::string tokenizer = "sentencepiece model bytes";
  tokenizer += std::string(1, '\0') + "\xff binary";
  {
    io::CheckpointWriter writer(MPI_COMM_SELF, 10);
    writer.add_tensor("/model/layers/00/w", {2, 3}, weights.data());
    writer.add_tensor("/versions/1/model/layers/00/b", {3}, version.data());
    writer.add_blob("/tokenizer/model", tokenizer);
    writer.set_attribute("/", "step", std::int64_t(7));
    writer.set_attribute("/tokenizer", "kind", std::string("sentencepiece"));
    const io::WriteStatus status = writer.write(path);
    ASSERT_TRUE(status.ok) << status.message;
    EXPECT_NE(status.manifest_hash, 0u);
  }
  const io::CheckpointReader reader(path);
  EXPECT_EQ(reader.number("step"), 7);
  EXPECT_EQ(reader.text("kind", "/tokenizer"), "sentencepiece");
  ASSERT_EQ(reader.datasets().size(), 3u);
  EXPECT_EQ(reader.datasets()[0].name, "/model/layers/00/w");  // name order
  std::vector<float> back(6);
  reader.read_tensor("/model/layers/00/w", {2, 3}, back.data());
  EXPECT_EQ(back, weights);
  std::vector<float> narrowed(3);  // float64 in the file, float32 asked: converted
  reader.read_tensor("/versions/1/model/layers/00/b", {3}, narrowed.data());
  EXPECT_EQ(narrowed, (std::vector<float>{0.1f, 0.2f, 0.3f}));
  EXPECT_EQ(reader.read_blob("/tokenizer/model"), tokenizer);
  EXPECT_THROW(reader.read_tensor("/model/layers/00/w", {3, 2}, back.data()), InputError);
  EXPECT_THROW(reader.read_tensor("/model/layers/01/w", {2, 3}, back.data()), InputError);
  EXPECT_THROW(reader.read_blob("/model/layers/00/w"), InputError);
  EXPECT_THROW(reader.number("missing"), io::CorruptCheckpoint);
}

TEST(CheckpointFile, ANameGivenTwiceIsAnError) {
  test::TempDir tmp;
  const float x = 1;
  io::CheckpointWriter writer(MPI_COMM_SELF, 10);
  writer.add_tensor("/a", {1}, &x);
  writer.add_tensor("/a", {1}, &x);
  EXPECT_THROW(writer.write(tmp.path("x.h5")), std::logic_error);
  io::CheckpointWriter reserved(MPI_COMM_SELF, 10);
  EXPECT_THROW(reserved.add_tensor("/manifest", {1}, &x), std::logic_error);
  EXPECT_THROW(reserved.add_tensor("relative", {1}, &x), std::logic_error);
}

TEST(CheckpointFile, AFileThatCannotBeCreatedIsAStatusNotAnException) {
  test::TempDir tmp;
  const float x = 1;
  io::CheckpointWriter writer(MPI_COMM_SELF, 10);
  writer.add_tensor("/a", {1}, &x);
  const io::WriteStatus status = writer.write(tmp.path("no/such/dir/x.h5"));
  EXPECT_FALSE(status.ok);
  EXPECT_EQ(status.rank, 0);
  EXPECT_NE(status.message.find("no/such/dir/x.h5"), std::string::npos) << status.message;
  EXPECT_NE(status.message.find("cannot create"), std::string::npos) << status.message;
}

TEST(CheckpointFile, NotACheckpoint) {
  test::TempDir tmp;
  EXPECT_THROW(io::CheckpointReader(tmp.write("text.h5", "not hdf5")), io::CorruptCheckpoint);
  EXPECT_THROW(io::CheckpointReader(tmp.path("missing.h5")), io::CorruptCheckpoint);
}

}  // namespace
}  // namespace kpipe
