#pragma once
// A trainer's checkpoint written and read back through the stage model, as kpipe-train does it: what the
// checkpoint tests need in one place.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <string>
#include <vector>

#include "kpipe/io/checkpoint.hpp"
#include "kpipe/runtime/trainer.hpp"

namespace kpipe::test {

// Waits for the pruning the save started (beside, CheckpointDir::start_pruning): the tests look at the
// directory as the save leaves it.
template <class T, class A> io::SaveResult save(runtime::Trainer<T, A>& trainer, io::CheckpointDir& dir) {
  io::SaveResult result = io::save_checkpoint(trainer.stage(), trainer.next_step(), trainer.corpus().tokenizer, dir);
  dir.wait_for_pruning();
  return result;
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

// One float of a stored tensor changed in place, its manifest left as it was: only reading the tensor's bytes
// finds the damage.
inline void damage_tensor(const std::string& path, const std::string& name) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0) << path;
  const hid_t dataset = H5Dopen2(file, name.c_str(), H5P_DEFAULT);
  ASSERT_GE(dataset, 0) << name;
  const hid_t space = H5Dget_space(dataset);
  std::vector<float> values(std::size_t(H5Sget_simple_extent_npoints(space)));
  ASSERT_GE(H5Dread(dataset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
  values.at(values.size() / 2) += 1.0f;
  ASSERT_GE(H5Dwrite(dataset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
  H5Sclose(space);
  H5Dclose(dataset);
  H5Fclose(file);
}

}  // namespace kpipe::test
