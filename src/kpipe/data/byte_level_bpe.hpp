#pragma once
// GPT-2's tokenizer ("byte-level BPE") as Hugging Face's tokenizers library runs a tokenizer.json of its kind,
// to the same ids: the added tokens (<|endoftext|>) are cut out of the text first, leftmost-longest; each
// remaining part is split by GPT-2's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (data/unicode_classes.hpp), each piece's bytes are written as GPT-2's 256 byte characters, and BPE merges
// adjacent tokens, the lowest merge rank first (the leftmost of equals). Decoding maps the characters back to
// bytes, so any text comes back exactly. Bytes that are not valid UTF-8 (which no Python string holds) split
// as punctuation does.
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kpipe/core/tensor.hpp"

namespace kpipe::data {

class ByteLevelBpe {
 public:
  // From tokenizer.json's text. What this class would not run exactly as the tokenizers library does (another
  // normalizer, pre-tokenizer, post-processor or model; dropout, affixes, truncation, stripping added tokens)
  // is an InputError "<label>: <key>: ...".
  ByteLevelBpe(const std::string& tokenizer_json, const std::string& label);

  int vocab() const { return int(tokens_.size()); }
  std::vector<Token> encode(std::string_view text) const;
  std::string decode(const std::vector<Token>& ids) const;  // ids in [0, vocab)
  std::string piece(Token id) const { return pieces_.at(std::size_t(id)); }  // as tokenizer.json writes it

 private:
  struct Added {
    Token id;
    std::string content;
    bool normalized;  // matched in the normalized text (the same text: there is no normalizer)
  };
  void encode_part(std::string_view text, std::vector<Token>& ids) const;
  void encode_word(std::string_view word, std::vector<Token>& ids) const;

  std::vector<std::string> tokens_;  // by id: the bytes each token stands for
  std::vector<std::string> pieces_;  // by id: as tokenizer.json writes it (byte characters, or an added token)
  std::unordered_map<std::string, Token> ids_;  // bytes -> id, model vocabulary only
  Token byte_ids_[256] = {};
  // (left id, right id) -> (rank, merged id)
  std::unordered_map<std::uint64_t, std::pair<std::int32_t, Token>> merges_;
  std::vector<Added> added_;
  bool use_regex_ = true, add_prefix_space_ = false, ignore_merges_ = false;
};

// GPT-2's pre-tokenization: the text cut into the pieces its pattern matches, in order.
std::vector<std::string_view> gpt2_pieces(std::string_view text);

// GPT-2's characters for bytes: the printable ones stand for themselves, the others for U+0100 onwards.
char32_t byte_character(unsigned char byte);

}  // namespace kpipe::data
