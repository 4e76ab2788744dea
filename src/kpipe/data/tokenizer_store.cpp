#include "kpipe/data/tokenizer_store.hpp"

#include <fmt/format.h>

#include <cstdint>

#include "kpipe/core/error.hpp"
#include "kpipe/core/hash.hpp"
#include "kpipe/h5/file.hpp"

namespace kpipe::data {

void write_tokenizer(hid_t file, const Tokenizer& tokenizer, const std::string& label) {
  try {
    const h5::Handle group = h5::require_group(file, tokenizer_group);
    h5::write_attribute(group.get(), "kind", std::string(to_string(tokenizer.kind())));
    h5::write_attribute(group.get(), "vocab", std::int64_t(tokenizer.vocab()));
    if (tokenizer.kind() == TokenizerKind::bytes) return;
    const std::string& model = tokenizer.serialized_model();
    h5::write_bytes(file, tokenizer_model_dataset, model);
    const h5::Handle dataset = h5::open_dataset(file, tokenizer_model_dataset, label);
    h5::write_u64_attribute(dataset.get(), "fnv1a64", fnv1a64(model));
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: {}", label, e.what()));
  }
}

Tokenizer stored_tokenizer(const std::string& kind, std::int64_t vocab, const std::function<std::string()>& model,
                           const std::string& label) {
  if (kind == to_string(TokenizerKind::bytes)) {
    require(vocab == byte_vocab, "{}: /tokenizer says bytes with vocab = {} (bytes have {})", label, vocab, byte_vocab);
    return {};
  }
  const bool byte_level = kind == to_string(TokenizerKind::byte_level_bpe);
  require(byte_level || kind == to_string(TokenizerKind::sentencepiece),
          "{}: /tokenizer kind = '{}': expected bytes, sentencepiece or byte_level_bpe", label, kind);
  const std::string where = label + ": /" + tokenizer_model_dataset;
  Tokenizer tokenizer = byte_level ? Tokenizer::byte_level_bpe(model(), where) : Tokenizer::sentencepiece(model(), where);
  require(tokenizer.vocab() == vocab, "{}: /tokenizer says vocab = {}, its model has {} pieces", label, vocab,
          tokenizer.vocab());
  return tokenizer;
}

Tokenizer read_tokenizer(hid_t file, const std::string& label) {
  const h5::QuietErrors quiet;
  if (!h5::exists(file, tokenizer_group)) return {};  // before tokenizers: bytes
  const h5::Handle group = h5::open_group(file, tokenizer_group);
  const std::string kind = h5::read_string_attribute(group.get(), "kind", label + ": /tokenizer");
  const std::int64_t vocab = h5::read_int_attribute(group.get(), "vocab", label + ": /tokenizer");
  return stored_tokenizer(kind, vocab, [&] {
    const std::string name = tokenizer_model_dataset;
    require(h5::exists(file, name), "{}: missing dataset /{}", label, name);
    require(h5::shape(file, name).size() == 1, "{}: dataset /{} is not 1-D", label, name);
    std::string bytes = h5::read_bytes(file, name, label);
    const h5::Handle dataset = h5::open_dataset(file, name, label);
    const std::uint64_t want = h5::read_u64_attribute(dataset.get(), "fnv1a64", label + ": /" + name);
    const std::uint64_t got = fnv1a64(bytes);
    require(got == want, "{}: dataset /{} fails its checksum (fnv1a64 stored {}, computed {})", label, name,
            hash_hex(want), hash_hex(got));
    return bytes;
  }, label);
}

}  // namespace kpipe::data
