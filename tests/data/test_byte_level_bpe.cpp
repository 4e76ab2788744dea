// GPT-2's byte-level BPE as kpipe runs it: the pattern's pieces (the transformers tests compare whole texts with the
// tokenizers library, tests/hf/), merges by rank, added tokens cut out first, any bytes back exactly (invalid UTF-8
// too), and a tokenizer.json with anything kpipe would not run exactly refused naming the key.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kpipe/core/error.hpp"
#include "kpipe/data/byte_level_bpe.hpp"
#include "kpipe/data/tokenizer.hpp"

namespace kpipe::data {
namespace {

std::vector<std::string> pieces(const std::string& text) {
  const auto views = gpt2_pieces(text);
  return {views.begin(), views.end()};
}

using Pieces = std::vector<std::string>;

TEST(ByteLevelBpe, GptTwosPatternCutsTextAsItsRegularExpressionDoes) {
  EXPECT_EQ(pieces("Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(pieces("Hello  world"), (Pieces{"Hello", " ", " world"}));  // \s+(?!\S) leaves the last space
  EXPECT_EQ(pieces("I'm don't it's 'sup 'x"), (Pieces{"I", "'m", " don", "'t", " it", "'s", " '", "sup", " '", "x"}));
  EXPECT_EQ(pieces("a\n\nb"), (Pieces{"a", "\n", "\n", "b"}));
  EXPECT_EQ(pieces("a \tb"), (Pieces{"a", " ", "\t", "b"}));
  EXPECT_EQ(pieces("end   "), (Pieces{"end", "   "}));  // at the end the whole run
  EXPECT_EQ(pieces("abc123def 42"), (Pieces{"abc", "123", "def", " 42"}));
  EXPECT_EQ(pieces("hi!!! ok..."), (Pieces{"hi", "!!!", " ok", "..."}));
  EXPECT_EQ(pieces("日本語 テスト ½² Ⅳ"), (Pieces{"日本語", " テスト", " ½²", " Ⅳ"}));
  EXPECT_EQ(pieces("x\xc2\xa0y"), (Pieces{"x", "\xc2\xa0", "y"}));  // NBSP is white space
  EXPECT_EQ(pieces("a\xff\xfe b"), (Pieces{"a", "\xff\xfe", " b"}));  // invalid bytes: punctuation
}

// 256 byte tokens in GPT-2's characters, ids = GPT-2's order of them, then the merges' tokens.
std::string tokenizer_json(const std::string& extra_vocab, const std::string& merges, const std::string& rest = "") {
  std::string vocab;
  for (int b = 0; b < 256; ++b) {
    std::string c;
    const char32_t cp = byte_character(static_cast<unsigned char>(b));
    if (cp < 0x80) {
      c = cp == '"' ? "\\\"" : cp == '\\' ? "\\\\" : std::string(1, char(cp));
    } else {
      c = {char(0xC0 | (cp >> 6)), char(0x80 | (cp & 0x3F))};
    }
    vocab += (b ? ", \"" : "\"") + c + "\": " + std::to_string(b);
  }
  return R"({"version": "1.0", "normalizer": null, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false,
             "use_regex": true}, "post_processor": {"type": "ByteLevel"}, "decoder": {"type": "ByteLevel"},
             "model": {"type": "BPE", "dropout": null, "vocab": {)" +
         vocab + extra_vocab + R"(}, "merges": [)" + merges + "]}" + rest + "}";
}

TEST(ByteLevelBpe, MergesApplyByRankWithinPiecesAndAddedTokensComeFirst) {
  // "Ġ" is the space's character; 256: "Ġt", 257: "Ġth", 258: "he", 259: "ĠĠ", 260: <|endoftext|> (added).
  const std::string json = tokenizer_json(R"(, "Ġt": 256, "Ġth": 257, "he": 258, "ĠĠ": 259)",
                                          R"("Ġ t", "Ġt h", "h e", "Ġ Ġ")",
                                          R"(, "added_tokens": [{"id": 260, "content": "<|endoftext|>", "special": true}])");
  const Tokenizer t = Tokenizer::byte_level_bpe(json, "tokenizer.json");
  EXPECT_EQ(t.kind(), TokenizerKind::byte_level_bpe);
  EXPECT_EQ(t.vocab(), 261);
  // " the": "Ġt" (rank 0) then "Ġth" (rank 1) takes the h before "he" (rank 2) could.
  const auto byte = [](char c) { return Token(static_cast<unsigned char>(c)); };
  EXPECT_EQ(t.encode(" the"), (std::vector<Token>{257, byte('e')}));
  // "a   the": pieces "a", "  ", " the": the two spaces merge, the third stays with "the".
  const auto ids = t.encode("a   the<|endoftext|>x");
  EXPECT_EQ(ids, (std::vector<Token>{byte('a'), 259, 257, byte('e'), 260, byte('x')}));
  EXPECT_EQ(t.decode(ids), "a   the<|endoftext|>x");
  EXPECT_EQ(t.piece(257), "Ġth");
  // Any bytes come back, invalid UTF-8 included.
  const std::string binary = std::string("\xff\xfe\x00 he\xc3", 7) + " the\x80";
  EXPECT_EQ(t.decode(t.encode(binary)), binary);
}

TEST(ByteLevelBpe, WhatIsNotRunExactlyIsRefusedNamingTheKey) {
  const std::string base = tokenizer_json("", "");
  EXPECT_NO_THROW(Tokenizer::byte_level_bpe(base, "t.json"));
  const auto refused = [&](const std::string& from, const std::string& to, const std::string& says) {
    std::string json = base;
    const auto at = json.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    json.replace(at, from.size(), to);
    try {
      Tokenizer::byte_level_bpe(json, "t.json");
      ADD_FAILURE() << "accepted: " << to;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refused(R"("normalizer": null)", R"("normalizer": {"type": "NFC"})", "normalizer");
  refused(R"("dropout": null)", R"("dropout": 0.1)", "dropout");
  refused(R"("post_processor": {"type": "ByteLevel"})",
          R"("post_processor": {"type": "TemplateProcessing"})", "post_processor");
  refused(R"("pre_tokenizer": {"type": "ByteLevel")", R"("pre_tokenizer": {"type": "Metaspace")", "pre_tokenizer");
  refused(R"("type": "BPE")", R"("type": "WordPiece")", "model.type");
  refused(R"("merges": [])", R"("merges": ["a zz"])", "\"zz\" is not in the vocabulary");
  refused("\"\xC4\x80\": 0, ", "\"xx\": 0, ", "no token for byte 0x00");  // U+0100 stands for byte 0
  refused(R"("merges": [])", R"("merges": []}, "added_tokens": [{"id": 256, "content": "<x>", "lstrip": true}], "x": {)",
          "lstrip = true");
  refused(R"("merges": [])", R"("merges": []}, "added_tokens": [{"id": 300, "content": "<x>"}], "x": {)",
          "id 256 has no token");
  refused("{\"version\"", "[", "not JSON");
}

}  // namespace
}  // namespace kpipe::data
