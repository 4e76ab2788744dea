#include "kpipe/io/hf_import.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>
#include <vector>

#include "kpipe/core/config_io.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/core/files.hpp"
#include "kpipe/core/hash.hpp"
#include "kpipe/data/hf_tokenizer.hpp"
#include "kpipe/io/checkpoint.hpp"
#include "kpipe/io/checkpoint_common.hpp"
#include "kpipe/io/checkpoint_file.hpp"
#include "kpipe/io/checkpoint_tokenizer.hpp"
#include "kpipe/io/hf_gpt2.hpp"
#include "kpipe/io/safetensors.hpp"

namespace kpipe::io {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Every tensor of the model's safetensors files, by name.
struct Weights {
  std::vector<std::unique_ptr<SafetensorsReader>> files;
  std::map<std::string, std::pair<const SafetensorsReader*, const SafeTensor*>> tensors;
};

Weights open_weights(const std::string& dir) {
  const auto in_dir = [&](const std::string& name) { return (fs::path(dir) / name).string(); };
  std::error_code ec;
  std::vector<std::string> shards;
  const std::string index = in_dir("model.safetensors.index.json");
  if (fs::exists(in_dir("model.safetensors"), ec)) {
    shards.push_back("model.safetensors");
  } else if (fs::exists(index, ec)) {
    const json j = json::parse(read_bytes(index, fmt::format("'{}'", index)), nullptr, false);
    require(!j.is_discarded() && j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(),
            "'{}': not a JSON object with a weight_map", index);
    std::set<std::string> names;
    for (const auto& [tensor, shard] : j["weight_map"].items()) {
      require(shard.is_string() && shard.get<std::string>().find('/') == std::string::npos &&
                  !shard.get<std::string>().empty() && shard.get<std::string>() != "..",
              "'{}': weight_map {}: {} is not a file of the directory", index, tensor, shard.dump());
      if (names.insert(shard.get<std::string>()).second) shards.push_back(shard.get<std::string>());
    }
  } else {
    require(!fs::exists(in_dir("pytorch_model.bin"), ec),
            "'{}': pytorch_model.bin only: kpipe reads safetensors (a pickle runs code when loaded); save the model "
            "with safe_serialization=True",
            dir);
    throw InputError(fmt::format("'{}': no model.safetensors or model.safetensors.index.json", dir));
  }
  Weights weights;
  for (const auto& shard : shards) {
    weights.files.push_back(std::make_unique<SafetensorsReader>(in_dir(shard)));
    const SafetensorsReader* file = weights.files.back().get();
    for (const SafeTensor& t : file->tensors())
      require(weights.tensors.emplace(t.name, std::make_pair(file, &t)).second, "'{}': tensor {} is in two files",
              dir, t.name);
  }
  return weights;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

ImportSummary import_from_hf(const std::string& dir, const std::string& checkpoint, int seq_len, MPI_Comm comm) {
  std::error_code ec;
  require(fs::is_directory(dir, ec), "'{}': not a directory", dir);
  const std::string config_path = (fs::path(dir) / "config.json").string();
  const std::string config_text = read_bytes(config_path, fmt::format("'{}'", config_path));
  const Gpt2Model hf = gpt2_model(config_text, fmt::format("'{}'", config_path));
  Config config;
  config.model = hf.model;
  const int positions = hf.model.seq_len;
  if (seq_len > 0) {
    require(seq_len <= positions, "--seq-len = {}: more than the model's n_positions = {}", seq_len, positions);
    config.model.seq_len = seq_len;
  }
  validate(config);
  const data::Tokenizer tokenizer = data::hf_tokenizer(dir);
  require(tokenizer.vocab() <= config.model.vocab, "'{}': the tokenizer has {} tokens, more than vocab_size = {}", dir,
          tokenizer.vocab(), config.model.vocab);
  require_writable(checkpoint + ".tmp", fmt::format("-o {}", checkpoint));

  // Every tensor found, of the right shape and type, before anything is written.
  const Weights weights = open_weights(dir);
  // A GPT2LMHeadModel's tensors are under "transformer."; a GPT2Model's have no prefix (and no head).
  const std::string prefix = weights.tensors.count("transformer.wte.weight") ? "" : "transformer.";
  const auto source_name = [&](const std::string& hf_name) {
    return hf_name.rfind(prefix, 0) == 0 ? hf_name.substr(prefix.size()) : hf_name;
  };
  const model::ModelDesc desc = model::describe(config.model);
  const auto tensors = gpt2_tensors(desc);
  std::set<std::string> used;
  std::vector<std::vector<float>> values;
  ImportSummary summary;
  for (const auto& t : tensors) {
    const bool head = t.hf == "lm_head.weight";
    const std::string name = source_name(head && hf.tied ? "transformer.wte.weight" : t.hf);
    const auto found = weights.tensors.find(name);
    require(found != weights.tensors.end(), "'{}': tensor {} is missing{}", dir, name,
            head ? " (config.json: tie_word_embeddings = false)" : "");
    const auto& [file, tensor] = found->second;
    std::vector<std::int64_t> want = t.hf_shape();
    const bool positions_table = t.hf == "transformer.wpe.weight";
    if (positions_table) want[0] = positions;
    require(tensor->shape == want, "'{}': tensor {} has shape {}, config.json makes it {}", file->path(), name,
            shape_text(tensor->shape), shape_text(want));
    std::vector<float> v = file->read_floats(*tensor);
    if (positions_table) v.resize(std::size_t(config.model.seq_len) * std::size_t(want[1]));
    values.push_back(t.transposed ? transposed(v, want[0], want[1]) : std::move(v));
    used.insert(name);
    summary.parameters += std::int64_t(values.back().size());
  }
  for (const auto& [name, where] : weights.tensors) {
    if (used.count(name)) continue;
    // The attention's causal masks (buffers older transformers saved), and a tied head's copy, are not weights.
    if (ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias")) {
      ++summary.buffers_skipped;
      continue;
    }
    require(hf.tied && name == source_name("lm_head.weight"),
            "'{}': tensor {} is not part of GPT-2's language model as kpipe reads it", where.first->path(), name);
  }

  CheckpointWriter writer(comm, config.pipeline.recv_timeout_s);
  for (std::size_t k = 0; k < tensors.size(); ++k) writer.add_tensor("/model/" + tensors[k].kpipe, tensors[k].shape, values[k].data());
  const std::string run_id = hash_hex(xxh64(tokenizer.serialized_model(), xxh64(config_text)));
  detail::add_metadata<float>(writer, config, detail::model_tensors(desc), 0, run_id, detail::utc_now());
  add_tokenizer(writer, tokenizer, true);
  const std::string tmp = checkpoint + ".tmp";
  const WriteStatus status = writer.write(tmp);
  if (!status.ok) {
    fs::remove(tmp, ec);
    throw std::runtime_error(fmt::format("checkpoint '{}' not written: {}", checkpoint, status.message));
  }
  fs::rename(tmp, checkpoint);
  const fs::path parent = fs::path(checkpoint).parent_path();
  fsync_path(parent.empty() ? "." : parent.string());
  summary.model = config.model;
  summary.tied = hf.tied;
  summary.tokenizer = data::to_string(tokenizer.kind());
  summary.tensors = int(tensors.size());
  return summary;
}

}  // namespace kpipe::io
