#include "kpipe/data/corpus.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <system_error>

#include "kpipe/core/error.hpp"
#include "kpipe/core/files.hpp"
#include "kpipe/data/synthetic.hpp"
#include "kpipe/data/text_bytes.hpp"
#include "kpipe/data/token_file.hpp"

namespace kpipe::data {

std::int64_t held_out(std::int64_t tokens, double val_fraction) {
  return std::min<std::int64_t>(tokens, std::max<std::int64_t>(0, std::llround(double(tokens) * val_fraction)));
}

Corpus text_corpus(const std::string& bytes, double val_fraction, std::string source) {
  const auto size = static_cast<std::int64_t>(bytes.size());
  const std::int64_t train = size - held_out(size, val_fraction);
  Corpus corpus;
  const auto* first = reinterpret_cast<const unsigned char*>(bytes.data());  // bytes above 127: ids 128..255
  corpus.train = std::vector<Token>(first, first + train);
  corpus.validation = std::vector<Token>(first + train, first + size);
  corpus.source = std::move(source);
  return corpus;
}

Corpus encoded_corpus(const std::string& text, const Tokenizer& tokenizer, double val_fraction, std::string source) {
  std::vector<Token> tokens = tokenizer.encode(text);
  const auto size = static_cast<std::int64_t>(tokens.size());
  const std::int64_t train = size - held_out(size, val_fraction);
  Corpus corpus;
  corpus.validation = std::vector<Token>(tokens.begin() + train, tokens.end());
  tokens.resize(std::size_t(train));
  corpus.train = std::move(tokens);
  corpus.source = std::move(source);
  corpus.tokenizer = tokenizer;
  return corpus;
}

Corpus text_file_corpus(const std::string& path, double val_fraction, const std::string& label) {
  if (const std::string reason = unreadable_reason(path); !reason.empty())
    throw InputError(fmt::format("{}: cannot open ({})", label, reason));
  std::error_code error;
  const auto size = static_cast<std::int64_t>(std::filesystem::file_size(path, error));
  require(!error, "{}: cannot open ({})", label, error.message());
  const std::int64_t train = size - held_out(size, val_fraction);
  const TokenSplit bytes(text_bytes(path, size, label));
  Corpus corpus;
  corpus.train = bytes.slice(0, train);
  corpus.validation = bytes.slice(train, size - train);
  corpus.source = path;
  return corpus;
}

namespace {

void require_window(const std::string& label, const char* split, std::int64_t tokens, int seq_len) {
  require(tokens >= std::int64_t(seq_len) + 1,
          "{}: the {} split has {} tokens, fewer than model.seq_len + 1 = {}", label, split, tokens, seq_len + 1);
}

}  // namespace

Corpus load_corpus(const DataConfig& config, std::uint64_t seed, int seq_len) {
  Corpus corpus;
  std::string label;
  if (config.path.empty()) {
    label = fmt::format("data.synthetic_tokens = {}", config.synthetic_tokens);
    // The text, then its tokens: 1 + sizeof(Token) bytes a token while both are held.
    const double bytes = double(config.synthetic_tokens) * (1 + sizeof(Token));
    corpus = building_in_memory(label, "the synthetic corpus", bytes, [&] {
      return synthetic_corpus(seed, config.synthetic_tokens, config.val_fraction);
    });
  } else {
    label = fmt::format("data.path = '{}'", config.path);
    if (const std::string reason = unreadable_reason(config.path); !reason.empty())
      throw InputError(fmt::format("{}: cannot open ({})", label, reason));
    corpus = is_token_file(config.path, label) ? read_token_file(config.path, label)
                                               : text_file_corpus(config.path, config.val_fraction, label);
  }
  require_window(label, "train", corpus.train.size(), seq_len);
  require_window(label, "validation", corpus.validation.size(), seq_len);
  return corpus;
}

Corpus load_corpus(const DataConfig& config, std::uint64_t seed, int seq_len, const Tokenizer& tokenizer) {
  Corpus corpus = load_corpus(config, seed, seq_len);
  if (corpus.tokenizer.kind() == tokenizer.kind() && corpus.tokenizer.serialized_model() == tokenizer.serialized_model())
    return corpus;
  const std::string label = config.path.empty() ? fmt::format("data.synthetic_tokens = {}", config.synthetic_tokens)
                                                : fmt::format("data.path = '{}'", config.path);
  require(corpus.tokenizer.kind() == TokenizerKind::bytes && (config.path.empty() || !is_token_file(config.path, label)),
          "{}: made by a {} tokenizer (vocabulary {}), not by checkpoint.init_from's ({}, vocabulary {})", label,
          to_string(corpus.tokenizer.kind()), corpus.vocab(), to_string(tokenizer.kind()), tokenizer.vocab());
  std::string text;
  if (config.path.empty()) {
    for (const TokenSplit* split : {&corpus.train, &corpus.validation})
      for (const Token t : split->read_all()) text += static_cast<char>(t);
  } else {
    text = read_bytes(config.path, label);
  }
  corpus = encoded_corpus(text, tokenizer, config.val_fraction, corpus.source);
  require_window(label, "train", corpus.train.size(), seq_len);
  require_window(label, "validation", corpus.validation.size(), seq_len);
  return corpus;
}

void fit_vocabulary(ModelConfig& model, const Corpus& corpus) { model.vocab = std::max(model.vocab, corpus.vocab()); }

}  // namespace kpipe::data
