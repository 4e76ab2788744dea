// Checkpoints of a trainer on one process (MPI_COMM_SELF): the file's layout and round trip; every byte
// that matters verified (tensor bytes, metadata attributes, a dataset, file or run that is not the one
// expected, random bit flips anywhere); the directory (keep-K of this run only, other runs refused or kept,
// the lock, incomplete files never loaded, the old format refused); fallback.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "data/temp_dir.hpp"
#include "kpipe/comm/grid.hpp"
#include "kpipe/core/hash.hpp"
#include "kpipe/data/corpus.hpp"
#include "kpipe/data/synthetic.hpp"
#include "kpipe/data/tokenizer.hpp"
#include "kpipe/io/checkpoint.hpp"
#include "kpipe/h5/file.hpp"
#include "kpipe/io/checkpoint_tokenizer.hpp"
#include "kpipe/io/param_checksum.hpp"
#include "kpipe/runtime/trainer.hpp"
#include "support/async_config.hpp"
#include "support/checkpointing.hpp"
#include "support/corpus.hpp"
#include "support/tiny_config.hpp"

namespace kpipe {
namespace {

namespace fs = std::filesystem;

// A trainer on MPI_COMM_SELF that owns its grid.
struct SelfRun {
  explicit SelfRun(const Config& c, const runtime::TrainerOptions& options = {})
      : grid(comm::make_grid(MPI_COMM_SELF, 1, 1)), trainer(c, test::corpus(), grid, options) {}
  ~SelfRun() { comm::free_grid(grid); }
  comm::ProcessGrid grid;
  runtime::Trainer<float> trainer;
};

// A checkpoint directory of one run, on MPI_COMM_SELF.
struct Dir {
  Dir(const std::string& path, int keep = 3, const std::string& run = "", OtherRuns other_runs = OtherRuns::refuse)
      : config(make(path, keep, other_runs)), dir(config, MPI_COMM_SELF, 30) {
    dir.start_run(run);
  }
  static CheckpointConfig make(const std::string& path, int keep, OtherRuns other_runs) {
    CheckpointConfig c;
    c.dir = path;
    c.keep = keep;
    c.other_runs = other_runs;
    return c;
  }
  CheckpointConfig config;
  io::CheckpointDir dir;
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

// The message of the CorruptCheckpoint fn throws; a test failure where it throws another error, or none.
template <class Fn> std::string corruption_of(Fn&& fn) {
  bool corrupt = false;
  const std::string message = error_of(std::forward<Fn>(fn), &corrupt);
  EXPECT_TRUE(corrupt) << (message.empty() ? "(nothing thrown)" : message);
  return message;
}

std::string saved(runtime::Trainer<float>& trainer, io::CheckpointDir& dir) {
  const io::SaveResult result = test::save(trainer, dir);
  EXPECT_TRUE(result.ok) << result.message;
  return result.path;
}

std::string saved_after(const Config& c, int steps, const std::string& dir, int keep = 3) {
  SelfRun run(c);
  for (int s = 0; s < steps; ++s) run.trainer.step();
  Dir d(dir, keep);
  return saved(run.trainer, d.dir);
}

// Everything a checkpoint restores: the values, both moments, the step.
std::uint64_t state_hash(const runtime::Trainer<float>& trainer) {
  Xxh64 h;
  for (int c = 0; c < trainer.stage().chunks(); ++c) {
    const auto& store = trainer.stage().chunk(c).params();
    for (const auto* buffer : {&store.values(), &store.moment1(), &store.moment2()}) {
      auto host = Kokkos::create_mirror_view_and_copy(HostSpace{}, *buffer);
      h.update(host.data(), host.span() * sizeof(float));
    }
  }
  const std::int64_t step = trainer.next_step();
  h.update(&step, sizeof step);
  return h.digest();
}

// Rewrites an attribute of the root group through HDF5 (as a tool or a script would: HDF5's own checksums
// then still pass, only kpipe's manifest can tell).
void rewrite_root_attribute(const std::string& file, const std::string& name, const io::AttributeValue& value) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  H5Adelete(f, name.c_str());
  if (const auto* number = std::get_if<std::int64_t>(&value))
    h5::write_attribute(f, name, *number);
  else
    h5::write_attribute(f, name, std::get<std::string>(value));
  H5Fclose(f);
}

TEST(Checkpoint, RoundTripRestoresEveryTensorTheMomentsAndTheStep) {
  test::TempDir tmp;
  const Config c = test::tiny_config(6);
  SelfRun a(c);
  a.trainer.step();
  a.trainer.step();
  Dir dir(tmp.path("ck"));
  const std::string path = saved(a.trainer, dir.dir);
  EXPECT_EQ(fs::path(path).filename(), "step-00000002.h5");
  SelfRun b(c);
  EXPECT_NE(state_hash(b.trainer), state_hash(a.trainer));
  const auto loaded = test::load(b.trainer, path);
  EXPECT_EQ(loaded.step, 2);
  EXPECT_EQ(loaded.run_id, dir.dir.run_id());
  EXPECT_EQ(b.trainer.next_step(), 2);
  EXPECT_EQ(state_hash(b.trainer), state_hash(a.trainer));
  EXPECT_EQ(b.trainer.step().loss, a.trainer.step().loss);
  EXPECT_EQ(b.trainer.param_checksum(), a.trainer.param_checksum());
}

TEST(Checkpoint, NonFiniteStateIsNeverWritten) {
  test::TempDir tmp;
  SelfRun a(test::tiny_config(6));
  a.trainer.step();
  const auto moment = a.trainer.stage().chunk(0).params().moment2();
  Kokkos::deep_copy(Kokkos::subview(moment, 5), std::numeric_limits<float>::infinity());
  Dir dir(tmp.path("ck"));
  const io::SaveResult result = test::save(a.trainer, dir.dir);
  EXPECT_FALSE(result.ok);
  EXPECT_NE(result.message.find("non-finite"), std::string::npos) << result.message;
  EXPECT_TRUE(io::checkpoint_files(tmp.path("ck")).empty());
  EXPECT_FALSE(fs::exists(tmp.path("ck") + "/latest"));
}

TEST(Checkpoint, OneFileShowsTheWholeModelByNameWithChecksums) {
  test::TempDir tmp;
  const std::string path = saved_after(test::tiny_config(6), 1, tmp.path("ck"));
  EXPECT_TRUE(fs::is_regular_file(path));
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  // Plain datasets (no external links): every HDF5 tool sees them with their shapes.
  for (const char* name : {"/model/layers/00/wte", "/model/layers/01/attn/qkv/weight", "/model/layers/03/ln_f/gamma",
                           "/optimizer/moment1/layers/02/mlp/fc/weight", "/optimizer/moment2/layers/01/attn/qkv/bias",
                           "/manifest"}) {
    H5L_info_t link{};
    ASSERT_GE(H5Lget_info(file, name, &link, H5P_DEFAULT), 0) << name;
    EXPECT_EQ(link.type, H5L_TYPE_HARD) << name;
    const hid_t dataset = H5Dopen2(file, name, H5P_DEFAULT);
    ASSERT_GE(dataset, 0) << name;
    EXPECT_GT(H5Aexists(dataset, "xxh64"), 0) << name;
    H5Dclose(dataset);
  }
  for (const char* attribute : {"format", "format_version", "kpipe_version", "created", "step", "config", "run_id"})
    EXPECT_GT(H5Aexists(file, attribute), 0) << attribute;
  H5Fclose(file);
  const auto info = io::read_checkpoint_info(path);
  EXPECT_EQ(info.step, 1);
  EXPECT_EQ(info.format_version, io::checkpoint_format_version);
  EXPECT_EQ(info.tensors, 2 + 2 * 12 + 3);  // wte, wpe; 12 per block; ln_f gamma, beta, lm_head
  EXPECT_EQ(info.run_id.size(), 16u);
  EXPECT_EQ(io::checkpoint_config(path).model.d_model, 16);
  const io::CheckpointReader reader(path);
  EXPECT_EQ(reader.datasets().size(), std::size_t(3 * info.tensors));
}

TEST(Checkpoint, FlippedTensorBytesAreNamed) {
  test::TempDir tmp;
  const Config c = test::tiny_config(6);
  const std::string path = saved_after(c, 1, tmp.path("ck"));
  // Find the stored bytes of one tensor in the file by their value, and flip one of them.
  SelfRun probe(c);
  test::load(probe.trainer, path);
  const auto weight = probe.trainer.stage().chunk(0).params().matrix(2, "mlp/fc/weight");
  auto host = Kokkos::create_mirror_view_and_copy(HostSpace{}, weight);
  const std::string needle(reinterpret_cast<const char*>(host.data()), 64);
  std::string bytes = read_file(path);
  const auto at = bytes.find(needle);
  ASSERT_NE(at, std::string::npos);
  bytes[at + 13] ^= 0x10;
  write_file(path, bytes);
  SelfRun run(c);
  const std::string message = corruption_of([&] { test::load(run.trainer, path); });
  EXPECT_NE(message.find("step-00000001.h5"), std::string::npos) << message;
  EXPECT_NE(message.find("/model/layers/02/mlp/fc/weight"), std::string::npos) << message;
  EXPECT_NE(message.find("checksum"), std::string::npos) << message;
}

// The tokenizer is part of the checkpoint: /tokenizer's attributes under the manifest, a SentencePiece
// model as the blob /tokenizer/model, read back verified on its own (kpipe-generate, kpipe-eval).
TEST(Checkpoint, TheTokenizerIsStoredAndVerifiedLikeEverythingElse) {
  test::TempDir tmp;
  // Bytes: the default corpus's tokenizer.
  const std::string bytes_path = saved_after(test::tiny_config(6), 1, tmp.path("bytes"));
  const data::Tokenizer bytes = io::read_checkpoint_tokenizer(tmp.path("bytes"));
  EXPECT_EQ(bytes.kind(), data::TokenizerKind::bytes);
  EXPECT_EQ(io::CheckpointReader(bytes_path).find("/tokenizer/model"), nullptr);
  if (!data::sentencepiece_available()) GTEST_SKIP() << "built without SentencePiece";

  const std::string text = [] {
    const auto c = data::synthetic_corpus(3, 60000, 0.0);
    const auto ids = c.train.read_all();
    return std::string(ids.begin(), ids.end());
  }();
  data::BpeOptions options;
  options.vocab_size = 600;
  options.threads = 1;
  data::Corpus bpe;
  bpe.tokenizer = data::train_bpe(text, options);
  bpe.train = bpe.tokenizer.encode(text.substr(0, 50000));
  bpe.validation = bpe.tokenizer.encode(text.substr(50000));
  Config c = test::tiny_config(6);
  data::fit_vocabulary(c.model, bpe);
  std::string path;
  {
    auto grid = comm::make_grid(MPI_COMM_SELF, 1, 1);
    {
      runtime::Trainer<float> trainer(c, bpe, grid);
      trainer.step();
      Dir dir(tmp.path("bpe"));
      path = saved(trainer, dir.dir);
    }
    comm::free_grid(grid);
  }
  const data::Tokenizer back = io::read_checkpoint_tokenizer(path);
  EXPECT_EQ(back.kind(), data::TokenizerKind::sentencepiece);
  EXPECT_EQ(back.vocab(), bpe.tokenizer.vocab());
  EXPECT_EQ(back.serialized_model(), bpe.tokenizer.serialized_model());
  {
    const io::CheckpointReader reader(path);
    const io::DatasetEntry* blob = reader.find("/tokenizer/model");
    ASSERT_NE(blob, nullptr);
    EXPECT_EQ(blob->type, io::ElementType::uint8);
    EXPECT_EQ(blob->shape, std::vector<std::int64_t>{std::int64_t(bpe.tokenizer.serialized_model().size())});
    EXPECT_EQ(reader.text("kind", "/tokenizer"), "sentencepiece");
  }

  // A flipped byte in the model is named.
  const std::string original = read_file(path);
  std::string damaged = original;
  const auto at = damaged.find(bpe.tokenizer.serialized_model().substr(0, 64));
  ASSERT_NE(at, std::string::npos);
  damaged[at + 40] ^= 0x04;
  write_file(path, damaged);
  std::string message = corruption_of([&] { io::read_checkpoint_tokenizer(path); });
  EXPECT_NE(message.find("/tokenizer/model"), std::string::npos) << message;
  EXPECT_NE(message.find("checksum"), std::string::npos) << message;

  // The vocabulary changed through HDF5 (its own checksums still pass): refused naming the attribute.
  write_file(path, original);
  {
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    const hid_t group = H5Gopen2(f, "/tokenizer", H5P_DEFAULT);
    H5Adelete(group, "vocab");
    h5::write_attribute(group, "vocab", std::int64_t(256));
    H5Gclose(group);
    H5Fclose(f);
  }
  message = corruption_of([&] { io::read_checkpoint_tokenizer(path); });
  EXPECT_NE(message.find("attribute vocab of /tokenizer"), std::string::npos) << message;
}

TEST(Checkpoint, MetadataRewrittenThroughHdf5IsRefusedNamingTheAttribute) {
  test::TempDir tmp;
  const Config c = test::tiny_config(6);
  SelfRun a(c);
  for (int s = 0; s < 3; ++s) a.trainer.step();
  Dir dir(tmp.path("ck"));
  const std::string path = saved(a.trainer, dir.dir);
  const std::string original = read_file(path);
  // The step (resuming "at step 1" with step 3's weights), and the config (ln_eps) changed silently.
  rewrite_root_attribute(path, "step", std::int64_t(1));
  SelfRun run(c);
  std::string message = corruption_of([&] { test::load(run.trainer, path); });
  EXPECT_NE(message.find("attribute step"), std::string::npos) << message;
  EXPECT_NE(message.find("reads 1"), std::string::npos) << message;
  EXPECT_NE(message.find("says 3"), std::string::npos) << message;

  write_file(path, original);
  std::string config = io::read_checkpoint_info(path).config_toml;
  const auto at = config.find("ln_eps = 1e-05");
  ASSERT_NE(at, std::string::npos);
  config.replace(at, 14, "ln_eps = 1e-03");
  rewrite_root_attribute(path, "config", config);
  message = corruption_of([&] { io::checkpoint_config(path); });
  EXPECT_NE(message.find("attribute config"), std::string::npos) << message;
  // The key that differs and both values, on one line: not two long texts cut where they still agree.
  EXPECT_NE(message.find("reads model.ln_eps = 1e-03 but the checksummed manifest says 1e-05"), std::string::npos)
      << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

TEST(Checkpoint, FlippedBitsInTheMetadataAreDetected) {
  test::TempDir tmp;
  const Config c = test::tiny_config(6);
  const std::string path = saved_after(c, 1, tmp.path("ck"));
  const std::string original = read_file(path);
  // The config text is stored twice: as the attribute h5py shows, and inside the manifest. A bit flipped in
  // either (HDF5's object-header checksum, or the manifest's hash, or the two disagreeing) is refused.
  const std::string needle = "ln_eps = 1e-05";
  std::vector<std::size_t> places;
  for (auto at = original.find(needle); at != std::string::npos; at = original.find(needle, at + 1))
    places.push_back(at);
  ASSERT_GE(places.size(), 2u);
  for (std::size_t at : places) {
    std::string bytes = original;
    bytes[at + 12] ^= 0x02;  // "1e-05" -> "1e-07"
    write_file(path, bytes);
    SelfRun run(c);
    SCOPED_TRACE(::testing::Message() << "flip at " << at);
    const std::string message = corruption_of([&] { test::load(run.trainer, path); });
    EXPECT_NE(message.find("step-00000001.h5"), std::string::npos) << message;
  }
}

TEST(Checkpoint, NoBitFlipAnywhereLoadsADifferentState) {
  test::TempDir tmp;
  const Config c = test::tiny_config(6);
  const std::string path = saved_after(c, 2, tmp.path("ck"));
  const std::string original = read_file(path);
  SelfRun reference(c);
  test::load(reference.trainer, path);
  const std::uint64_t expected = state_hash(reference.trainer);
  // A flip in unused space (alignment gaps) may pass; one in anything that is read must be refused.
  std::mt19937_64 random(12345);
  int refused = 0;
  const int flips = 150;
  for (int k = 0; k < flips; ++k) {
    std::string bytes = original;
    const std::size_t at = random() % bytes.size();
    bytes[at] ^= char(1 << (random() % 8));
    write_file(path, bytes);
    SelfRun run(c);
    try {
      test::load(run.trainer, path);
      EXPECT_EQ(state_hash(run.trainer), expected) << "a flip at byte " << at << " loaded a different state";
    } catch (const InputError&) {
      ++refused;
    }
    EXPECT_EQ(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL), 0) << "a flip at byte " << at << " left HDF5 objects open";
  }
  EXPECT_GT(refused, flips / 2);  // most of the file is tensor bytes and metadata
}

TEST(Checkpoint, ADatasetCopiedInFromAnotherCheckpointIsRefusedNamingIt) {
  test::TempDir tmp;
  const Config c = test::tiny_config(6);
  SelfRun a(c);
  a.trainer.step();
  Dir dir(tmp.path("ck"));
  const std::string one = saved(a.trainer, dir.dir);
  a.trainer.step();
  const std::string two = saved(a.trainer, dir.dir);
  // Replace step 2's wte by step 1's, with h5copy's means (its own fnv1a64 attribute comes along).
  const std::string name = "/model/layers/00/wte";
  const hid_t target = H5Fopen(two.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  const hid_t source = H5Fopen(one.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(H5Ldelete(target, name.c_str(), H5P_DEFAULT), 0);
  ASSERT_GE(H5Ocopy(source, name.c_str(), target, name.c_str(), H5P_DEFAULT, H5P_DEFAULT), 0);
  H5Fclose(source);
  H5Fclose(target);
  SelfRun run(c);
  const std::string message = corruption_of([&] { test::load(run.trainer, two); });
  EXPECT_NE(message.find(name), std::string::npos) << message;
  EXPECT_NE(message.find("another checkpoint"), std::string::npos) << message;
}

TEST(Checkpoint, AFileOfAnotherStepOrRunInPlaceIsRefused) {
  test::TempDir tmp;
  const Config c = test::tiny_config(6);
  SelfRun a(c);
  a.trainer.step();
  Dir dir(tmp.path("ck"));
  const std::string one = saved(a.trainer, dir.dir);
  a.trainer.step();
  const std::string two = saved(a.trainer, dir.dir);
  const std::string kept = read_file(two);
  // Step 1's file under step 2's name.
  fs::copy_file(one, two, fs::copy_options::overwrite_existing);
  CheckpointConfig resume;
  resume.dir = tmp.path("ck");
  resume.resume = "latest";
  SelfRun run(c);
  std::string message = corruption_of([&] { test::resume(run.trainer, resume); });
  EXPECT_NE(message.find("holds step 1, not the step 2"), std::string::npos) << message;
  // Another run's step 2 in its place: `latest` recorded this run's.
  write_file(two, kept);
  const std::string other = saved_after(c, 2, tmp.path("other"));
  fs::copy_file(other, two, fs::copy_options::overwrite_existing);
  message = corruption_of([&] { test::resume(run.trainer, resume); });
  EXPECT_NE(message.find("belongs to run"), std::string::npos) << message;
  EXPECT_NE(message.find(dir.dir.run_id()), std::string::npos) << message;
  // With fallback = "previous" the run's step 1 is loaded instead.
  resume.fallback = CheckpointFallback::previous;
  const auto loaded = test::resume(run.trainer, resume);
  EXPECT_EQ(fs::path(loaded.path).filename(), "step-00000001.h5");
  EXPECT_EQ(run.trainer.next_step(), 1);
  // Control: step 2's own file back in place, the fallback leaves it chosen.
  write_file(two, kept);
  SelfRun again(c);
  EXPECT_EQ(fs::path(test::resume(again.trainer, resume).path).filename(), "step-00000002.h5");
  EXPECT_EQ(again.trainer.next_step(), 2);
}

TEST(Checkpoint, TruncatedFilesAreNamed) {
  test::TempDir tmp;
  const Config c = test::tiny_config(6);
  const std::string path = saved_after(c, 1, tmp.path("ck"));
  const std::string bytes = read_file(path);
  for (std::size_t keep : {bytes.size() / 2, std::size_t(3000), std::size_t(100)}) {
    write_file(path, bytes.substr(0, keep));
    SelfRun run(c);
    SCOPED_TRACE(::testing::Message() << "kept " << keep << " bytes");
    const std::string message = corruption_of([&] { test::load(run.trainer, path); });
    EXPECT_NE(message.find("step-00000001.h5"), std::string::npos) << message;
  }
}

TEST(Checkpoint, ModelMismatchNamesTheTensorAndBothShapes) {
  test::TempDir tmp;
  Config c = test::tiny_config(6);
  const std::string path = saved_after(c, 1, tmp.path("ck"));
  Config wider = c;
  wider.model.d_model = 32;
  SelfRun run(wider);
  bool corrupt = true;
  std::string message = error_of([&] { test::load(run.trainer, path); }, &corrupt);
  EXPECT_FALSE(corrupt);
  EXPECT_NE(message.find("model/layers/00/wte"), std::string::npos) << message;
  EXPECT_NE(message.find("[256, 16]"), std::string::npos) << message;
  EXPECT_NE(message.find("[256, 32]"), std::string::npos) << message;

  Config deeper = c;
  deeper.model.n_layers = 3;
  SelfRun run3(deeper);
  message = error_of([&] { test::load(run3.trainer, path); });
  EXPECT_NE(message.find("model/layers/03/ln1/gamma"), std::string::npos) << message;
  EXPECT_NE(message.find("not in the checkpoint"), std::string::npos) << message;

  Config shallower = c;
  shallower.model.n_layers = 1;
  SelfRun run1(shallower);
  message = error_of([&] { test::load(run1.trainer, path); });
  EXPECT_NE(message.find("model/layers/02/ln_f/gamma"), std::string::npos) << message;  // the head moved
}

TEST(Checkpoint, KeepsThisRunsNewestKAndLatestNamesTheNewest) {
  test::TempDir tmp;
  const std::string dir = tmp.path("ck");
  SelfRun run(test::tiny_config(6));
  Dir d(dir, 2);
  for (int s = 0; s < 4; ++s) {
    run.trainer.step();
    saved(run.trainer, d.dir);
  }
  const auto kept = io::checkpoint_files(dir);
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0].step, 3);
  EXPECT_EQ(kept[1].step, 4);
  const io::Latest latest = io::read_latest(dir);
  EXPECT_EQ(latest.name, "step-00000004.h5");
  EXPECT_EQ(latest.run_id, d.dir.run_id());
  EXPECT_EQ(latest.manifest_hash, io::read_checkpoint_info(kept[1].path).manifest_hash);
  EXPECT_EQ(read_file(dir + "/latest").substr(0, 17), "step-00000004.h5\n");  // what a script reads
}

TEST(Checkpoint, AnotherRunsCheckpointsAreRefusedOrKeptNeverPruned) {
  test::TempDir tmp;
  const std::string dir = tmp.path("ck");
  const Config c = test::tiny_config(6);
  std::string first_run;
  {  // A first run wrote steps 5 and 6 here.
    SelfRun a(c);
    for (int s = 0; s < 5; ++s) a.trainer.step();
    Dir d(dir, 2);
    first_run = d.dir.run_id();
    saved(a.trainer, d.dir);
    a.trainer.step();
    saved(a.trainer, d.dir);
  }
  // A new run (not resuming) is refused before it trains, naming the other run.
  const std::string message = error_of([&] { Dir d(dir, 2); });
  EXPECT_NE(message.find(first_run), std::string::npos) << message;
  EXPECT_NE(message.find("step-00000005.h5 to step-00000006.h5"), std::string::npos) << message;
  EXPECT_NE(message.find("checkpoint.other_runs"), std::string::npos) << message;
  // With other_runs = "keep" it writes beside them, and prunes only its own, oldest first.
  SelfRun b(c);
  Dir d(dir, 2, "", OtherRuns::keep);
  EXPECT_NE(d.dir.run_id(), first_run);
  for (int s = 0; s < 4; ++s) {
    b.trainer.step();
    saved(b.trainer, d.dir);
  }
  std::vector<std::pair<std::int64_t, std::string>> found;
  for (const auto& ref : io::checkpoint_files(dir)) found.emplace_back(ref.step, ref.run_id);
  const std::vector<std::pair<std::int64_t, std::string>> expected = {
      {3, d.dir.run_id()}, {4, d.dir.run_id()}, {5, first_run}, {6, first_run}};
  EXPECT_EQ(found, expected);
  EXPECT_EQ(io::read_latest(dir).name, "step-00000004.h5");
  // Its step 5 would replace the other run's: refused, and nothing changes.
  b.trainer.step();
  const io::SaveResult clash = test::save(b.trainer, d.dir);
  EXPECT_FALSE(clash.ok);
  EXPECT_NE(clash.message.find("belongs to another run"), std::string::npos) << clash.message;
  EXPECT_EQ(io::read_checkpoint_info(dir + "/step-00000005.h5").run_id, first_run);
  EXPECT_EQ(io::read_latest(dir).name, "step-00000004.h5");
}

TEST(Checkpoint, ResumingContinuesTheRunItLoaded) {
  test::TempDir tmp;
  const std::string dir = tmp.path("ck");
  const Config c = test::tiny_config(6);
  std::string run_id;
  {
    SelfRun a(c);
    a.trainer.step();
    Dir d(dir, 2);
    run_id = d.dir.run_id();
    saved(a.trainer, d.dir);
  }
  CheckpointConfig resume;
  resume.dir = dir;
  resume.resume = "latest";
  SelfRun b(c);
  const auto loaded = test::resume(b.trainer, resume);
  EXPECT_EQ(loaded.run_id, run_id);
  Dir d(dir, 2, loaded.run_id);  // the same run: its checkpoints are this run's
  for (int s = 0; s < 3; ++s) {
    b.trainer.step();
    saved(b.trainer, d.dir);
  }
  const auto kept = io::checkpoint_files(dir);
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0].step, 3);
  EXPECT_EQ(kept[1].step, 4);
}

TEST(Checkpoint, OneTrainingPerDirectory) {
  test::TempDir tmp;
  const std::string dir = tmp.path("ck");
  {
    Dir first(dir);
    EXPECT_TRUE(first.dir.locked());
    const std::string message = error_of([&] { Dir second(dir); });
    EXPECT_NE(message.find("in use by another training"), std::string::npos) << message;
    EXPECT_NE(message.find("pid "), std::string::npos) << message;
  }
  Dir again(dir);  // released with its holder
  EXPECT_TRUE(again.dir.locked());
}

TEST(Checkpoint, TheDirectoryIsCheckedBeforeAnyTraining) {
  test::TempDir tmp;
  std::string message = error_of([&] { Dir d(tmp.path("missing/parent/ck")); });
  EXPECT_NE(message.find("parent directory"), std::string::npos) << message;
  EXPECT_NE(message.find("does not exist"), std::string::npos) << message;
  write_file(tmp.path("file"), "x");
  message = error_of([&] { Dir d(tmp.path("file")); });
  EXPECT_NE(message.find("not a directory"), std::string::npos) << message;
  Dir created(tmp.path("new"));  // a missing directory whose parent exists is created
  EXPECT_TRUE(fs::is_directory(tmp.path("new")));
}

TEST(Checkpoint, AnIncompleteCheckpointIsNeverLoaded) {
  test::TempDir tmp;
  const std::string dir = tmp.path("ck");
  const Config c = test::tiny_config(6);
  SelfRun a(c);
  a.trainer.step();
  Dir d(dir, 2);
  const std::string done = saved(a.trainer, d.dir);
  // A writer killed mid-way leaves step-<N>.h5.<run>.tmp (even a complete one): not a checkpoint.
  const std::string stale = dir + "/" + io::temporary_file_name(9, d.dir.run_id());
  fs::copy_file(done, stale);
  EXPECT_EQ(io::checkpoint_files(dir).size(), 1u);
  EXPECT_NE(error_of([&] { io::checkpoint_file_of(stale); }).find("incomplete"), std::string::npos);
  CheckpointConfig resume;
  resume.dir = dir;
  resume.resume = "latest";
  SelfRun run(c);
  EXPECT_EQ(test::resume(run.trainer, resume).path, done);
  EXPECT_EQ(run.trainer.next_step(), 1);
  // The next save clears the stale temporary file.
  a.trainer.step();
  saved(a.trainer, d.dir);
  EXPECT_FALSE(fs::exists(stale));
}

TEST(Checkpoint, FallbackLoadsThePreviousCheckpointOfTheRun) {
  test::TempDir tmp;
  const std::string dir = tmp.path("ck");
  const Config c = test::tiny_config(6);
  {
    SelfRun run(c);
    Dir d(dir);
    run.trainer.step();
    saved(run.trainer, d.dir);
    run.trainer.step();
    saved(run.trainer, d.dir);
  }
  const std::string newest = dir + "/step-00000002.h5";
  CheckpointConfig cc;
  cc.dir = dir;
  cc.resume = "latest";
  {
    // Control: intact, the newest loads with the fallback on.
    cc.fallback = CheckpointFallback::previous;
    SelfRun intact(c);
    EXPECT_EQ(fs::path(test::resume(intact.trainer, cc).path).filename(), "step-00000002.h5");
    cc.fallback = CheckpointFallback::error;
  }
  write_file(newest, read_file(newest).substr(0, 2000));
  SelfRun strict(c);
  const std::string message = error_of([&] { test::resume(strict.trainer, cc); });
  EXPECT_NE(message.find("step-00000002.h5"), std::string::npos) << message;
  cc.fallback = CheckpointFallback::previous;
  SelfRun lenient(c);
  EXPECT_EQ(fs::path(test::resume(lenient.trainer, cc).path).filename(), "step-00000001.h5");
  EXPECT_EQ(lenient.trainer.next_step(), 1);
}

struct Losses {
  std::vector<double> losses;
  std::uint64_t checksum = 0;
};

Losses run_steps(runtime::Trainer<float>& trainer, int steps) {
  Losses out;
  for (int s = 0; s < steps; ++s) out.losses.push_back(trainer.step().loss);
  out.checksum = trainer.param_checksum();
  return out;
}

// Issue 28 item 5: an asynchronous run resumed from a checkpoint is planned once, at construction, from the
// checkpoint's step chosen before it (TrainerOptions::first_step); resume() restores the state and plans
// nothing, and refuses a step other than the one planned. The run continues bit for bit.
TEST(Checkpoint, AResumedAsynchronousRunIsPlannedOnceFromTheChosenStep) {
  test::TempDir tmp;
  const Config c = test::async_config("pipedream", 0, 1, 2, 6);
  SelfRun straight(c);
  const Losses whole = run_steps(straight.trainer, 6);
  {
    SelfRun a(c);
    run_steps(a.trainer, 3);
    Dir d(tmp.path("ck"));
    saved(a.trainer, d.dir);
  }
  CheckpointConfig resume;
  resume.dir = tmp.path("ck");
  resume.resume = "latest";
  const io::ResumePoint point = io::choose_resume_point(resume, MPI_COMM_SELF, 30);
  EXPECT_EQ(point.step, 3);
  EXPECT_EQ(fs::path(point.path).filename(), "step-00000003.h5");
  runtime::TrainerOptions options;
  options.first_step = point.step;
  SelfRun b(c, options);
  const runtime::RunPlan& plan = b.trainer.plan();
  EXPECT_EQ(plan.first_step, 3);
  EXPECT_EQ(plan.schedule.passes.front(), "generate pipedream resumed at step 3 (p = 1, m = 2, 3 steps)");
  const std::vector<std::string> passes = plan.schedule.passes;
  const schedule::Action* actions = plan.actions.data();
  const auto loaded = io::load_resume_point(b.trainer.stage(), point);
  b.trainer.resume(loaded.step, loaded.older);
  // The plan resume() leaves is the one made at construction: the same passes, the very same lists.
  EXPECT_EQ(&b.trainer.plan(), &plan);
  EXPECT_EQ(b.trainer.plan().schedule.passes, passes);
  EXPECT_EQ(b.trainer.plan().actions.data(), actions);
  const Losses rest = run_steps(b.trainer, 3);
  EXPECT_EQ(rest.losses, std::vector<double>(whole.losses.begin() + 3, whole.losses.end()));
  EXPECT_EQ(rest.checksum, whole.checksum);
  // A trainer planned from step 0 does not resume at step 3: its lists do not continue that run.
  SelfRun fresh(c);
  const auto again = io::load_resume_point(fresh.trainer.stage(), point);
  try {
    fresh.trainer.resume(again.step, again.older);
    ADD_FAILURE() << "resumed at step 3 on lists planned from step 0";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("planned from step 0"), std::string::npos) << e.what();
  }
}

// With fallback = "previous" the checkpoint is chosen, and damage found, before any trainer exists: a newest
// checkpoint whose tensor bytes are damaged (its metadata intact) gives way to the previous one, whose step the
// run is then planned from and continues bit for bit. Without fallback the damaged one is chosen (only its
// metadata is read) and its load names the tensor.
TEST(Checkpoint, TheFallbackIsDecidedBeforeTheRunIsPlanned) {
  test::TempDir tmp;
  const Config c = test::async_config("pipedream", 0, 1, 2, 6);
  SelfRun straight(c);
  const Losses whole = run_steps(straight.trainer, 6);
  {
    SelfRun a(c);
    Dir d(tmp.path("ck"));
    run_steps(a.trainer, 2);
    saved(a.trainer, d.dir);
    run_steps(a.trainer, 1);
    saved(a.trainer, d.dir);
  }
  const std::string tensor = "/model/layers/01/attn/qkv/weight";
  CheckpointConfig resume;
  resume.dir = tmp.path("ck");
  resume.resume = "latest";
  // Control: intact, the newest is chosen, byte check and all (a check that flagged an intact file would fall
  // back here too).
  resume.fallback = CheckpointFallback::previous;
  EXPECT_EQ(io::choose_resume_point(resume, MPI_COMM_SELF, 30).step, 3);
  resume.fallback = CheckpointFallback::error;
  test::damage_tensor(tmp.path("ck") + "/step-00000003.h5", tensor);
  const io::ResumePoint strict = io::choose_resume_point(resume, MPI_COMM_SELF, 30);
  EXPECT_EQ(strict.step, 3);
  {
    runtime::TrainerOptions options;
    options.first_step = strict.step;
    SelfRun run(c, options);
    const std::string message = corruption_of([&] { io::load_resume_point(run.trainer.stage(), strict); });
    EXPECT_NE(message.find(tensor), std::string::npos) << message;
    EXPECT_NE(message.find("checksum"), std::string::npos) << message;
  }
  resume.fallback = CheckpointFallback::previous;
  const io::ResumePoint point = io::choose_resume_point(resume, MPI_COMM_SELF, 30);
  EXPECT_EQ(point.step, 2);
  EXPECT_EQ(fs::path(point.path).filename(), "step-00000002.h5");
  runtime::TrainerOptions options;
  options.first_step = point.step;
  SelfRun b(c, options);
  EXPECT_EQ(b.trainer.plan().first_step, 2);
  const auto loaded = io::load_resume_point(b.trainer.stage(), point);
  b.trainer.resume(loaded.step, loaded.older);
  const Losses rest = run_steps(b.trainer, 4);
  EXPECT_EQ(rest.losses, std::vector<double>(whole.losses.begin() + 2, whole.losses.end()));
  EXPECT_EQ(rest.checksum, whole.checksum);
}

TEST(Checkpoint, TheOldFormatIsRefusedNamingItsVersion) {
  test::TempDir tmp;
  // A format_version 1 checkpoint: a step-<N> directory holding checkpoint.h5 and rank files.
  const std::string dir = tmp.path("ck");
  fs::create_directories(dir + "/step-00000004");
  {
    const h5::Handle file = h5::create_file(dir + "/step-00000004/checkpoint.h5");
    h5::write_attribute(file.get(), "format", std::string("kpipe-checkpoint"));
    h5::write_attribute(file.get(), "format_version", std::int64_t(1));
  }
  write_file(dir + "/latest", "step-00000004\n");
  for (const std::string& path : {dir + "/step-00000004", dir + "/step-00000004/checkpoint.h5"}) {
    const std::string message = error_of([&] { io::read_checkpoint_info(path); });
    EXPECT_NE(message.find("format_version 1"), std::string::npos) << path << ": " << message;
    EXPECT_NE(message.find(fmt::format("format_version {}", io::checkpoint_format_version)), std::string::npos)
        << path << ": " << message;
  }
  CheckpointConfig resume;
  resume.dir = dir;
  resume.resume = "latest";
  SelfRun run(test::tiny_config(6));
  std::string message = error_of([&] { test::resume(run.trainer, resume); });
  EXPECT_NE(message.find("format_version 1"), std::string::npos) << message;
  // A new run there is refused too (another run's checkpoints), never pruned.
  message = error_of([&] { Dir d(dir); });
  EXPECT_NE(message.find("format_version 1"), std::string::npos) << message;
}

// A checkpoint of format_version 2 (FNV-1a 64 hashes), written by the kpipe before format_version 3 (a
// 2-stage run of 2 steps, kept in tests/io/data): every dataset reads back checked with its own hash, a flipped
// byte is named with it, and its param_checksum equals that of the same state written as format_version 3.
TEST(Checkpoint, TheFormatBeforeIsReadWithItsOwnHash) {
  const std::string fixture = std::string(KPIPE_SOURCE_DIR) + "/tests/io/data/format_version_2/step-00000002.h5";
  const io::CheckpointReader old(fixture);
  EXPECT_EQ(old.format_version(), 2);
  EXPECT_EQ(old.hash_kind(), ByteHash::fnv1a64);
  std::string tensor;  // the bytes of the first large tensor, to damage below
  for (const auto& entry : old.datasets()) {
    const std::string bytes = old.read_verified(entry);
    EXPECT_EQ(fnv1a64(bytes), entry.hash) << entry.name;
    if (tensor.empty() && bytes.size() >= 1024 && entry.name.rfind("/model/", 0) == 0) tensor = entry.name;
  }
  ASSERT_FALSE(tensor.empty());

  // The same state saved by this kpipe: format_version 3, the same param_checksum.
  test::TempDir tmp;
  Config config = io::checkpoint_config(fixture);
  config.pipeline.pipeline_size = 1;  // any layout loads it: here one process
  SelfRun run(config);
  test::load(run.trainer, fixture);
  Dir d(tmp.path("ck"));
  const io::CheckpointReader now(saved(run.trainer, d.dir));
  EXPECT_EQ(now.format_version(), io::checkpoint_format_version);
  EXPECT_EQ(now.hash_kind(), ByteHash::xxh64);
  EXPECT_EQ(io::param_checksum(now), io::param_checksum(old));
  EXPECT_EQ(now.find(tensor)->hash, xxh64(old.read_verified(*old.find(tensor))));

  // One flipped byte of that tensor, named with the file's hash.
  const std::string needle = old.read_verified(*old.find(tensor)).substr(0, 64);
  std::string bytes = read_file(fixture);
  const auto at = bytes.find(needle);
  ASSERT_NE(at, std::string::npos);
  bytes[at + 9] ^= 0x20;
  const std::string damaged = tmp.path("damaged.h5");
  write_file(damaged, bytes);
  const io::CheckpointReader reader(damaged);
  const std::string message = corruption_of([&] { reader.read_verified(*reader.find(tensor)); });
  EXPECT_NE(message.find(tensor + " fails its checksum (fnv1a64"), std::string::npos) << message;
}

TEST(Checkpoint, ConfigChecks) {
  CheckpointConfig c;
  c.keep = 1;
  EXPECT_NE(error_of([&] { io::validate_checkpoint_config(c); }).find("checkpoint.keep = 1"), std::string::npos);
  c.keep = 2;
  c.resume = "latest";
  EXPECT_NE(error_of([&] { io::validate_checkpoint_config(c); }).find("checkpoint.dir"), std::string::npos);
  c.resume.clear();
}

}  // namespace
}  // namespace kpipe
