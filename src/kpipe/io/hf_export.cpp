#include "kpipe/io/hf_export.hpp"

#include <fmt/format.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <system_error>

#include "kpipe/core/error.hpp"
#include "kpipe/core/files.hpp"
#include "kpipe/data/hf_tokenizer.hpp"
#include "kpipe/io/checkpoint.hpp"
#include "kpipe/io/checkpoint_file.hpp"
#include "kpipe/io/checkpoint_tokenizer.hpp"
#include "kpipe/io/hf_gpt2.hpp"
#include "kpipe/io/safetensors.hpp"

namespace kpipe::io {

namespace fs = std::filesystem;

namespace {

constexpr const char* partial = ".partial";

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) throw std::system_error(errno, std::generic_category(), fmt::format("'{}': cannot write", path));
  fsync_path(path);
}

}  // namespace

ExportSummary export_to_hf(const std::string& checkpoint, const std::string& dir, const std::string& dtype) {
  require(dtype == "fp32" || dtype == "bf16", "--dtype = {}: expected fp32 or bf16", dtype);
  const CheckpointReader reader(checkpoint_file_of(checkpoint));
  const Config config = checkpoint_config(reader.path());
  const data::Tokenizer tokenizer = read_tokenizer(reader);
  const model::ModelDesc desc = model::describe(config.model);
  const auto tensors = gpt2_tensors(desc);
  // Everything that can refuse does so before a byte is written.
  std::map<std::string, std::string> files = data::hf_tokenizer_files(tokenizer, config.model.seq_len);
  const Token end = data::end_of_text(tokenizer);
  files["config.json"] = gpt2_config_json(config.model, end, dtype == "bf16" ? "bfloat16" : "float32");
  files["generation_config.json"] = generation_config_json(end);
  for (const auto& t : tensors)
    require(reader.find("/model/" + t.kpipe) != nullptr, "checkpoint '{}': no tensor /model/{}", reader.path(), t.kpipe);

  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    const fs::path parent = fs::path(dir).parent_path().empty() ? fs::path(".") : fs::path(dir).parent_path();
    require(fs::is_directory(parent, ec), "-o {}: its parent directory '{}' does not exist", dir, parent.string());
    require(::mkdir(dir.c_str(), 0777) == 0 || errno == EEXIST, "-o {}: cannot create ({})", dir, std::strerror(errno));
  }
  const auto in_dir = [&](const std::string& name) { return (fs::path(dir) / name).string(); };
  const std::string weights = in_dir("model.safetensors");
  require_writable(weights + partial, fmt::format("-o {}", dir));

  ExportSummary summary;
  summary.checkpoint = reader.path();
  summary.step = reader.number("step");
  summary.tensors = int(tensors.size());
  summary.tokenizer = data::to_string(tokenizer.kind());
  std::vector<SafetensorsWriter::Declared> declared;
  for (const auto& t : tensors) declared.push_back({t.hf, t.hf_shape()});
  std::vector<std::string> names = {"model.safetensors"};
  for (const auto& entry : files) names.push_back(entry.first);
  try {
    SafetensorsWriter writer(weights + partial, declared, dtype == "bf16" ? "BF16" : "F32", {{"format", "pt"}});
    for (const auto& t : tensors) {
      std::int64_t n = 1;
      for (auto d : t.shape) n *= d;
      std::vector<float> values(static_cast<std::size_t>(n));
      reader.read_tensor("/model/" + t.kpipe, t.shape, values.data());
      writer.write(t.transposed ? transposed(values, t.shape[0], t.shape[1]) : values);
    }
    writer.finish();
    summary.weight_bytes = writer.bytes();
    for (const auto& [name, text] : files) write_text(in_dir(name) + partial, text);
  } catch (...) {  // a damaged tensor, a full disk: no partial file stays behind
    for (const auto& name : names) fs::remove(in_dir(name) + partial, ec);
    throw;
  }
  // Complete: each file takes its name. A SentencePiece model of an earlier export would contradict the tokenizer.
  for (const auto& name : names) fs::rename(in_dir(name) + partial, in_dir(name));
  if (!files.count("tokenizer.model")) fs::remove(in_dir("tokenizer.model"), ec);
  fsync_path(dir);
  return summary;
}

}  // namespace kpipe::io
