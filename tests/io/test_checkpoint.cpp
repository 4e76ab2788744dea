// Checkpoints on one process (MPI_COMM_SELF): HDF5 layout and round trip, damaged files named, model
// mismatches named, keep-K and `latest`, incomplete checkpoints never loaded, fallback.
#include <gtest/gtest.h>

#include <limits>
#include <hdf5.h>
#include <mpi.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "data/temp_dir.hpp"
#include "kpipe/comm/grid.hpp"
#include "kpipe/data/synthetic.hpp"
#include "kpipe/io/checkpoint.hpp"
#include "kpipe/runtime/trainer.hpp"
#include "support/tiny_config.hpp"

namespace kpipe {
namespace {

namespace fs = std::filesystem;

Config tiny_config() { return test::tiny_config(6); }

const data::Corpus& corpus() {
  static const data::Corpus c = data::synthetic_corpus(3, 8000, 0.1);
  return c;
}

// A trainer on MPI_COMM_SELF that owns its grid.
struct SelfRun {
  explicit SelfRun(const Config& c) : grid(comm::make_grid(MPI_COMM_SELF, 1, 1)), trainer(c, corpus(), grid) {}
  ~SelfRun() { comm::free_grid(grid); }
  comm::ProcessGrid grid;
  runtime::Trainer<float> trainer;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// The message of the InputError fn throws ("" when none); corrupt tells whether it was a CorruptCheckpoint.
template <class Fn> std::string error_of(Fn&& fn, bool* corrupt = nullptr) {
  try {
    fn();
  } catch (const io::CorruptCheckpoint& e) {
    if (corrupt) *corrupt = true;
    return e.what();
  } catch (const InputError& e) {
    if (corrupt) *corrupt = false;
    return e.what();
  }
  return {};
}

std::string saved_after(const Config& c, int steps, const std::string& dir, int keep = 3) {
  SelfRun run(c);
  for (int s = 0; s < steps; ++s) run.trainer.step();
  return io::save_checkpoint(run.trainer, dir, keep);
}

TEST(Checkpoint, RoundTripRestoresEveryTensorAndTheStep) {
  test::TempDir tmp;
  const Config c = tiny_config();
  SelfRun a(c);
  a.trainer.step();
  a.trainer.step();
  const std::string path = io::save_checkpoint(a.trainer, tmp.path("ck"), 3);
  EXPECT_EQ(fs::path(path).filename(), "step-00000002");
  SelfRun b(c);
  EXPECT_NE(b.trainer.param_checksum(), a.trainer.param_checksum());
  io::load_checkpoint(b.trainer, path);
  EXPECT_EQ(b.trainer.next_step(), 2);
  EXPECT_EQ(b.trainer.param_checksum(), a.trainer.param_checksum());
  // The moments came back too: the next step is the same.
  EXPECT_EQ(b.trainer.step().loss, a.trainer.step().loss);
  EXPECT_EQ(b.trainer.param_checksum(), a.trainer.param_checksum());
}

TEST(Checkpoint, NonFiniteStateIsNeverWritten) {
  test::TempDir tmp;
  SelfRun a(tiny_config());
  a.trainer.step();
  const auto moment = a.trainer.chunk(0).params().moment2();
  Kokkos::deep_copy(Kokkos::subview(moment, 5), std::numeric_limits<float>::infinity());
  EXPECT_THROW(io::save_checkpoint(a.trainer, tmp.path("ck"), 3), std::runtime_error);
  EXPECT_FALSE(fs::exists(tmp.path("ck") + "/step-00000001"));
  EXPECT_FALSE(fs::exists(tmp.path("ck") + "/step-00000001.tmp"));
  EXPECT_FALSE(fs::exists(tmp.path("ck") + "/latest"));
}

TEST(Checkpoint, EntryFileShowsTheWholeModelByNameWithChecksums) {
  test::TempDir tmp;
  const std::string path = saved_after(tiny_config(), 1, tmp.path("ck"));
  const hid_t file = H5Fopen((path + "/checkpoint.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  for (const char* name : {"/model/layers/00/wte", "/model/layers/01/attn/qkv/weight", "/model/layers/03/ln_f/gamma",
                           "/optimizer/moment1/layers/02/mlp/fc/weight", "/optimizer/moment2/layers/01/attn/qkv/bias"}) {
    const hid_t dataset = H5Dopen2(file, name, H5P_DEFAULT);
    ASSERT_GE(dataset, 0) << name;
    EXPECT_GT(H5Aexists(dataset, "fnv1a64"), 0) << name;
    const hid_t properties = H5Dget_create_plist(dataset);
    EXPECT_GE(H5Pget_nfilters(properties), 1) << name;  // Fletcher32
    H5Pclose(properties);
    H5Dclose(dataset);
  }
  for (const char* attribute : {"format", "format_version", "kpipe_version", "created", "step", "config"})
    EXPECT_GT(H5Aexists(file, attribute), 0) << attribute;
  H5Fclose(file);
  const auto info = io::read_checkpoint_info(path);
  EXPECT_EQ(info.step, 1);
  EXPECT_EQ(info.format_version, io::checkpoint_format_version);
  EXPECT_EQ(info.tensors, 2 + 2 * 12 + 3);  // wte, wpe; 12 per block; ln_f gamma, beta, lm_head
  EXPECT_EQ(io::checkpoint_config(path).model.d_model, 16);
}

TEST(Checkpoint, FlippedBytesAreDetectedNamingFileAndDataset) {
  test::TempDir tmp;
  const Config c = tiny_config();
  const std::string path = saved_after(c, 1, tmp.path("ck"));
  // Find the stored bytes of one tensor in the rank file by their value, and flip one of them.
  SelfRun probe(c);
  io::load_checkpoint(probe.trainer, path);
  const auto weight = probe.trainer.chunk(0).params().matrix(2, "mlp/fc/weight");
  auto host = Kokkos::create_mirror_view_and_copy(HostSpace{}, weight);
  const std::string needle(reinterpret_cast<const char*>(host.data()), 64);
  const std::string file = path + "/rank-0.h5";
  std::string bytes = read_file(file);
  const auto at = bytes.find(needle);
  ASSERT_NE(at, std::string::npos);
  bytes[at + 13] ^= 0x10;
  write_file(file, bytes);
  SelfRun run(c);
  bool corrupt = false;
  const std::string message = error_of([&] { io::load_checkpoint(run.trainer, path); }, &corrupt);
  EXPECT_TRUE(corrupt) << message;
  EXPECT_NE(message.find("rank-0.h5"), std::string::npos) << message;
  EXPECT_NE(message.find("/model/layers/02/mlp/fc/weight"), std::string::npos) << message;
}

TEST(Checkpoint, TruncatedFilesAreNamed) {
  test::TempDir tmp;
  const Config c = tiny_config();
  const std::string path = saved_after(c, 1, tmp.path("ck"));
  const std::string rank_file = path + "/rank-0.h5";
  write_file(rank_file, read_file(rank_file).substr(0, 3000));
  SelfRun run(c);
  bool corrupt = false;
  std::string message = error_of([&] { io::load_checkpoint(run.trainer, path); }, &corrupt);
  EXPECT_TRUE(corrupt);
  EXPECT_NE(message.find("rank-0.h5"), std::string::npos) << message;
  EXPECT_NE(message.find("/model/layers/00/wte"), std::string::npos) << message;

  const std::string entry = path + "/checkpoint.h5";
  write_file(entry, read_file(entry).substr(0, 100));
  message = error_of([&] { io::load_checkpoint(run.trainer, path); }, &corrupt);
  EXPECT_TRUE(corrupt);
  EXPECT_NE(message.find("checkpoint.h5"), std::string::npos) << message;
}

TEST(Checkpoint, ModelMismatchNamesTheTensorAndBothShapes) {
  test::TempDir tmp;
  Config c = tiny_config();
  const std::string path = saved_after(c, 1, tmp.path("ck"));
  Config wider = c;
  wider.model.d_model = 32;
  SelfRun run(wider);
  bool corrupt = true;
  std::string message = error_of([&] { io::load_checkpoint(run.trainer, path); }, &corrupt);
  EXPECT_FALSE(corrupt);
  EXPECT_NE(message.find("model/layers/00/wte"), std::string::npos) << message;
  EXPECT_NE(message.find("[256, 16]"), std::string::npos) << message;
  EXPECT_NE(message.find("[256, 32]"), std::string::npos) << message;

  Config deeper = c;
  deeper.model.n_layers = 3;
  SelfRun run3(deeper);
  message = error_of([&] { io::load_checkpoint(run3.trainer, path); });
  EXPECT_NE(message.find("model/layers/03/ln1/gamma"), std::string::npos) << message;
  EXPECT_NE(message.find("not in the checkpoint"), std::string::npos) << message;

  Config shallower = c;
  shallower.model.n_layers = 1;
  SelfRun run1(shallower);
  message = error_of([&] { io::load_checkpoint(run1.trainer, path); });
  EXPECT_FALSE(message.empty());
}

TEST(Checkpoint, KeepsTheNewestKAndLatestNamesTheNewest) {
  test::TempDir tmp;
  const std::string dir = tmp.path("ck");
  SelfRun run(tiny_config());
  for (int s = 0; s < 4; ++s) {
    run.trainer.step();
    io::save_checkpoint(run.trainer, dir, 2);
  }
  const auto kept = io::complete_checkpoints(dir);
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0].step, 3);
  EXPECT_EQ(kept[1].step, 4);
  EXPECT_EQ(read_file(dir + "/latest"), "step-00000004\n");
  EXPECT_EQ(io::latest_checkpoint(dir).step, 4);
  EXPECT_FALSE(fs::exists(dir + "/latest.tmp"));
}

TEST(Checkpoint, AnIncompleteCheckpointIsNeverLoaded) {
  test::TempDir tmp;
  const std::string dir = tmp.path("ck");
  const Config c = tiny_config();
  const std::string done = saved_after(c, 1, dir);
  // A writer killed mid-way leaves step-<N>.tmp (even with every file in it): not a checkpoint.
  fs::copy(done, dir + "/step-00000009.tmp");
  EXPECT_EQ(io::latest_checkpoint(dir).step, 1);
  ASSERT_EQ(io::complete_checkpoints(dir).size(), 1u);
  EXPECT_NE(error_of([&] { io::entry_file_of(dir + "/step-00000009.tmp"); }).find("incomplete"), std::string::npos);
  // A step directory without its entry file (removed by hand) is not complete either.
  fs::create_directory(dir + "/step-00000007");
  EXPECT_EQ(io::latest_checkpoint(dir).step, 1);
  Config resume = c;
  resume.checkpoint.dir = dir;
  resume.checkpoint.resume = "latest";
  SelfRun run(c);
  EXPECT_EQ(io::resume_training(run.trainer, resume.checkpoint), done);
  EXPECT_EQ(run.trainer.next_step(), 1);
  // The next save clears the stale temporary directory.
  io::save_checkpoint(run.trainer, dir, 2);
  EXPECT_FALSE(fs::exists(dir + "/step-00000009.tmp"));
}

TEST(Checkpoint, FallbackLoadsThePreviousCompleteCheckpoint) {
  test::TempDir tmp;
  const std::string dir = tmp.path("ck");
  const Config c = tiny_config();
  {
    SelfRun run(c);
    run.trainer.step();
    io::save_checkpoint(run.trainer, dir, 3);
    run.trainer.step();
    io::save_checkpoint(run.trainer, dir, 3);
  }
  const std::string newest = dir + "/step-00000002/rank-0.h5";
  write_file(newest, read_file(newest).substr(0, 2000));
  CheckpointConfig cc;
  cc.dir = dir;
  cc.resume = "latest";
  SelfRun strict(c);
  const std::string message = error_of([&] { io::resume_training(strict.trainer, cc); });
  EXPECT_NE(message.find("step-00000002/rank-0.h5"), std::string::npos) << message;
  cc.fallback = "previous";
  SelfRun lenient(c);
  EXPECT_EQ(fs::path(io::resume_training(lenient.trainer, cc)).filename(), "step-00000001");
  EXPECT_EQ(lenient.trainer.next_step(), 1);
}

TEST(Checkpoint, ConfigChecks) {
  CheckpointConfig c;
  c.keep = 1;
  EXPECT_NE(error_of([&] { io::validate_checkpoint_config(c); }).find("checkpoint.keep = 1"), std::string::npos);
  c.keep = 2;
  c.resume = "latest";
  EXPECT_NE(error_of([&] { io::validate_checkpoint_config(c); }).find("checkpoint.dir"), std::string::npos);
}

}  // namespace
}  // namespace kpipe
