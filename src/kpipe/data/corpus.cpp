#include "kpipe/data/corpus.hpp"

#include <fmt/format.h>

#include <cmath>

#include "kpipe/core/error.hpp"
#include "kpipe/core/files.hpp"
#include "kpipe/data/synthetic.hpp"
#include "kpipe/data/token_file.hpp"

namespace kpipe::data {

Corpus text_corpus(const std::string& bytes, double val_fraction, std::string source) {
  const auto size = static_cast<std::int64_t>(bytes.size());
  const auto held_out = std::min<std::int64_t>(size, std::max<std::int64_t>(0, std::llround(size * val_fraction)));
  Corpus corpus;
  corpus.train.reserve(static_cast<std::size_t>(size - held_out));
  corpus.validation.reserve(static_cast<std::size_t>(held_out));
  for (std::int64_t i = 0; i < size; ++i)
    (i < size - held_out ? corpus.train : corpus.validation).push_back(static_cast<unsigned char>(bytes[i]));
  corpus.source = std::move(source);
  return corpus;
}

Corpus encoded_corpus(const std::string& text, const Tokenizer& tokenizer, double val_fraction, std::string source) {
  std::vector<Token> tokens = tokenizer.encode(text);
  const auto size = static_cast<std::int64_t>(tokens.size());
  const auto held_out = std::min<std::int64_t>(size, std::max<std::int64_t>(0, std::llround(size * val_fraction)));
  Corpus corpus;
  corpus.validation.assign(tokens.end() - held_out, tokens.end());
  tokens.resize(std::size_t(size - held_out));
  corpus.train = std::move(tokens);
  corpus.source = std::move(source);
  corpus.tokenizer = tokenizer;
  return corpus;
}

namespace {

void require_window(const std::string& label, const char* split, std::size_t tokens, int seq_len) {
  require(static_cast<std::int64_t>(tokens) >= std::int64_t(seq_len) + 1,
          "{}: the {} split has {} tokens, fewer than model.seq_len + 1 = {}", label, split, tokens, seq_len + 1);
}

}  // namespace

Corpus load_corpus(const DataConfig& config, std::uint64_t seed, int seq_len) {
  Corpus corpus;
  std::string label;
  if (config.path.empty()) {
    label = fmt::format("data.synthetic_tokens = {}", config.synthetic_tokens);
    corpus = synthetic_corpus(seed, config.synthetic_tokens, config.val_fraction);
  } else {
    label = fmt::format("data.path = '{}'", config.path);
    if (const std::string reason = unreadable_reason(config.path); !reason.empty())
      throw InputError(fmt::format("{}: cannot open ({})", label, reason));
    corpus = is_token_file(config.path, label) ? read_token_file(config.path, label)
                                       : text_corpus(read_bytes(config.path, label), config.val_fraction, config.path);
  }
  require_window(label, "train", corpus.train.size(), seq_len);
  require_window(label, "validation", corpus.validation.size(), seq_len);
  return corpus;
}

void fit_vocabulary(ModelConfig& model, const Corpus& corpus) { model.vocab = std::max(model.vocab, corpus.vocab()); }

}  // namespace kpipe::data
