#pragma once
// A trainer's checkpoint written and read back through the stage model, as kpipe-train does it: what the
// checkpoint tests need in one place.
#include <string>

#include "kpipe/io/checkpoint.hpp"
#include "kpipe/runtime/trainer.hpp"

namespace kpipe::test {

template <class T, class A> io::SaveResult save(runtime::Trainer<T, A>& trainer, io::CheckpointDir& dir) {
  return io::save_checkpoint(trainer.stage(), trainer.next_step(), trainer.corpus().tokenizer, dir);
}

// Loads into the trainer's stage and resumes the trainer at the checkpoint's step.
template <class T, class A> io::LoadedCheckpoint<T> load(runtime::Trainer<T, A>& trainer, const std::string& path) {
  auto loaded = io::load_checkpoint(trainer.stage(), path);
  trainer.resume(loaded.step, loaded.older);
  return loaded;
}

// checkpoint.resume applied to the trainer (nothing loaded: the trainer is left as it was): the checkpoint chosen,
// loaded, resumed from. A synchronous trainer resumes at any step; an asynchronous one only at the first step it
// was built with (kpipe-train chooses before building it).
template <class T, class A>
io::LoadedCheckpoint<T> resume(runtime::Trainer<T, A>& trainer, const CheckpointConfig& config) {
  const auto point = io::choose_resume_point(config, trainer.stage().grid().world, trainer.config().pipeline.recv_timeout_s);
  auto loaded = io::load_resume_point(trainer.stage(), point);
  if (!loaded.path.empty()) trainer.resume(loaded.step, loaded.older);
  return loaded;
}

}  // namespace kpipe::test
