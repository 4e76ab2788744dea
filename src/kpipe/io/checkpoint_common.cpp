#include "kpipe/io/checkpoint_common.hpp"

#include <fmt/format.h>

#include <ctime>
#include <exception>
#include <filesystem>

#include "kpipe/comm/agree.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/core/hash.hpp"
#include "kpipe/io/checkpoint_store.hpp"

namespace kpipe::io::detail {

namespace fs = std::filesystem;

namespace {

// Kinds of agreed failure.
enum : int { failed_input = 1, failed_corrupt = 2 };

}  // namespace

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

void collectively(MPI_Comm world, double timeout_s, const std::string& what, const std::function<void()>& fn) {
  comm::Failure mine;
  try {
    fn();
  } catch (const CorruptCheckpoint& e) {
    mine = {failed_corrupt, -1, e.what()};
  } catch (const InputError& e) {
    mine = {failed_input, -1, e.what()};
  } catch (const std::exception& e) {  // file-system errors: the checkpoint directory is unusable
    mine = {failed_input, -1, fmt::format("checkpoint: {}", e.what())};
  }
  const comm::Failure agreed = comm::first_failure(world, mine, {timeout_s, what});
  if (agreed.code == failed_corrupt) throw CorruptCheckpoint(agreed.message);
  if (agreed) throw InputError(agreed.message);
}

void check_identity(const CheckpointReader& reader, const Expected* expected) {
  const std::int64_t step = reader.number("step");
  const std::string name = fs::path(reader.path()).filename().string();
  const std::int64_t named = step_of_file_name(name);
  if (named >= 0 && named != step)
    throw CorruptCheckpoint(fmt::format("checkpoint file '{}' holds step {}, not the step {} its name says (a file of "
                                        "another step put in its place?)",
                                        reader.path(), step, named));
  if (!expected) return;
  if (expected->step >= 0 && step != expected->step)
    throw CorruptCheckpoint(fmt::format("checkpoint file '{}' holds step {}, not the step {} it held when it was chosen "
                                        "to resume from (replaced since)",
                                        reader.path(), step, expected->step));
  const std::string run = reader.text("run_id");
  if (!expected->run_id.empty() && run != expected->run_id)
    throw CorruptCheckpoint(fmt::format("checkpoint file '{}' belongs to run {}, not to run {} whose `latest` names "
                                        "it (a file of another run put in its place?)",
                                        reader.path(), run, expected->run_id));
  if (expected->manifest_hash != 0 && reader.manifest_hash() != expected->manifest_hash)
    throw CorruptCheckpoint(fmt::format("checkpoint file '{}' is not the one `latest` recorded (manifest hash {}, "
                                        "recorded {}): replaced since it was written",
                                        reader.path(), hash_hex(reader.manifest_hash()),
                                        hash_hex(expected->manifest_hash)));
}
}  // namespace kpipe::io::detail
