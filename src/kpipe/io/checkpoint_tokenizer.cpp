#include "kpipe/io/checkpoint_tokenizer.hpp"

#include <fmt/format.h>

#include <cstdint>

#include "kpipe/data/tokenizer_store.hpp"
#include "kpipe/io/checkpoint.hpp"
#include "kpipe/io/checkpoint_file.hpp"

namespace kpipe::io {

void add_tokenizer(CheckpointWriter& writer, const data::Tokenizer& tokenizer, bool owner) {
  const std::string group = std::string("/") + data::tokenizer_group;
  writer.set_attribute(group, "kind", std::string(data::to_string(tokenizer.kind())));
  writer.set_attribute(group, "vocab", std::int64_t(tokenizer.vocab()));
  if (owner && tokenizer.kind() != data::TokenizerKind::bytes)
    writer.add_blob(std::string("/") + data::tokenizer_model_dataset, tokenizer.serialized_model());
}

data::Tokenizer read_tokenizer(const CheckpointReader& reader) {
  const std::string group = std::string("/") + data::tokenizer_group;
  const std::string label = fmt::format("checkpoint file '{}'", reader.path());
  if (!reader.has(group, "kind")) return {};
  // The model is read as a blob: its bytes checked against the checkpoint's manifest.
  return data::stored_tokenizer(reader.text("kind", group), reader.number("vocab", group),
                                [&] { return reader.read_blob(std::string("/") + data::tokenizer_model_dataset); },
                                label);
}

data::Tokenizer read_checkpoint_tokenizer(const std::string& path) {
  return read_tokenizer(CheckpointReader(checkpoint_file_of(path)));
}

}  // namespace kpipe::io
