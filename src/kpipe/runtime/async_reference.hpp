#pragma once
// The single-process reference of the asynchronous semantics (schedule/asynchronous.hpp, async_rules.hpp):
// the whole model in one process, split into the run's stages, trained micro-batch by micro-batch in order,
// without MPI and independently of the schedule's action lists. For micro-batch k each stage s binds the
// version the rule gives it (rule_version), the forward runs down the stages and the backward up them on those
// versions (weight stashing), with data-parallel replicas each replica's micro-batch k in turn, and each
// stage's update (after every micro-batch, or a 2bw window's last; of the replicas' gradients added in replica
// order) produces the next version from the newest one. Nothing here needs a version not yet computed, since the
// rule reads only versions produced by updates of earlier micro-batches.
//
// Every layout of kpipe-train must reproduce its losses and its param_checksum bit for bit
// (tests/mpi/test_asynchronous.cpp); with p = 1, pipedream is plain training with one micro-batch per step.
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "kpipe/core/config.hpp"
#include "kpipe/data/corpus.hpp"
#include "kpipe/model/chunk.hpp"
#include "kpipe/model/desc.hpp"
#include "kpipe/runtime/async_rules.hpp"

namespace kpipe::runtime {

template <class T, class A = T> class AsyncReference {
 public:
  // config: pipeline.schedule pipedream or 2bw, pipeline.pipeline_size stages, partitioned as a run would.
  AsyncReference(const Config& config, const data::Corpus& corpus);
  ~AsyncReference();

  struct StepResult {
    double loss = 0;       // mean per-token loss of the step's m micro-batches
    double grad_norm = 0;  // sqrt of the sum over stages of their last update's squared norm
    std::vector<double> microbatch_losses;  // each micro-batch's mean per-token loss (AsyncRules::loss_index)
  };
  StepResult step();  // the next m micro-batches, each with its updates
  std::int64_t next_step() const { return step_; }
  std::uint64_t param_checksum() const;  // of the newest weights, as Trainer::param_checksum
  int stages() const { return int(chunks_.size()); }
  int peak_versions(int stage) const { return peak_versions_.at(stage); }  // most versions held at once
  // The version micro-batch k read on each stage (every k so far).
  const std::vector<std::vector<int>>& versions_read() const { return versions_read_; }

 private:
  void bind(int stage, int version);  // the stage's live weights become `version`
  void forget_unneeded(int stage, std::int64_t next_microbatch);
  // Replica r's micro-batch k forward and backward through every stage on the versions `read`; its loss sum.
  void run_microbatch(std::int64_t k, int replica, const std::vector<int>& read, double& loss_sum);

  Config config_;
  const data::Corpus* corpus_;
  model::ModelDesc desc_;
  AsyncRules rules_;
  ExecSpace space_;
  std::vector<std::unique_ptr<model::Chunk<T, A>>> chunks_;
  std::vector<int> slots_;
  std::vector<std::map<int, View1<T>>> versions_;  // per stage: version -> weights (the newest included)
  std::vector<int> newest_, live_;                 // per stage: the newest version, the one in the live buffer
  std::vector<int> peak_versions_;
  std::vector<std::vector<int>> versions_read_;
  std::int64_t step_ = 0, microbatch_ = 0;
  double last_squares_sum_ = 0;
  std::vector<double> last_squares_;
  std::vector<std::vector<View1<T>>> replica_grads_;  // several replicas: per stage and replica, its gradients
};

}  // namespace kpipe::runtime
