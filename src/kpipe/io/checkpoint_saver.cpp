#include "kpipe/io/checkpoint_saver.hpp"

#include <fmt/format.h>
#include <mpi.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <csignal>
#include <exception>
#include <stdexcept>

#include "kpipe/core/clock.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/core/exit_codes.hpp"
#include "kpipe/core/memory_category.hpp"
#include "kpipe/core/precisions.hpp"

namespace kpipe::io {

namespace {

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    default: return "MPI_THREAD_MULTIPLE";
  }
}

// Why checkpoints cannot be written beside the training here, or "".
std::string why_not_beside() {
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  if (provided >= MPI_THREAD_MULTIPLE) return "";
  return fmt::format("the MPI library provides {}, and a write beside the training runs its collectives from a "
                     "thread of its own, which needs MPI_THREAD_MULTIPLE",
                     thread_level_name(provided));
}

// The snapshot's copies on an execution space instance of their own (a stream of its own on a GPU), so that
// they wait for no work queued on the training's.
ExecSpace own_instance() {
#if defined(KOKKOS_ENABLE_CUDA) && KOKKOS_VERSION >= 40000
  return Kokkos::Experimental::partition_space(ExecSpace(), 1)[0];
#else
  return ExecSpace();
#endif
}

}  // namespace

std::string settle_async_checkpoints(CheckpointConfig& config) {
  if (config.dir.empty()) config.async = CheckpointAsync::off;
  if (config.async == CheckpointAsync::off) return "";
  const std::string why = why_not_beside();
  if (why.empty()) return "";
  require(config.async != CheckpointAsync::on, "checkpoint.async = on: {}; set it to auto or off", why);
  config.async = CheckpointAsync::off;
  return fmt::format("checkpoint.async = auto: checkpoints are written while the training waits: {}", why);
}

template <class T, class A>
CheckpointSaver<T, A>::CheckpointSaver(runtime::StageModel<T, A>& stage, const data::Tokenizer& tokenizer,
                                       CheckpointDir& dir)
    : stage_(&stage), tokenizer_(&tokenizer), dir_(&dir),
      background_(stage.config().checkpoint.async != CheckpointAsync::off), copy_space_(own_instance()) {
  if (!background_) return;
  const std::string why = why_not_beside();
  require(why.empty(), "checkpoint.async = {}: {}", stage.config().checkpoint.async, why);
  // memory/plan.cpp counts it; the other replicas hold none (an empty View would still take a block).
  const std::size_t capacity = detail::snapshot_capacity(stage);
  const memory::Scope scope(memory::Category::snapshot);
  if (capacity > 0) buffer_ = Kokkos::View<T*, PinnedSpace>("kpipe::io::CheckpointSaver::snapshot", capacity);
}

template <class T, class A> CheckpointSaver<T, A>::~CheckpointSaver() {
  if (thread_.joinable()) thread_.join();
}

template <class T, class A> detail::Snapshot<T> CheckpointSaver<T, A>::snapshot(std::int64_t step, T* memory) {
  ExecSpace().fence();  // the training's last update of the state is done
  const double start = seconds_now();
  detail::Snapshot<T> s = detail::take_snapshot(*stage_, step, *tokenizer_, memory, copy_space_);
  spans_.push_back({CheckpointSpan::Kind::snapshot, step, start, seconds_now(),
                    std::int64_t(s.in_place ? 0 : s.elements * sizeof(T))});
  return s;
}

template <class T, class A> SaveResult CheckpointSaver<T, A>::write(std::int64_t step) {
  if (in_flight()) throw std::logic_error("CheckpointSaver::write: a write is in flight (finish it first)");
  const auto waiting = background_ ? nullptr : detail::waiting_snapshot_memory(*stage_);
  const detail::Snapshot<T> s = snapshot(step, background_ ? buffer_.data() : waiting.get());
  write_start_ = seconds_now();
  SaveResult result = detail::write_snapshot(s, *dir_);
  write_end_ = seconds_now();
  spans_.push_back({CheckpointSpan::Kind::write, step, write_start_, write_end_, std::int64_t(s.elements * sizeof(T))});
  return result;
}

template <class T, class A> void CheckpointSaver<T, A>::start(std::int64_t step) {
  if (!background_ || in_flight())
    throw std::logic_error("CheckpointSaver::start: not beside the training, or a write is in flight");
  in_flight_ = snapshot(step, buffer_.data());
  in_flight_step_ = step;
  ended_.store(false, std::memory_order_release);
  // The stop signals go to the training's thread (they are acted on at its step boundaries).
  sigset_t stops, previous;
  sigemptyset(&stops);
  sigaddset(&stops, SIGUSR1);
  sigaddset(&stops, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stops, &previous);
  thread_ = std::thread([this] { run_write(); });
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
}

template <class T, class A> void CheckpointSaver<T, A>::run_write() {
  // The write takes the processor time the training leaves (hashing a rank's share is most of its own): on a
  // node whose cores all train, it runs in the pipeline's waits instead of slowing the steps. (Linux: the
  // nice value is a thread's own.)
  setpriority(PRIO_PROCESS, id_t(::syscall(SYS_gettid)), 19);
  write_start_ = seconds_now();
  try {
    result_ = detail::write_snapshot(in_flight_, *dir_);
  } catch (const std::exception& e) {  // one rank's alone: the others wait in a collective for it
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    abort_job(ExitCode::failure, fmt::format("kpipe: rank {}: writing checkpoint {} beside the training: {}", rank,
                                             checkpoint_file_name(in_flight_step_), e.what()));
  }
  write_end_ = seconds_now();
  ended_.store(true, std::memory_order_release);
}

template <class T, class A> SaveResult CheckpointSaver<T, A>::finish() {
  if (!in_flight()) throw std::logic_error("CheckpointSaver::finish: no write in flight");
  const double start = seconds_now();
  const bool waits = writing();
  thread_.join();
  waited_seconds_ = waits ? seconds_now() - start : 0;
  if (waits) spans_.push_back({CheckpointSpan::Kind::wait, in_flight_step_, start, start + waited_seconds_, 0});
  spans_.push_back({CheckpointSpan::Kind::write, in_flight_step_, write_start_, write_end_,
                    std::int64_t(in_flight_.elements * sizeof(T))});
  in_flight_step_ = -1;
  return std::exchange(result_, {});
}

#define KPIPE_INSTANTIATE(T, A) template class CheckpointSaver<T, A>;
KPIPE_TRAINING_PRECISIONS(KPIPE_INSTANTIATE)
#undef KPIPE_INSTANTIATE

}  // namespace kpipe::io
