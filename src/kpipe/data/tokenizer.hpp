#pragma once
// How text becomes token ids and back. Two kinds:
//   bytes          every byte is a token (vocabulary 256); needs nothing, reverses any input exactly.
//   sentencepiece  a SentencePiece model (BPE, trained by kpipe-prepare --tokenizer bpe), kept as its
//                  serialized bytes so that token files and checkpoints carry it. Trained with identity
//                  normalization and byte fallback: every valid UTF-8 text encodes and decodes back exactly,
//                  and no byte is ever unknown (invalid UTF-8 becomes U+FFFD, SentencePiece's choice).
// Without SentencePiece in the build (KPIPE_ENABLE_SENTENCEPIECE=OFF) only bytes work; creating a
// sentencepiece tokenizer is then an InputError that says so.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kpipe/core/tensor.hpp"

namespace kpipe::data {

inline constexpr int byte_vocab = 256;

enum class TokenizerKind { bytes, sentencepiece };
const char* to_string(TokenizerKind kind);  // "bytes", "sentencepiece"

class Tokenizer {
 public:
  Tokenizer();  // bytes
  // A serialized SentencePiece model; `label` names where it came from in errors (InputError).
  static Tokenizer sentencepiece(std::string serialized_model, const std::string& label);

  TokenizerKind kind() const { return kind_; }
  int vocab() const { return vocab_; }
  const std::string& serialized_model() const { return model_; }  // empty for bytes

  // Safe to call from several threads at once (kpipe-prepare encodes on every core).
  std::vector<Token> encode(std::string_view text) const;
  // Ids outside [0, vocab) are an InputError (a model with a padded vocabulary masks them when sampling).
  std::string decode(const std::vector<Token>& ids) const;
  // Whether a generated text may contain this id: false for ids outside the vocabulary and for
  // SentencePiece's unknown and control pieces (training data never holds them).
  bool can_generate(Token id) const;
  // The piece an id stands for, printable ("\n" as "<0x0A>", spaces as U+2581 for SentencePiece).
  std::string piece(Token id) const;

 private:
  struct Processor;  // SentencePiece's, where built in
  TokenizerKind kind_ = TokenizerKind::bytes;
  int vocab_ = byte_vocab;
  std::string model_;
  std::shared_ptr<const Processor> processor_;
};

struct BpeOptions {
  int vocab_size = 8192;
  int threads = 0;  // 0: the machine's cores
};

// Trains a BPE model on text (its lines are the training sentences). The vocabulary holds the 256 byte
// pieces, the unknown piece and the merges; a text too small for vocab_size pieces gives fewer (see
// Tokenizer::vocab). InputError when SentencePiece is missing or vocab_size is below what bytes need.
Tokenizer train_bpe(const std::string& text, const BpeOptions& options);

// Whether this build has SentencePiece (KPIPE_ENABLE_SENTENCEPIECE).
bool sentencepiece_available();

// Where text is not valid UTF-8, in how many places (BPE turns each such byte into U+FFFD).
std::int64_t invalid_utf8_sequences(std::string_view text);

}  // namespace kpipe::data
