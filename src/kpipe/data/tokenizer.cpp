#include "kpipe/data/tokenizer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <thread>
#include <unordered_map>

#include "kpipe/core/error.hpp"

#if defined(KPIPE_HAVE_SENTENCEPIECE)
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#endif

namespace kpipe::data {

#if !defined(KPIPE_HAVE_SENTENCEPIECE)
namespace {
constexpr const char* no_sentencepiece =
    "this kpipe was built without SentencePiece (KPIPE_ENABLE_SENTENCEPIECE=OFF, or libsentencepiece-dev missing): "
    "only byte tokens work";
}  // namespace
#endif

const char* to_string(TokenizerKind kind) {
  switch (kind) {
    case TokenizerKind::bytes: return "bytes";
    case TokenizerKind::sentencepiece: return "sentencepiece";
    case TokenizerKind::byte_level_bpe: return "byte_level_bpe";
  }
  return "?";
}

Tokenizer Tokenizer::byte_level_bpe(std::string tokenizer_json, const std::string& label) {
  Tokenizer t;
  t.byte_level_ = std::make_shared<const ByteLevelBpe>(tokenizer_json, label);
  t.kind_ = TokenizerKind::byte_level_bpe;
  t.vocab_ = t.byte_level_->vocab();
  t.model_ = std::move(tokenizer_json);
  return t;
}

bool sentencepiece_available() {
#if defined(KPIPE_HAVE_SENTENCEPIECE)
  return true;
#else
  return false;
#endif
}

std::int64_t invalid_utf8_sequences(std::string_view text) {
  std::int64_t invalid = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  for (std::size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    // Length and the range of the second byte (excluding overlong forms and surrogates, RFC 3629).
    int length = 0;
    unsigned char low = 0x80, high = 0xBF;
    if (c < 0x80) length = 1;
    else if (c >= 0xC2 && c <= 0xDF) length = 2;
    else if (c == 0xE0) length = 3, low = 0xA0;
    else if (c >= 0xE1 && c <= 0xEC) length = 3;
    else if (c == 0xED) length = 3, high = 0x9F;
    else if (c >= 0xEE && c <= 0xEF) length = 3;
    else if (c == 0xF0) length = 4, low = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) length = 4;
    else if (c == 0xF4) length = 4, high = 0x8F;
    bool valid = length > 0 && i + length <= n;
    for (int k = 1; valid && k < length; ++k) {
      const unsigned char next = p[i + k];
      valid = k == 1 ? (next >= low && next <= high) : (next >= 0x80 && next <= 0xBF);
    }
    if (valid) {
      i += std::size_t(length);
    } else {
      ++invalid;
      ++i;
    }
  }
  return invalid;
}

#if defined(KPIPE_HAVE_SENTENCEPIECE)

struct Tokenizer::Processor {
  sentencepiece::SentencePieceProcessor sp;
};

Tokenizer Tokenizer::sentencepiece(std::string serialized_model, const std::string& label) {
  auto processor = std::make_shared<Processor>();
  const auto status = processor->sp.LoadFromSerializedProto(serialized_model);
  require(status.ok(), "{}: not a SentencePiece model ({})", label, status.ToString());
  Tokenizer t;
  t.kind_ = TokenizerKind::sentencepiece;
  t.vocab_ = processor->sp.GetPieceSize();
  t.model_ = std::move(serialized_model);
  t.processor_ = std::move(processor);
  return t;
}

namespace {

// The corpus's lines, one training sentence each (SentencePiece learns pieces within lines).
class LineIterator : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(const std::string& text) : text_(text) { advance(); }
  bool done() const override { return done_; }
  void Next() override { advance(); }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  void advance() {
    while (position_ < text_.size()) {
      const std::size_t end = std::min(text_.find('\n', position_), text_.size());
      line_.assign(text_, position_, end - position_);
      position_ = end + 1;
      if (!line_.empty()) return;
    }
    done_ = true;
  }
  const std::string& text_;
  std::size_t position_ = 0;
  std::string line_;
  bool done_ = false;
};

std::size_t longest_line(const std::string& text) {
  std::size_t longest = 0;
  for (std::size_t start = 0; start < text.size();) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    longest = std::max(longest, end - start);
    start = end + 1;
  }
  return longest;
}

}  // namespace

Tokenizer train_bpe(const std::string& text, const BpeOptions& options) {
  // 256 byte pieces and the unknown piece come first; merges (at least one) follow.
  require(options.vocab_size >= byte_vocab + 2, "--vocab-size = {}: a BPE vocabulary needs more than the {} byte "
          "pieces and the unknown piece (at least {})", options.vocab_size, byte_vocab, byte_vocab + 2);
  require(!text.empty(), "BPE training: the text is empty");
  const int threads = options.threads > 0 ? options.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  const std::unordered_map<std::string, std::string> spec = {
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(options.vocab_size)},
      // Every character seen becomes a piece; anything else falls back to its bytes: nothing is unknown.
      {"character_coverage", "1.0"},
      {"byte_fallback", "true"},
      // Text comes back exactly: no normalization, no dummy prefix, whitespace kept as it is.
      {"normalization_rule_name", "identity"},
      {"add_dummy_prefix", "false"},
      {"remove_extra_whitespaces", "false"},
      {"allow_whitespace_only_pieces", "true"},
      {"split_digits", "true"},
      // The windows are cut from one long stream: no sentence markers.
      {"unk_id", "0"},
      {"bos_id", "-1"},
      {"eos_id", "-1"},
      {"pad_id", "-1"},
      // A small text gives fewer pieces than asked instead of failing (the vocabulary says how many).
      {"hard_vocab_limit", "false"},
      {"max_sentence_length", std::to_string(std::max<std::size_t>(4192, longest_line(text) + 1))},
      {"num_threads", std::to_string(threads)},
      {"minloglevel", "2"},
      {"model_prefix", ""},
  };
  LineIterator lines(text);
  std::string serialized;
  const auto status = sentencepiece::SentencePieceTrainer::Train(spec, &lines, &serialized);
  require(status.ok(), "BPE training (vocabulary {}): {}", options.vocab_size, status.ToString());
  return Tokenizer::sentencepiece(std::move(serialized), "BPE training");
}

#else  // no SentencePiece

struct Tokenizer::Processor {};

Tokenizer Tokenizer::sentencepiece(std::string, const std::string& label) {
  throw InputError(fmt::format("{}: a SentencePiece tokenizer, but {}", label, no_sentencepiece));
}

Tokenizer train_bpe(const std::string&, const BpeOptions&) {
  throw InputError(fmt::format("--tokenizer bpe: {}", no_sentencepiece));
}

#endif

Tokenizer::Tokenizer() = default;

std::vector<Token> Tokenizer::encode(std::string_view text) const {
  if (kind_ == TokenizerKind::bytes) {
    std::vector<Token> ids(text.size());
    std::transform(text.begin(), text.end(), ids.begin(), [](char c) { return Token(static_cast<unsigned char>(c)); });
    return ids;
  }
  if (byte_level_) return byte_level_->encode(text);
#if defined(KPIPE_HAVE_SENTENCEPIECE)
  // Line by line: no piece spans a newline (training sentences are lines; the newline itself is a byte
  // piece), so this is the encoding of the whole text, in linear time, and SentencePiece's BPE merges run
  // 2.5 times faster on a line than on a 64 KiB block of them.
  std::vector<Token> ids;
  ids.reserve(text.size() / 3);
  for (std::size_t start = 0; start < text.size();) {
    std::size_t end = text.find('\n', start);
    end = end == std::string_view::npos ? text.size() : end + 1;
    const auto line = processor_->sp.EncodeAsIds({text.data() + start, end - start});
    ids.insert(ids.end(), line.begin(), line.end());
    start = end;
  }
  return ids;
#else
  throw InputError(no_sentencepiece);
#endif
}

std::string Tokenizer::decode(const std::vector<Token>& ids) const {
  for (std::size_t i = 0; i < ids.size(); ++i)
    require(ids[i] >= 0 && ids[i] < vocab_, "token {} at position {}: outside the {} tokenizer's vocabulary [0, {})",
            ids[i], i, to_string(kind_), vocab_);
  if (kind_ == TokenizerKind::bytes) {
    std::string text(ids.size(), '\0');
    std::transform(ids.begin(), ids.end(), text.begin(), [](Token t) { return static_cast<char>(t); });
    return text;
  }
  if (byte_level_) return byte_level_->decode(ids);
#if defined(KPIPE_HAVE_SENTENCEPIECE)
  return processor_->sp.DecodeIds(std::vector<int>(ids.begin(), ids.end()));
#else
  throw InputError(no_sentencepiece);
#endif
}

bool Tokenizer::can_generate(Token id) const {
  if (id < 0 || id >= vocab_) return false;
  if (kind_ != TokenizerKind::sentencepiece) return true;
#if defined(KPIPE_HAVE_SENTENCEPIECE)
  return !processor_->sp.IsUnknown(id) && !processor_->sp.IsControl(id);
#else
  return false;
#endif
}

std::string Tokenizer::piece(Token id) const {
  require(id >= 0 && id < vocab_, "token {}: outside the vocabulary [0, {})", id, vocab_);
  if (kind_ == TokenizerKind::bytes) {
    const auto byte = static_cast<unsigned char>(id);
    return byte >= 0x20 && byte < 0x7F ? std::string(1, char(byte)) : fmt::format("<0x{:02X}>", unsigned(byte));
  }
  if (byte_level_) return byte_level_->piece(id);
#if defined(KPIPE_HAVE_SENTENCEPIECE)
  return processor_->sp.IdToPiece(id);
#else
  throw InputError(no_sentencepiece);
#endif
}

std::vector<Tokenizer::ScoredPiece> Tokenizer::sentencepiece_pieces() const {
  std::vector<ScoredPiece> pieces;
#if defined(KPIPE_HAVE_SENTENCEPIECE)
  if (kind_ != TokenizerKind::sentencepiece) return pieces;
  const auto& sp = processor_->sp;
  for (int id = 0; id < vocab_; ++id)
    pieces.push_back({sp.IdToPiece(id), sp.GetScore(id),
                      !sp.IsUnknown(id) && !sp.IsControl(id) && !sp.IsUnused(id) && !sp.IsByte(id), sp.IsUnknown(id)});
#endif
  return pieces;
}

}  // namespace kpipe::data
