#pragma once
// The text kpipe-prepare encodes: files and directories (every file under a directory, in path order), read
// as one stream of bytes, the files one after another in the order given, by range: a text of any size is
// never held whole.
#include <cstdint>
#include <string>
#include <vector>

namespace kpipe::data {

struct TextFile {
  std::string path;
  std::int64_t bytes = 0;
};

// Every file `paths` name, each checked readable (a regular file that opens). The first that is not (a
// missing file, a FIFO, an unreadable file given or found in a directory) is an InputError
// "input '<file>': cannot open (<reason>)".
std::vector<TextFile> list_text_files(const std::vector<std::string>& paths);

class TextStream {
 public:
  explicit TextStream(std::vector<TextFile> files);
  std::int64_t size() const { return size_; }
  const std::vector<TextFile>& files() const { return files_; }
  // Bytes [first, first + count) of the stream into out (inside [0, size())). A file that cannot be read,
  // or is shorter than when it was listed, is an InputError naming it.
  void read(std::int64_t first, std::int64_t count, char* out) const;
  std::string read(std::int64_t first, std::int64_t count) const;

 private:
  std::vector<TextFile> files_;
  std::vector<std::int64_t> starts_;  // where each file begins in the stream
  std::int64_t size_ = 0;
};

}  // namespace kpipe::data
