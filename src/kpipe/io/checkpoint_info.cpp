// What a checkpoint file says about itself, and which file a path names.
#include "kpipe/io/checkpoint.hpp"

#include <fmt/format.h>

#include <filesystem>

#include "kpipe/core/config_io.hpp"
#include "kpipe/core/files.hpp"

namespace kpipe::io {

namespace fs = std::filesystem;

void validate_checkpoint_config(const CheckpointConfig& config) {
  require(config.keep >= 2, "checkpoint.keep = {}: expected an integer >= 2", config.keep);
  require(config.every >= 0, "checkpoint.every = {}: expected an integer >= 0", config.every);
  require(config.resume != "latest" || !config.dir.empty(),
          "checkpoint.resume = \"latest\" needs checkpoint.dir (--checkpoint-dir)");
  require(config.every == 0 || !config.dir.empty(), "checkpoint.every = {} needs checkpoint.dir (--checkpoint-dir)",
          config.every);
}

std::string checkpoint_file_of(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    require(!fs::is_regular_file(fs::path(path) / "checkpoint.h5", ec),
            "checkpoint '{}': a checkpoint of format_version 1 (a step-<N> directory of per-rank files, written by an "
            "earlier kpipe), which this kpipe does not read: it reads format_version {} (one step-<N>.h5 file), "
            "whose metadata carries a checksum",
            path, checkpoint_format_version);
    const Latest latest = read_latest(path);
    if (latest.found) {
      const std::string file = (fs::path(path) / latest.name).string();
      require(fs::is_regular_file(file, ec), "checkpoint '{}': `latest` names {}, which is not there", path,
              latest.name);
      return file;
    }
    const auto files = checkpoint_files(path);
    if (!files.empty()) return files.back().path;
    const auto old = old_format_checkpoints(path);
    require(old.empty(),
            "checkpoint '{}': holds only checkpoints of format_version 1 ({} ...), which this kpipe does not read "
            "(it reads format_version {})",
            path, fs::path(old.empty() ? "" : old.front().path).filename().string(), checkpoint_format_version);
    throw InputError(fmt::format("checkpoint '{}': no complete checkpoint there", path));
  }
  const std::string name = fs::path(path).filename().string();
  require(name.size() < 4 || name.compare(name.size() - 4, 4, ".tmp") != 0,
          "checkpoint '{}': an incomplete checkpoint (still being written, or its writer was killed)", path);
  if (!fs::exists(path, ec) && fs::is_regular_file(path + ".h5", ec)) return path + ".h5";  // "ck/step-00000004"
  require(fs::exists(path, ec), "checkpoint '{}': no such file or directory", path);
  // A FIFO, a device or a file this process cannot read is bad input, not a damaged checkpoint.
  if (const std::string reason = unreadable_reason(path); !reason.empty())
    throw InputError(fmt::format("checkpoint '{}': cannot open ({})", path, reason));
  return path;
}

CheckpointInfo read_checkpoint_info(const std::string& path) {
  const CheckpointReader reader(checkpoint_file_of(path));
  CheckpointInfo info;
  info.path = reader.path();
  info.step = reader.number("step");
  info.format_version = reader.format_version();
  info.run_id = reader.text("run_id");
  info.kpipe_version = reader.text("kpipe_version");
  info.created = reader.text("created");
  info.config_toml = reader.text("config");
  info.schedule = reader.text("schedule");
  info.scalar_type = reader.text("scalar_type");
  if (reader.has("/", "precision")) info.precision = reader.text("precision");
  info.pipeline_size = int(reader.number("pipeline_size"));
  info.data_parallel = int(reader.number("data_parallel"));
  info.chunks = int(reader.number("chunks"));
  info.tensors = reader.number("tensors");
  info.manifest_hash = reader.manifest_hash();
  if (reader.has("/", "state_hash")) info.state_hash = reader.text("state_hash");
  return info;
}

Config checkpoint_config(const std::string& path) {
  const CheckpointInfo info = read_checkpoint_info(path);
  try {
    return parse_config(info.config_toml, "config", Config{});
  } catch (const InputError& e) {
    throw InputError(fmt::format("checkpoint '{}': config attribute: {}", path, e.what()));
  }
}

}  // namespace kpipe::io
