// Activation traces: device statistics against a host computation, non-finite values, layer selection,
// extendible datasets that grow per traced step, and a real (one-rank) training run traced end to end.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "data/temp_dir.hpp"
#include "kpipe/comm/grid.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/data/synthetic.hpp"
#include "kpipe/h5/file.hpp"
#include "kpipe/io/trace.hpp"
#include "kpipe/runtime/trainer.hpp"
#include "support/corpus.hpp"
#include "support/tiny_config.hpp"

namespace kpipe {
namespace {

template <class T> View2<T> device_tensor(const std::vector<double>& values, std::int64_t rows, std::int64_t cols) {
  View2<T> x("x", rows, cols);
  auto host = Kokkos::create_mirror_view(x);
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) host(i, j) = T(values[i * cols + j]);
  Kokkos::deep_copy(x, host);
  return x;
}

// The reference: the same statistics in the plainest host code, over the finite values.
io::TensorStats host_stats(const std::vector<double>& values) {
  io::TensorStats s;
  double sum = 0, lo = INFINITY, hi = -INFINITY;
  std::size_t finite = 0;
  for (double v : values)
    if (std::isfinite(v)) sum += v, lo = std::min(lo, v), hi = std::max(hi, v), ++finite;
  s.mean = sum / double(finite);
  double squares = 0;
  for (double v : values)
    if (std::isfinite(v)) squares += (v - s.mean) * (v - s.mean);
  s.std = std::sqrt(squares / double(finite));
  s.min = lo;
  s.max = hi;
  s.absmax = std::max(std::fabs(lo), std::fabs(hi));
  s.nonfinite_fraction = double(values.size() - finite) / double(values.size());
  return s;
}

std::vector<double> random_values(std::size_t n, double shift, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(shift, 3.0);
  std::vector<double> v(n);
  for (double& x : v) x = normal(rng);
  return v;
}

void expect_stats_near(const io::TensorStats& got, const io::TensorStats& want, double tolerance) {
  EXPECT_NEAR(got.mean, want.mean, tolerance * (1 + std::fabs(want.mean)));
  EXPECT_NEAR(got.std, want.std, tolerance * want.std);
  EXPECT_EQ(got.min, want.min);
  EXPECT_EQ(got.max, want.max);
  EXPECT_EQ(got.absmax, want.absmax);
  EXPECT_EQ(got.nonfinite_fraction, want.nonfinite_fraction);
}

TEST(TensorStats, MatchesHostComputationInDouble) {
  const auto values = random_values(37 * 19, -1.5, 1);
  const auto x = device_tensor<double>(values, 37, 19);
  expect_stats_near(io::tensor_stats<double>(ExecSpace(), x), host_stats(values), 1e-12);
}

TEST(TensorStats, MatchesHostComputationInFloat) {
  auto values = random_values(64 * 8, 2.0, 2);
  for (double& v : values) v = double(float(v));  // what the float tensor holds
  const auto x = device_tensor<float>(values, 64, 8);
  const auto got = io::tensor_stats<float>(ExecSpace(), x);
  expect_stats_near(got, host_stats(values), 1e-12);  // accumulated in double
  EXPECT_GT(got.absmax, 5.0);  // shifted normal with std 3: not a degenerate tensor
}

TEST(TensorStats, InjectedNonFiniteValuesShowAsTheirFraction) {
  auto values = random_values(10 * 10, 0.0, 3);
  values[7] = std::numeric_limits<double>::quiet_NaN();
  values[42] = INFINITY;
  values[99] = -INFINITY;
  const auto x = device_tensor<float>(values, 10, 10);
  const auto got = io::tensor_stats<float>(ExecSpace(), x);
  EXPECT_DOUBLE_EQ(got.nonfinite_fraction, 0.03);
  // The other statistics stay those of the finite values.
  std::vector<double> as_float(values.size());
  for (std::size_t k = 0; k < values.size(); ++k) as_float[k] = double(float(values[k]));
  expect_stats_near(got, host_stats(as_float), 1e-12);
  EXPECT_TRUE(std::isfinite(got.mean));
}

TEST(TensorStats, AllNonFiniteGivesNaNStatistics) {
  const std::vector<double> values(6, std::numeric_limits<double>::quiet_NaN());
  const auto got = io::tensor_stats<double>(ExecSpace(), device_tensor<double>(values, 2, 3));
  EXPECT_EQ(got.nonfinite_fraction, 1.0);
  EXPECT_TRUE(std::isnan(got.mean) && std::isnan(got.absmax));
}

TEST(LayerSelection, IndicesRangesAndGlobs) {
  EXPECT_TRUE(io::LayerSelection("all").contains(0));
  EXPECT_TRUE(io::LayerSelection("*").contains(123));
  const io::LayerSelection s("1, 3-4,layers/1?");
  EXPECT_FALSE(s.contains(0));
  EXPECT_TRUE(s.contains(1));
  EXPECT_FALSE(s.contains(2));
  EXPECT_TRUE(s.contains(3));
  EXPECT_TRUE(s.contains(4));
  EXPECT_FALSE(s.contains(5));
  EXPECT_TRUE(s.contains(10));
  EXPECT_TRUE(s.contains(19));
  EXPECT_FALSE(s.contains(20));
  EXPECT_TRUE(io::LayerSelection("layers/0*").contains(7));
  EXPECT_FALSE(io::LayerSelection("layers/0*").contains(12));
  for (const char* bad : {"", "x", "3-", "5-2", "1,,2", "-1"}) {
    EXPECT_THROW(io::LayerSelection{bad}, InputError) << bad;
    try {
      io::LayerSelection{bad};
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("output.trace_layers"), std::string::npos) << e.what();
    }
  }
}

TEST(Glob, Matches) {
  EXPECT_TRUE(io::glob_match("layers/*", "layers/07"));
  EXPECT_TRUE(io::glob_match("*7", "layers/07"));
  EXPECT_TRUE(io::glob_match("l*s/?7", "layers/07"));
  EXPECT_FALSE(io::glob_match("layers/?", "layers/07"));
  EXPECT_FALSE(io::glob_match("layers/08", "layers/07"));
  EXPECT_TRUE(io::glob_match("**", ""));
}

io::TraceRow row(int layer, io::TraceKind kind, std::int64_t step, int mb, double mean) {
  io::TraceRow r;
  r.layer = layer;
  r.kind = kind;
  r.step = step;
  r.microbatch = mb;
  r.stats = {mean, 1, -2, 3, 3, 0.25};
  return r;
}

TEST(TraceWriter, DatasetsGrowByOneRowPerMicrobatchEachStep) {
  test::TempDir dir;
  const auto path = dir.path("trace.h5");
  {
    io::TraceInfo info;
    info.every = 2;
    info.microbatches = 2;
    info.model_layers = 4;
    io::TraceWriter writer(path, info);
    // Out of order on purpose: the writer sorts.
    writer.append({row(2, io::TraceKind::gradient, 0, 1, 5), row(2, io::TraceKind::output, 0, 1, 2),
                   row(2, io::TraceKind::output, 0, 0, 1), row(2, io::TraceKind::gradient, 0, 0, 4)});
    auto after_one = io::read_trace(path);
    ASSERT_EQ(after_one.series.size(), 2u);
    EXPECT_EQ(after_one.series[0].steps.size(), 2u);
    writer.append({row(2, io::TraceKind::output, 2, 0, 7), row(2, io::TraceKind::output, 2, 1, 8),
                   row(2, io::TraceKind::gradient, 2, 0, 9), row(2, io::TraceKind::gradient, 2, 1, 10)});
  }
  const auto trace = io::read_trace(path);
  EXPECT_EQ(trace.info.every, 2);
  ASSERT_EQ(trace.series.size(), 2u);
  const auto& out = trace.series[0];
  EXPECT_EQ(out.layer, 2);
  EXPECT_EQ(out.kind, io::TraceKind::output);
  EXPECT_EQ(out.steps, (std::vector<std::int64_t>{0, 0, 2, 2}));
  EXPECT_EQ(out.microbatches, (std::vector<std::int64_t>{0, 1, 0, 1}));
  EXPECT_EQ(out.stats[0].mean, 1);
  EXPECT_EQ(out.stats[3].mean, 8);
  EXPECT_EQ(out.stats[3].nonfinite_fraction, 0.25);
  EXPECT_EQ(trace.series[1].stats[1].mean, 5);

  // The dataset is chunked and extendible without bound, compressed when the library can.
  const auto file = h5::open_file(path);
  const h5::Handle dataset(H5Dopen2(file.get(), "layers/02/output/stats", H5P_DEFAULT), H5Dclose);
  ASSERT_TRUE(dataset.valid());
  const h5::Handle space(H5Dget_space(dataset.get()), H5Sclose);
  hsize_t dims[2], max_dims[2];
  H5Sget_simple_extent_dims(space.get(), dims, max_dims);
  EXPECT_EQ(dims[0], 4u);
  EXPECT_EQ(dims[1], 6u);
  EXPECT_EQ(max_dims[0], H5S_UNLIMITED);
  const h5::Handle properties(H5Dget_create_plist(dataset.get()), H5Pclose);
  EXPECT_EQ(H5Pget_layout(properties.get()), H5D_CHUNKED);
  if (h5::deflate_available()) {
    unsigned flags = 0;
    size_t elements = 0;
    unsigned values[4];
    EXPECT_GE(H5Pget_filter_by_id2(properties.get(), H5Z_FILTER_DEFLATE, &flags, &elements, values, 0, nullptr,
                                   nullptr),
              0);
  }
}

TEST(TraceFileErrors, NamesTheFile) {
  test::TempDir dir;
  const auto text = dir.write("not.h5", "hello");
  try {
    io::read_trace(text);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("not.h5: not an HDF5 file"), std::string::npos) << e.what();
  }
  EXPECT_THROW(io::read_trace(dir.path("missing.h5")), InputError);
}

TEST(ActivationTracer, TracesEveryKthStepOfATrainingRun) {
  test::TempDir dir;
  Config c = test::tiny_config(4);
  c.output.trace = dir.path("run.h5");
  c.output.trace_every = 2;
  c.output.trace_layers = "0,layers/02,3";
  c.output.trace_full = 1;
  auto grid = comm::make_grid(MPI_COMM_SELF, 1, 1);
  {
    runtime::Trainer<float> trainer(c, test::corpus(), grid);
    // A NaN in one weight of block 2 (layer 2): its output turns non-finite, the layers before stay clean.
    {
      auto& params = trainer.stage().chunk(0).params();
      auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), params.values());
      host(params.layer_range(2).first + 3) = std::numeric_limits<float>::quiet_NaN();
      Kokkos::deep_copy(params.values(), host);
    }
    io::ActivationTracer<float> tracer(trainer.stage(), trainer.plan(), io::trace_options(c));
    trainer.set_observer(tracer.observer());
    for (int s = 0; s < c.train.steps; ++s) {
      tracer.begin_step(s);
      const auto stats = trainer.step();
      EXPECT_TRUE(stats.skipped);  // the loss is NaN: no update, the NaN stays
      tracer.end_step();
    }
  }
  comm::free_grid(grid);
  const auto trace = io::read_trace(c.output.trace);
  EXPECT_EQ(trace.info.model_layers, 4);
  ASSERT_EQ(trace.series.size(), 6u);  // layers 0, 2, 3, each output and gradient
  for (const auto& series : trace.series) {
    // Steps numbered from 1, as everywhere: the multiples of trace_every, 2 and 4.
    EXPECT_EQ(series.steps, (std::vector<std::int64_t>{2, 2, 4, 4})) << series.layer;
    EXPECT_EQ(series.microbatches, (std::vector<std::int64_t>{0, 1, 0, 1})) << series.layer;
  }
  const auto& embedding = trace.series[0];
  EXPECT_EQ(embedding.layer, 0);
  EXPECT_EQ(embedding.stats[0].nonfinite_fraction, 0.0);
  EXPECT_GT(embedding.stats[0].std, 0.0);
  const auto& block = trace.series[2];
  EXPECT_EQ(block.layer, 2);
  EXPECT_EQ(block.kind, io::TraceKind::output);
  EXPECT_GT(block.stats[0].nonfinite_fraction, 0.0);
  // Full tensors of micro-batch 0: one per traced step, [tokens, channels] (the head: [tokens, vocab]).
  ASSERT_EQ(trace.full_tensors.size(), 6u);
  const auto file = h5::open_file(c.output.trace);
  EXPECT_EQ(h5::shape(file.get(), "full/layers/00/output/values"), (std::vector<hsize_t>{2, 8 * 2, 16}));
  EXPECT_EQ(h5::shape(file.get(), "full/layers/03/output/values"), (std::vector<hsize_t>{2, 8 * 2, 256}));
}

TEST(ActivationTracer, StatisticsOfAHealthyRunAreFinite) {
  test::TempDir dir;
  Config c = test::tiny_config(3);
  c.output.trace = dir.path("healthy.h5");
  auto grid = comm::make_grid(MPI_COMM_SELF, 1, 1);
  {
    runtime::Trainer<float> trainer(c, test::corpus(), grid);
    io::ActivationTracer<float> tracer(trainer.stage(), trainer.plan(), io::trace_options(c));
    trainer.set_observer(tracer.observer());
    tracer.begin_step(0);
    EXPECT_FALSE(trainer.step().skipped);
    tracer.end_step();
  }
  comm::free_grid(grid);
  const auto trace = io::read_trace(c.output.trace);
  ASSERT_EQ(trace.series.size(), 8u);  // 4 layers x (output, gradient)
  for (const auto& series : trace.series)
    for (const auto& s : series.stats) {
      EXPECT_EQ(s.nonfinite_fraction, 0.0);
      EXPECT_LE(s.min, s.mean);
      EXPECT_LE(s.mean, s.max);
      EXPECT_GT(s.absmax, 0.0);
    }
}

}  // namespace
}  // namespace kpipe
