#pragma once
// This rank's share of the model: its chunks (the consecutive layers of each virtual stage it holds, built from
// the plan's partition and initialized from (train.seed, global layer, parameter name), so the same on every
// layout) and the weight versions each chunk keeps under an asynchronous schedule (the asynchronous update
// policy makes them). What the executor runs actions on, and what checkpoints, traces, timelines and text
// generation read: none of them needs the trainer.
#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "kpipe/comm/grid.hpp"
#include "kpipe/core/config.hpp"
#include "kpipe/model/chunk.hpp"
#include "kpipe/model/desc.hpp"
#include "kpipe/runtime/run_plan.hpp"
#include "kpipe/runtime/weight_versions.hpp"

namespace kpipe::runtime {

template <class T, class A = T> class StageModel {
 public:
  StageModel(const Config& config, const model::ModelDesc& desc, const comm::ProcessGrid& grid, const RunPlan& plan);
  ~StageModel();
  StageModel(const StageModel&) = delete;
  StageModel& operator=(const StageModel&) = delete;

  const Config& config() const { return config_; }
  const model::ModelDesc& desc() const { return *desc_; }
  const comm::ProcessGrid& grid() const { return grid_; }
  int chunks() const { return int(chunks_.size()); }
  model::Chunk<T, A>& chunk(int c) { return *chunks_.at(c); }
  const model::Chunk<T, A>& chunk(int c) const { return *chunks_.at(c); }
  std::vector<model::Chunk<T, A>*> chunk_pointers();
  int virtual_stage(int c) const { return vstages_.at(c); }
  // Asynchronous schedules: each chunk's weight versions, which their update policy makes and hands over here
  // (synchronous ones keep none: versioned() is false).
  void keep_versions(std::vector<std::unique_ptr<WeightVersions<T, A>>> versions) { versions_ = std::move(versions); }
  bool versioned() const { return !versions_.empty(); }
  WeightVersions<T, A>& versions(int c) { return *versions_.at(c); }
  const WeightVersions<T, A>& versions(int c) const { return *versions_.at(c); }
  void bind_newest();  // the parameters hold each chunk's newest version (evaluation, checksums, checkpoints)
  // At step boundary `next_step`, the versions older than the newest that chunk c's micro-batches in flight
  // read: 1 .. older_versions (none once the run's last step drained the pipeline, and for synchronous runs),
  // at most most_older_versions(c).
  int older_versions(int c, std::int64_t next_step) const;
  int most_older_versions(int c) const;
  // The master values of the version `older` updates before the newest; empty when none in flight reads it.
  View1<T> older_version(int c, int older) const;

  // Profiling (output.profile): while on, every layer's work is fenced and timed (chunk.hpp).
  void profile_layers(bool on);
  // Mean seconds per call of this rank's layers, by global layer index (zeros for others' layers): forward,
  // backward_input, backward_weight, recompute.
  std::vector<std::array<double, 4>> layer_seconds() const;

  // A hash of every parameter's bytes in global layer order, the same on every rank. Collective over the
  // pipeline (bounded by pipeline.recv_timeout_s).
  std::uint64_t param_checksum();

 private:
  Config config_;
  const model::ModelDesc* desc_;
  comm::ProcessGrid grid_;
  schedule::Updates updates_;
  int ranks_;
  std::vector<int> vstages_;
  std::vector<std::unique_ptr<model::Chunk<T, A>>> chunks_;
  std::vector<std::unique_ptr<WeightVersions<T, A>>> versions_;
  std::vector<std::vector<typename model::Chunk<T, A>::LayerTimes>> layer_times_;  // per chunk, while profiling
  ExecSpace space_;
};

}  // namespace kpipe::runtime
