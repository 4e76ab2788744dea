// kpipe's tokenizers as transformers' files and back: bytes and kpipe's SentencePiece BPE come back as what they
// were (the transformers tests, tests/hf/, check the ids transformers gives); a directory kpipe cannot take a
// tokenizer from exactly is refused naming the file.
#include <gtest/gtest.h>

#include <string>

#include "data/temp_dir.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/data/hf_tokenizer.hpp"

namespace kpipe::data {
namespace {

void write_files(const test::TempDir& dir, const std::map<std::string, std::string>& files) {
  for (const auto& [name, text] : files) dir.write(name, text);
}

std::string refusal(const std::string& dir) {
  try {
    hf_tokenizer(dir);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(HfTokenizer, BytesComeBackAsBytes) {
  test::TempDir dir;
  const auto files = hf_tokenizer_files(Tokenizer(), 64);
  EXPECT_EQ(files.count("tokenizer.model"), 0u);
  EXPECT_NE(files.at("tokenizer_config.json").find("PreTrainedTokenizerFast"), std::string::npos);
  write_files(dir, files);
  EXPECT_EQ(hf_tokenizer(dir.root().string()).kind(), TokenizerKind::bytes);
  EXPECT_EQ(end_of_text(Tokenizer()), -1);
}

TEST(HfTokenizer, KpipesSentencePieceComesBackOnlyWithTheTokenizerJsonMadeFromIt) {
  if (!sentencepiece_available()) GTEST_SKIP() << "built without SentencePiece";
  std::string text;
  for (int i = 0; i < 300; ++i) text += "line " + std::to_string(i) + ": the quick brown fox   jumps over the lazy dog\n";
  const Tokenizer bpe = train_bpe(text, {300, 1});
  test::TempDir dir;
  auto files = hf_tokenizer_files(bpe, 128);
  ASSERT_EQ(files.count("tokenizer.model"), 1u);
  write_files(dir, files);
  const Tokenizer back = hf_tokenizer(dir.root().string());
  EXPECT_EQ(back.kind(), TokenizerKind::sentencepiece);
  EXPECT_EQ(back.serialized_model(), bpe.serialized_model());
  // Another tokenizer.json beside the model: the two would not encode alike.
  const std::string json = files.at("tokenizer.json");
  dir.write("tokenizer.json", json.substr(0, json.rfind(']')) + ", \"x y\"]}}");
  EXPECT_NE(refusal(dir.root().string()).find("is not the one kpipe makes from tokenizer.model"), std::string::npos);
}

TEST(HfTokenizer, ADirectoryWithoutAFastTokenizerOrWithAddedTokensIsRefused) {
  test::TempDir dir;
  EXPECT_NE(refusal(dir.root().string()).find("no tokenizer.json"), std::string::npos);
  dir.write("vocab.json", "{}");
  EXPECT_NE(refusal(dir.root().string()).find("vocab.json and merges.txt but no tokenizer.json"), std::string::npos);
  write_files(dir, hf_tokenizer_files(Tokenizer(), 64));
  dir.write("tokenizer_config.json", R"({"add_bos_token": true})");
  EXPECT_NE(refusal(dir.root().string()).find("add_bos_token = true"), std::string::npos);
}

}  // namespace
}  // namespace kpipe::data
