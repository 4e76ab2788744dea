#include "kpipe/data/text_inputs.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <system_error>

#include "kpipe/core/error.hpp"
#include "kpipe/core/files.hpp"

namespace kpipe::data {
namespace {

namespace fs = std::filesystem;

TextFile checked(const std::string& path) {
  if (const std::string reason = unreadable_reason(path); !reason.empty())
    throw InputError(fmt::format("input '{}': cannot open ({})", path, reason));
  std::error_code error;
  const auto bytes = fs::file_size(path, error);
  require(!error, "input '{}': cannot open ({})", path, error.message());
  return TextFile{path, static_cast<std::int64_t>(bytes)};
}

// Every non-directory under `directory` (a link to a file is followed, a link to a directory is not
// entered), in path order.
std::vector<std::string> files_under(const std::string& directory) {
  std::vector<std::string> paths;
  std::error_code error;
  fs::recursive_directory_iterator it(directory, error), end;
  for (; !error && it != end; it.increment(error)) {
    std::error_code ignored;
    if (!it->is_directory(ignored)) paths.push_back(it->path().string());
  }
  require(!error, "input '{}': cannot list ({})", directory, error.message());
  std::sort(paths.begin(), paths.end());
  return paths;
}

// One Unix file descriptor, closed on the way out.
class InputFile {
 public:
  explicit InputFile(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)) {
    require(fd_ >= 0, "input '{}': cannot open ({})", path, std::strerror(errno));
  }
  ~InputFile() { ::close(fd_); }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

std::vector<TextFile> list_text_files(const std::vector<std::string>& paths) {
  std::vector<TextFile> files;
  for (const std::string& path : paths) {
    std::error_code error;
    if (fs::is_directory(path, error)) {
      for (const std::string& file : files_under(path)) files.push_back(checked(file));
    } else {
      files.push_back(checked(path));
    }
  }
  return files;
}

TextStream::TextStream(std::vector<TextFile> files) : files_(std::move(files)) {
  for (const TextFile& file : files_) {
    starts_.push_back(size_);
    size_ += file.bytes;
  }
}

void TextStream::read(std::int64_t first, std::int64_t count, char* out) const {
  if (first < 0 || count < 0 || first > size_ - count)
    throw std::out_of_range(fmt::format("kpipe::data::TextStream::read: bytes [{}, {}) of {}", first, first + count, size_));
  // The file holding `first`, then the next ones until the range is read.
  auto k = std::size_t(std::upper_bound(starts_.begin(), starts_.end(), first) - starts_.begin() - 1);
  for (std::int64_t done = 0; done < count; ++k) {
    const TextFile& file = files_[k];
    const std::int64_t offset = first + done - starts_[k];
    const std::int64_t want = std::min(count - done, file.bytes - offset);
    if (want <= 0) continue;  // an empty file
    const InputFile input(file.path);
    for (std::int64_t got = 0; got < want;) {
      const ssize_t n = ::pread(input.fd(), out + done + got, std::size_t(want - got), off_t(offset + got));
      if (n < 0 && errno == EINTR) continue;
      require(n > 0, "input '{}': cannot read bytes [{}, {}) ({})", file.path, offset + got, offset + want,
              n < 0 ? std::strerror(errno) : "the file is shorter than when it was listed");
      got += n;
    }
    done += want;
  }
}

std::string TextStream::read(std::int64_t first, std::int64_t count) const {
  std::string bytes(std::size_t(count), '\0');
  read(first, count, bytes.data());
  return bytes;
}

}  // namespace kpipe::data
