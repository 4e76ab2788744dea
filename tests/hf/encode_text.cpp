// The test seam of the transformers tests (tests/hf/): a checkpoint's tokenizer applied to a file, as kpipe's
// programs apply it (io::read_checkpoint_tokenizer, data::Tokenizer::encode).
//   kpipe_test_encode_text CKPT FILE    the ids of the file's text, one line, separated by spaces
// Exit 2 with one line on bad input; exit 1 when decoding the ids does not give the text back.
#include <fmt/format.h>

#include <cstdio>
#include <string>

#include "kpipe/core/error.hpp"
#include "kpipe/core/files.hpp"
#include "kpipe/io/checkpoint_tokenizer.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s CHECKPOINT FILE\n", argv[0]);
    return 2;
  }
  try {
    const auto tokenizer = kpipe::io::read_checkpoint_tokenizer(argv[1]);
    const std::string text = kpipe::read_bytes(argv[2], argv[2]);
    const auto ids = tokenizer.encode(text);
    std::string line;
    for (const auto id : ids) line += fmt::format("{}{}", line.empty() ? "" : " ", id);
    std::printf("%s\n", line.c_str());
    if (tokenizer.decode(ids) != text) {
      std::fprintf(stderr, "decoding the ids does not give the text back\n");
      return 1;
    }
  } catch (const kpipe::InputError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
