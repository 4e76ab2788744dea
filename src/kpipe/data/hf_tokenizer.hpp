#pragma once
// kpipe's tokenizers as Hugging Face's transformers loads them (AutoTokenizer.from_pretrained), encoding any
// text to the ids kpipe gives it, and back:
//   bytes           a byte-level BPE of GPT-2's 256 byte characters, ids = the bytes, no merge, no pattern;
//   sentencepiece   a BPE tokenizer.json made from the SentencePiece model (its pieces, and its merges ranked
//                   by the merged piece's score, as SentencePiece's BPE merges the best-scored pair first; no
//                   pre-tokenizer, spaces as U+2581, byte fallback), with the model itself as tokenizer.model;
//   byte_level_bpe  the tokenizer.json it was imported from.
// And back from a transformers model directory: a tokenizer.json of GPT-2's kind (data/byte_level_bpe.hpp), or
// one of the two above (a SentencePiece one only with its tokenizer.model, and only as kpipe writes it).
#include <map>
#include <string>

#include "kpipe/data/tokenizer.hpp"

namespace kpipe::data {

// File name -> contents: tokenizer.json, tokenizer_config.json (and tokenizer.model for SentencePiece).
// InputError for a SentencePiece model of another kind than kpipe-prepare trains (BPE, identity normalization,
// no dummy prefix, whitespace kept), whose normalization a tokenizer.json would not reproduce exactly.
std::map<std::string, std::string> hf_tokenizer_files(const Tokenizer& tokenizer, int model_max_length);

// The id of GPT-2's end of text (a special added token "<|endoftext|>"), or -1: config.json's bos and eos.
Token end_of_text(const Tokenizer& tokenizer);

// The tokenizer of a transformers model directory. InputError naming the file and key for anything else (no
// tokenizer.json, another normalizer or model, tokens added to every text).
Tokenizer hf_tokenizer(const std::string& dir);

}  // namespace kpipe::data
