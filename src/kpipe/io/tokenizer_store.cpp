#include "kpipe/io/tokenizer_store.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <vector>

#include "kpipe/core/error.hpp"
#include "kpipe/core/hash.hpp"
#include "kpipe/io/checkpoint.hpp"
#include "kpipe/io/checkpoint_file.hpp"
#include "kpipe/io/h5_file.hpp"

namespace kpipe::io {

namespace {
constexpr const char* model_dataset = "tokenizer/model";
}  // namespace

void write_tokenizer(hid_t file, const data::Tokenizer& tokenizer, const std::string& label) {
  try {
    const h5::Handle group = h5::require_group(file, tokenizer_group);
    h5::write_attribute(group.get(), "kind", std::string(data::to_string(tokenizer.kind())));
    h5::write_attribute(group.get(), "vocab", std::int64_t(tokenizer.vocab()));
    if (tokenizer.kind() == data::TokenizerKind::bytes) return;
    const std::string& model = tokenizer.serialized_model();
    h5::write_bytes(file, model_dataset, model);
    const h5::Handle dataset = h5::open_dataset(file, model_dataset, label);
    h5::write_u64_attribute(dataset.get(), "fnv1a64", fnv1a64(model));
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: {}", label, e.what()));
  }
}

data::Tokenizer read_tokenizer(hid_t file, const std::string& label) {
  const h5::QuietErrors quiet;
  if (!h5::exists(file, tokenizer_group)) return {};  // before tokenizers: bytes
  const h5::Handle group = h5::open_group(file, tokenizer_group);
  const std::string kind = h5::read_string_attribute(group.get(), "kind", label + ": /tokenizer");
  const std::int64_t vocab = h5::read_int_attribute(group.get(), "vocab", label + ": /tokenizer");
  if (kind == data::to_string(data::TokenizerKind::bytes)) {
    require(vocab == data::byte_vocab, "{}: /tokenizer says bytes with vocab = {} (bytes have {})", label, vocab,
            data::byte_vocab);
    return {};
  }
  require(kind == data::to_string(data::TokenizerKind::sentencepiece),
          "{}: /tokenizer kind = '{}': expected bytes or sentencepiece", label, kind);
  require(h5::exists(file, model_dataset), "{}: missing dataset /{}", label, model_dataset);
  require(h5::shape(file, model_dataset).size() == 1, "{}: dataset /{} is not 1-D", label, model_dataset);
  std::string model = h5::read_bytes(file, model_dataset, label);
  const h5::Handle dataset = h5::open_dataset(file, model_dataset, label);
  const std::uint64_t want = h5::read_u64_attribute(dataset.get(), "fnv1a64", label + ": /" + model_dataset);
  const std::uint64_t got = fnv1a64(model);
  require(got == want, "{}: dataset /{} fails its checksum (fnv1a64 stored {}, computed {})", label, model_dataset,
          hash_hex(want), hash_hex(got));
  data::Tokenizer tokenizer = data::Tokenizer::sentencepiece(std::move(model), label + ": /" + model_dataset);
  require(tokenizer.vocab() == vocab, "{}: /tokenizer says vocab = {}, its model has {} pieces", label, vocab,
          tokenizer.vocab());
  return tokenizer;
}

void add_tokenizer(CheckpointWriter& writer, const data::Tokenizer& tokenizer, bool owner) {
  writer.set_attribute(std::string("/") + tokenizer_group, "kind", std::string(data::to_string(tokenizer.kind())));
  writer.set_attribute(std::string("/") + tokenizer_group, "vocab", std::int64_t(tokenizer.vocab()));
  if (owner && tokenizer.kind() != data::TokenizerKind::bytes)
    writer.add_blob(std::string("/") + model_dataset, tokenizer.serialized_model());
}

data::Tokenizer read_tokenizer(const CheckpointReader& reader) {
  const std::string group = std::string("/") + tokenizer_group;
  const std::string label = fmt::format("checkpoint file '{}'", reader.path());
  if (!reader.has(group, "kind")) return {};
  const std::string kind = reader.text("kind", group);
  const std::int64_t vocab = reader.number("vocab", group);
  if (kind == data::to_string(data::TokenizerKind::bytes)) {
    require(vocab == data::byte_vocab, "{}: /tokenizer says bytes with vocab = {} (bytes have {})", label, vocab,
            data::byte_vocab);
    return {};
  }
  require(kind == data::to_string(data::TokenizerKind::sentencepiece),
          "{}: /tokenizer kind = '{}': expected bytes or sentencepiece", label, kind);
  // Read as a blob: its bytes checked against the checkpoint's manifest.
  data::Tokenizer tokenizer =
      data::Tokenizer::sentencepiece(reader.read_blob(std::string("/") + model_dataset), label + ": /" + model_dataset);
  require(tokenizer.vocab() == vocab, "{}: /tokenizer says vocab = {}, its model has {} pieces", label, vocab,
          tokenizer.vocab());
  return tokenizer;
}

data::Tokenizer read_checkpoint_tokenizer(const std::string& path) {
  return read_tokenizer(CheckpointReader(checkpoint_file_of(path)));
}

}  // namespace kpipe::io
