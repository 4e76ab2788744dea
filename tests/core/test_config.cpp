#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "kpipe/core/config_io.hpp"
#include "kpipe/core/error.hpp"
#include "support/input_error.hpp"

namespace kpipe {
namespace {

// A fresh directory under the system temp directory, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() / fmt::format("kpipe-test-config-{}-{}", ::getpid(), counter++);
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  std::string write(const std::string& name, const std::string& text) const {
    const std::string file = (path_ / name).string();
    std::ofstream(file, std::ios::binary) << text;
    return file;
  }
  std::string path(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

CommandLine parse(const std::vector<std::string>& args, const ExtraOptions& extra = {}) {
  std::vector<const char*> argv = {"kpipe-test"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  return parse_command_line("kpipe-test", static_cast<int>(argv.size()), argv.data(), extra);
}

using test::expect_input_error;

// Every field different from its default, and still valid.
Config changed_config() {
  Config c;
  c.model.vocab = 300;
  c.model.seq_len = 48;
  c.model.d_model = 96;
  c.model.n_layers = 5;
  c.model.n_heads = 3;
  c.model.mlp_ratio = 2;
  c.model.init_std = 0.1 + 0.2;  // not a short decimal: the dump must still round-trip exactly
  c.model.ln_eps = 1e-6;
  c.train.steps = 17;
  c.train.batch = 24;
  c.train.microbatches = 6;
  c.train.seed = 9223372036854775807ull;
  c.train.log_every = 3;
  c.train.eval_every = 5;
  c.train.eval_batches = 2;
  c.optim.kind = OptimizerKind::sgd;
  c.optim.lr = 3e-4;
  c.optim.min_lr = 1e-5;
  c.optim.warmup_steps = 4;
  c.optim.decay_steps = 11;
  c.optim.beta1 = 0.8;
  c.optim.beta2 = 0.99;
  c.optim.eps = 1e-7;
  c.optim.momentum = 0.5;
  c.optim.weight_decay = 0.0;
  c.optim.grad_clip = 2;
  c.data.path = "dir with space/\"quoted\" \\ file.h5";
  c.data.val_fraction = 0.25;
  c.data.synthetic_tokens = 5000000000;
  c.pipeline.pipeline_size = 2;
  c.pipeline.data_parallel = 2;
  c.pipeline.schedule = ScheduleKind::interleaved;
  c.pipeline.chunks = 2;
  c.pipeline.schedule_file = "plan.txt";
  c.pipeline.partition = PartitionKind::balanced;
  c.pipeline.recv_timeout_s = 12.5;
  c.output.metrics = "m.jsonl";
  return c;
}

void expect_same(const Config& a, const Config& b) {
  EXPECT_EQ(a.model.vocab, b.model.vocab);
  EXPECT_EQ(a.model.seq_len, b.model.seq_len);
  EXPECT_EQ(a.model.d_model, b.model.d_model);
  EXPECT_EQ(a.model.n_layers, b.model.n_layers);
  EXPECT_EQ(a.model.n_heads, b.model.n_heads);
  EXPECT_EQ(a.model.mlp_ratio, b.model.mlp_ratio);
  EXPECT_EQ(a.model.init_std, b.model.init_std);
  EXPECT_EQ(a.model.ln_eps, b.model.ln_eps);
  EXPECT_EQ(a.train.steps, b.train.steps);
  EXPECT_EQ(a.train.batch, b.train.batch);
  EXPECT_EQ(a.train.microbatches, b.train.microbatches);
  EXPECT_EQ(a.train.seed, b.train.seed);
  EXPECT_EQ(a.train.log_every, b.train.log_every);
  EXPECT_EQ(a.train.eval_every, b.train.eval_every);
  EXPECT_EQ(a.train.eval_batches, b.train.eval_batches);
  EXPECT_EQ(a.optim.kind, b.optim.kind);
  EXPECT_EQ(a.optim.lr, b.optim.lr);
  EXPECT_EQ(a.optim.min_lr, b.optim.min_lr);
  EXPECT_EQ(a.optim.warmup_steps, b.optim.warmup_steps);
  EXPECT_EQ(a.optim.decay_steps, b.optim.decay_steps);
  EXPECT_EQ(a.optim.beta1, b.optim.beta1);
  EXPECT_EQ(a.optim.beta2, b.optim.beta2);
  EXPECT_EQ(a.optim.eps, b.optim.eps);
  EXPECT_EQ(a.optim.momentum, b.optim.momentum);
  EXPECT_EQ(a.optim.weight_decay, b.optim.weight_decay);
  EXPECT_EQ(a.optim.grad_clip, b.optim.grad_clip);
  EXPECT_EQ(a.data.path, b.data.path);
  EXPECT_EQ(a.data.val_fraction, b.data.val_fraction);
  EXPECT_EQ(a.data.synthetic_tokens, b.data.synthetic_tokens);
  EXPECT_EQ(a.pipeline.pipeline_size, b.pipeline.pipeline_size);
  EXPECT_EQ(a.pipeline.data_parallel, b.pipeline.data_parallel);
  EXPECT_EQ(a.pipeline.schedule, b.pipeline.schedule);
  EXPECT_EQ(a.pipeline.chunks, b.pipeline.chunks);
  EXPECT_EQ(a.pipeline.schedule_file, b.pipeline.schedule_file);
  EXPECT_EQ(a.pipeline.partition, b.pipeline.partition);
  EXPECT_EQ(a.pipeline.recv_timeout_s, b.pipeline.recv_timeout_s);
  EXPECT_EQ(a.pipeline.dp_reduction, b.pipeline.dp_reduction);
  EXPECT_EQ(a.pipeline.dp_reduction_group, b.pipeline.dp_reduction_group);
  EXPECT_EQ(a.memory.recompute, b.memory.recompute);
  EXPECT_EQ(a.memory.limit_per_rank, b.memory.limit_per_rank);
  EXPECT_EQ(a.output.metrics, b.output.metrics);
  EXPECT_EQ(a.output.profile, b.output.profile);
}

TEST(Config, TinyPresetIsTheDefaults) { expect_same(preset("tiny"), Config{}); }

TEST(Config, SmallAndBenchPresets) {
  const Config small = preset("small");
  EXPECT_EQ(small.model.seq_len, 128);
  EXPECT_EQ(small.model.d_model, 128);
  EXPECT_EQ(small.model.n_layers, 4);
  EXPECT_EQ(small.model.n_heads, 4);
  EXPECT_EQ(small.train.batch, 16);
  EXPECT_EQ(small.train.steps, 300);
  EXPECT_EQ(small.optim.lr, 2e-3);
  EXPECT_EQ(small.optim.warmup_steps, 20);
  const Config bench = preset("bench");
  EXPECT_EQ(bench.model.n_layers, 8);
  EXPECT_EQ(bench.model.d_model, 256);
  EXPECT_EQ(bench.model.n_heads, 8);
  EXPECT_EQ(bench.model.seq_len, 128);
  EXPECT_EQ(bench.train.batch, 16);
  for (const std::string& name : preset_names()) EXPECT_NO_THROW(validate(preset(name))) << name;
}

TEST(Config, PrecedenceIsPresetThenFileThenOptions) {
  TempDir dir;
  const std::string file = dir.write("run.toml",
                                     "[model]\n"
                                     "d_model = 96   # over the preset's 128\n"
                                     "[train]\n"
                                     "steps = 7\n");
  const Config c = parse({"--preset", "small", "--config", file, "--steps", "9"}).config;
  EXPECT_EQ(c.model.n_layers, 4);   // preset
  EXPECT_EQ(c.optim.lr, 2e-3);      // preset
  EXPECT_EQ(c.model.d_model, 96);   // file over preset
  EXPECT_EQ(c.train.steps, 9);      // option over file
  EXPECT_EQ(c.model.vocab, 256);    // default
  // The order on the command line does not matter.
  EXPECT_EQ(parse({"--steps", "9", "--config", file, "--preset", "small"}).config.train.steps, 9);
}

// What the user chose, apart from what the preset gave: a program may derive the keys left to it.
TEST(Config, CommandLineNamesTheKeysGivenAndKeepsThePreset) {
  TempDir dir;
  const std::string file = dir.write("run.toml",
                                     "[optim]\n"
                                     "warmup_steps = 20   # the preset's value, given all the same\n"
                                     "[train]\n"
                                     "steps = 7\n");
  const CommandLine c = parse({"--preset", "small", "--config", file, "--steps", "9", "--optim.lr", "1e-3"});
  std::vector<std::string> given = c.given;
  std::sort(given.begin(), given.end());
  EXPECT_EQ(given, (std::vector<std::string>{"optim.lr", "optim.warmup_steps", "train.steps"}));  // each once
  expect_same(c.preset, preset("small"));
  EXPECT_EQ(c.config.optim.lr, 1e-3);
  EXPECT_TRUE(parse({"--preset", "small"}).given.empty());  // the preset gives nothing
  EXPECT_EQ(parse({"--lr", "1e-3"}).given, std::vector<std::string>{"optim.lr"});  // an alias names its key
  expect_same(parse({"--lr", "1e-3"}).preset, Config{});
}

TEST(Config, EveryKeyIsAnOptionAndALineOfTheDump) {
  // Passing every line of the dump of `changed` as --table.key VALUE rebuilds `changed`.
  const Config changed = changed_config();
  std::vector<std::string> args;
  std::istringstream dump(to_toml(changed));
  std::string line, table;
  std::vector<std::string> seen;
  while (std::getline(dump, line)) {
    if (line.empty()) continue;
    if (line.front() == '[') {
      table = line.substr(1, line.size() - 2);
      continue;
    }
    const auto equals = line.find(" = ");
    ASSERT_NE(equals, std::string::npos) << line;
    seen.push_back(table + "." + line.substr(0, equals));
    std::string value = line.substr(equals + 3);
    if (value.front() == '"') value = value.substr(1, value.size() - 2);
    args.push_back("--" + seen.back());
    args.push_back(value);
  }
  EXPECT_EQ(seen, config_keys());
  // The dump escapes quotes and backslashes; on the command line the raw value goes instead.
  for (std::size_t i = 0; i < args.size(); ++i)
    if (args[i] == "--data.path") args[i + 1] = changed.data.path;
  expect_same(parse(args).config, changed);
}

TEST(Config, ShortAliases) {
  const Config c = parse({"--data", "corpus.txt", "--steps", "3", "--seed", "42", "--batch", "12", "--microbatches",
                          "4", "--lr", "0.01", "--metrics", "out.jsonl", "--pipeline-size", "2", "--data-parallel",
                          "2", "--schedule", "gpipe", "--schedule-file", "s.txt"})
                       .config;
  EXPECT_EQ(c.data.path, "corpus.txt");
  EXPECT_EQ(c.train.steps, 3);
  EXPECT_EQ(c.train.seed, 42u);
  EXPECT_EQ(c.train.batch, 12);
  EXPECT_EQ(c.train.microbatches, 4);
  EXPECT_EQ(c.optim.lr, 0.01);
  EXPECT_EQ(c.output.metrics, "out.jsonl");
  EXPECT_EQ(c.pipeline.pipeline_size, 2);
  EXPECT_EQ(c.pipeline.data_parallel, 2);
  EXPECT_EQ(c.pipeline.schedule, ScheduleKind::gpipe);
  EXPECT_EQ(c.pipeline.schedule_file, "s.txt");
  EXPECT_EQ(parse({"--schedule", "interleaved", "--chunks", "2"}).config.pipeline.chunks, 2);
}

TEST(Config, OptionValueForms) {
  EXPECT_EQ(parse({"--train.steps=5"}).config.train.steps, 5);
  EXPECT_EQ(parse({"--steps", "5", "--steps", "6"}).config.train.steps, 6);  // the last one wins
  EXPECT_EQ(parse({"--optim.grad_clip", "-1"}).config.optim.grad_clip, -1);  // a negative value, not an option
  EXPECT_EQ(parse({"--lr", "+5e-4"}).config.optim.lr, 5e-4);
}

TEST(Config, DumpRoundTripsThroughTheFileReader) {
  TempDir dir;
  const Config changed = changed_config();
  const std::string file = dir.write("dump.toml", to_toml(changed));
  expect_same(load_config_file(file, Config{}), changed);
  EXPECT_EQ(to_toml(load_config_file(file, Config{})), to_toml(changed));
  expect_same(load_config_file(dir.write("default.toml", to_toml(Config{})), changed), Config{});
}

TEST(Config, FileTakesIntegersForFloatKeys) {
  TempDir dir;
  const Config c = load_config_file(dir.write("c.toml", "[optim]\nlr = 1\n"), Config{});
  EXPECT_EQ(c.optim.lr, 1.0);
}

TEST(Config, HelpListsEveryKeyWithItsDefault) {
  testing::internal::CaptureStdout();
  const CommandLine c = parse({"--help"});
  const std::string help = testing::internal::GetCapturedStdout();
  EXPECT_TRUE(c.exit_now);
  EXPECT_EQ(c.exit_code, 0);
  for (const std::string& key : config_keys()) EXPECT_NE(help.find("--" + key), std::string::npos) << key;
  EXPECT_NE(help.find("--preset"), std::string::npos);
  EXPECT_NE(help.find("--steps"), std::string::npos);
  EXPECT_NE(help.find("--lr,--optim.lr FLOAT=0.001"), std::string::npos) << help;  // with its default
  EXPECT_NE(help.find("}=1f1b"), std::string::npos) << help;
}

TEST(Config, ProgramsAddTheirOwnOptions) {
  bool dry_run = false;
  const auto extra = [&](CLI::App& app) { app.add_flag("--dry-run", dry_run, "parse only"); };
  EXPECT_EQ(parse({"--dry-run", "--steps", "4"}, extra).config.train.steps, 4);
  EXPECT_TRUE(dry_run);
}

TEST(Config, FileErrorsNameFileKeyAndValue) {
  TempDir dir;
  const std::string unknown = dir.write("config.toml", "[model]\ndmodel = 64\n");
  expect_input_error([&] { load_config_file(unknown, Config{}); }, {unknown, "unknown key 'model.dmodel'", "d_model"});
  const std::string wrong_type = dir.write("type.toml", "[model]\nd_model = \"abc\"\n");
  expect_input_error([&] { load_config_file(wrong_type, Config{}); },
                     {wrong_type, "model.d_model = \"abc\"", "expected an integer"});
  const std::string fraction = dir.write("float.toml", "[train]\nsteps = 2.5\n");
  expect_input_error([&] { load_config_file(fraction, Config{}); }, {"train.steps = 2.5", "integer"});
  const std::string too_big = dir.write("big.toml", "[model]\nn_layers = 99999999999\n");
  expect_input_error([&] { load_config_file(too_big, Config{}); }, {"model.n_layers = 99999999999"});
  const std::string negative_seed = dir.write("seed.toml", "[train]\nseed = -1\n");
  expect_input_error([&] { load_config_file(negative_seed, Config{}); }, {"train.seed = -1"});
  const std::string kind = dir.write("kind.toml", "[optim]\nkind = \"adam\"\n");
  expect_input_error([&] { load_config_file(kind, Config{}); }, {"optim.kind = \"adam\"", "adamw, sgd"});
  const std::string table = dir.write("table.toml", "[modle]\nd_model = 64\n");
  expect_input_error([&] { load_config_file(table, Config{}); }, {"unknown table 'modle'", "model"});
  const std::string top = dir.write("top.toml", "steps = 5\n");
  expect_input_error([&] { load_config_file(top, Config{}); }, {"unknown key 'steps'", "[train]"});
  const std::string lr = dir.write("lr.toml", "lr = 0.1\n");
  expect_input_error([&] { load_config_file(lr, Config{}); }, {"unknown key 'lr'", "[optim]"});
  const std::string array = dir.write("array.toml", "[[model]]\nd_model = 64\n");
  expect_input_error([&] { load_config_file(array, Config{}); }, {"'model' must be a table"});
  const std::string syntax = dir.write("syntax.toml", "[model]\nd_model = = 3\n");
  expect_input_error([&] { load_config_file(syntax, Config{}); }, {syntax + ":2:"});
  expect_input_error([&] { load_config_file(dir.path("absent.toml"), Config{}); },
                     {"absent.toml", "cannot open (No such file or directory)"});
}

TEST(Config, CommandLineErrorsNameOptionAndValue) {
  TempDir dir;
  expect_input_error([] { parse({"--preset", "huge"}); }, {"--preset = huge: expected one of tiny, small, bench"});
  expect_input_error([&] { parse({"--config", dir.path("x.toml")}); }, {"--config = ", "x.toml: cannot open"});
  expect_input_error([] { parse({"--model.dmodel", "256"}); }, {"unknown option '--model.dmodel'", "--model.d_model"});
  expect_input_error([] { parse({"--model.dmodel=256"}); }, {"unknown option '--model.dmodel'"});
  expect_input_error([] { parse({"stray"}); }, {"unexpected argument 'stray'"});
  expect_input_error([] { parse({"--steps", "abc"}); }, {"--train.steps = abc: expected an integer"});
  expect_input_error([] { parse({"--steps", "12x"}); }, {"--train.steps = 12x"});
  expect_input_error([] { parse({"--model.d_model", "99999999999"}); }, {"--model.d_model = 99999999999"});
  expect_input_error([] { parse({"--seed", "-3"}); }, {"--train.seed = -3"});
  expect_input_error([] { parse({"--lr", "fast"}); }, {"--optim.lr = fast: expected a number"});
  expect_input_error([] { parse({"--schedule", "zigzag"}); }, {"--pipeline.schedule = zigzag", "1f1b"});
  expect_input_error([] { parse({"--optim.kind", "lion"}); }, {"--optim.kind = lion", "adamw, sgd"});
  expect_input_error([] { parse({"--recompute", "everything"}); }, {"--memory.recompute = everything", "block"});
  expect_input_error([] { parse({"--pipeline.partition", "random"}); }, {"--pipeline.partition = random", "balanced"});
  expect_input_error([] { parse({"--steps"}); }, {"--steps"});
}

struct Invalid {
  std::function<void(Config&)> change;
  std::vector<std::string> parts;  // what the message must contain
};

TEST(Config, ValidationNamesKeysAndValues) {
  const std::vector<Invalid> cases = {
      {[](Config& c) { c.model.d_model = 250, c.model.n_heads = 8; },
       {"model.d_model = 250 is not divisible by model.n_heads = 8"}},
      {[](Config& c) { c.train.batch = 10, c.train.microbatches = 4; },
       {"train.batch = 10 is not divisible by train.microbatches = 4"}},
      {[](Config& c) { c.train.batch = 8, c.train.microbatches = 2, c.pipeline.data_parallel = 4; },
       {"train.microbatches = 2 is not divisible by pipeline.data_parallel = 4"}},
      {[](Config& c) { c.model.seq_len = 1; }, {"model.seq_len = 1"}},
      {[](Config& c) { c.model.vocab = 100; }, {"model.vocab = 100"}},
      {[](Config& c) { c.model.n_layers = 0; }, {"model.n_layers = 0"}},
      {[](Config& c) { c.model.init_std = -0.5; }, {"model.init_std = -0.5"}},
      {[](Config& c) { c.train.batch = 0; }, {"train.batch = 0"}},
      {[](Config& c) { c.train.steps = -1; }, {"train.steps = -1"}},
      {[](Config& c) { c.train.eval_every = -1; }, {"train.eval_every = -1"}},
      {[](Config& c) { c.optim.lr = 0; }, {"optim.lr = 0.0"}},
      {[](Config& c) { c.optim.min_lr = 0.5; }, {"optim.min_lr = 0.5"}},
      {[](Config& c) { c.optim.beta2 = 1.0; }, {"optim.beta2 = 1.0"}},
      {[](Config& c) { c.optim.weight_decay = -0.1; }, {"optim.weight_decay = -0.1"}},
      {[](Config& c) { c.data.val_fraction = 1.5; }, {"data.val_fraction = 1.5"}},
      {[](Config& c) { c.data.val_fraction = 0; }, {"data.val_fraction = 0.0"}},
      {[](Config& c) { c.data.synthetic_tokens = 0; }, {"data.synthetic_tokens = 0"}},
      {[](Config& c) { c.pipeline.pipeline_size = 0; }, {"pipeline.pipeline_size = 0"}},
      {[](Config& c) { c.pipeline.chunks = 2; }, {"pipeline.chunks = 2", "interleaved"}},
      {[](Config& c) { c.pipeline.pipeline_size = 5; }, {"pipeline.pipeline_size", "5", "model.n_layers + 2 = 4"}},
      {[](Config& c) { c.pipeline.recv_timeout_s = 0; }, {"pipeline.recv_timeout_s = 0.0"}},
      // Past 9.2e9 s the steady clock's nanoseconds overflow: refused, with the longest wait named.
      {[](Config& c) { c.pipeline.recv_timeout_s = 1e300; }, {"pipeline.recv_timeout_s = 1e+300", "(0, 1e+06]"}},
      {[](Config& c) { c.pipeline.recv_timeout_s = 1e6 + 1; }, {"pipeline.recv_timeout_s = 1000001.0"}},
      {[](Config& c) { c.pipeline.recv_timeout_s = HUGE_VAL; }, {"pipeline.recv_timeout_s = inf"}},
      {[](Config& c) { c.pipeline.recv_timeout_s = std::nan(""); }, {"pipeline.recv_timeout_s = nan"}},
      {[](Config& c) { c.pipeline.dp_reduction_group = 0; }, {"pipeline.dp_reduction_group = 0"}},
      {[](Config& c) { c.train.batch = 8, c.train.microbatches = 8, c.pipeline.data_parallel = 2,
                       c.pipeline.dp_reduction_group = 3; },
       {"pipeline.dp_reduction_group = 3 does not divide the 4 micro-batches per replica"}},
      {[](Config& c) { c.memory.limit_per_rank = "lots"; }, {"memory.limit_per_rank = 'lots'", "6GiB"}},
      {[](Config& c) { c.memory.limit_per_rank = "-1GiB"; }, {"memory.limit_per_rank = '-1GiB'"}},
  };
  for (const Invalid& invalid : cases) {
    Config c;
    invalid.change(c);
    expect_input_error([&] { validate(c); }, invalid.parts);
  }
  // zb-v takes its two chunks like interleaved does; sizes with units are limits.
  Config v;
  v.pipeline.schedule = ScheduleKind::zb_v;
  v.pipeline.chunks = 2;
  v.memory.limit_per_rank = "1.5GiB";
  EXPECT_NO_THROW(validate(v));
  // The command line validates too.
  expect_input_error([] { parse({"--model.d_model", "250", "--model.n_heads", "8"}); }, {"model.d_model = 250"});
}

}  // namespace
}  // namespace kpipe
