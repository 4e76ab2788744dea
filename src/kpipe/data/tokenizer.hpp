#pragma once
// How text becomes token ids and back. Three kinds:
//   bytes           every byte is a token (vocabulary 256); needs nothing, reverses any input exactly.
//   sentencepiece   a SentencePiece model (BPE, trained by kpipe-prepare --tokenizer bpe), kept as its
//                   serialized bytes so that token files and checkpoints carry it. Trained with identity
//                   normalization and byte fallback: every valid UTF-8 text encodes and decodes back exactly,
//                   and no byte is ever unknown (invalid UTF-8 becomes U+FFFD, SentencePiece's choice).
//   byte_level_bpe  GPT-2's tokenizer, imported with a model (kpipe-import), kept as its tokenizer.json
//                   text (data/byte_level_bpe.hpp); reverses any input exactly.
// Without SentencePiece in the build (KPIPE_ENABLE_SENTENCEPIECE=OFF) only bytes work; creating a
// sentencepiece tokenizer is then an InputError that says so.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kpipe/core/tensor.hpp"
#include "kpipe/data/byte_level_bpe.hpp"

namespace kpipe::data {

inline constexpr int byte_vocab = 256;

enum class TokenizerKind { bytes, sentencepiece, byte_level_bpe };
const char* to_string(TokenizerKind kind);  // "bytes", "sentencepiece", "byte_level_bpe"

class Tokenizer {
 public:
  Tokenizer();  // bytes
  // A serialized SentencePiece model; `label` names where it came from in errors (InputError).
  static Tokenizer sentencepiece(std::string serialized_model, const std::string& label);
  // A tokenizer.json of GPT-2's kind (data/byte_level_bpe.hpp says what it must be).
  static Tokenizer byte_level_bpe(std::string tokenizer_json, const std::string& label);

  TokenizerKind kind() const { return kind_; }
  int vocab() const { return vocab_; }
  // Empty for bytes; SentencePiece's model, or byte_level_bpe's tokenizer.json text.
  const std::string& serialized_model() const { return model_; }

  // Safe to call from several threads at once (kpipe-prepare encodes on every core).
  std::vector<Token> encode(std::string_view text) const;
  // Ids outside [0, vocab) are an InputError (a model with a padded vocabulary masks them when sampling).
  std::string decode(const std::vector<Token>& ids) const;
  // Whether a generated text may contain this id: false for ids outside the vocabulary and for
  // SentencePiece's unknown and control pieces (training data never holds them); GPT-2's may end a text.
  bool can_generate(Token id) const;
  // The piece an id stands for, printable ("\n" as "<0x0A>", spaces as U+2581 for SentencePiece).
  std::string piece(Token id) const;
  // SentencePiece's pieces by id, with their scores and whether each is a normal one (not unknown, control,
  // unused or a byte): what a BPE tokenizer.json is made of (data/hf_tokenizer.hpp). Empty for other kinds.
  struct ScoredPiece {
    std::string text;
    float score = 0;
    bool normal = false, unknown = false;
  };
  std::vector<ScoredPiece> sentencepiece_pieces() const;

 private:
  struct Processor;  // SentencePiece's, where built in
  std::shared_ptr<const ByteLevelBpe> byte_level_;
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
