#include "kpipe/data/text_bytes.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

#include "kpipe/core/error.hpp"
#include "kpipe/core/files.hpp"

namespace kpipe::data {
namespace {

class TextBytes final : public TokenSource {
 public:
  TextBytes(std::string path, std::int64_t bytes, std::string label)
      : path_(std::move(path)), size_(bytes), label_(std::move(label)) {}
  ~TextBytes() override {
    if (fd_ >= 0) ::close(fd_);
  }
  TextBytes(const TextBytes&) = delete;
  TextBytes& operator=(const TextBytes&) = delete;

  std::int64_t size() const override { return size_; }

  void read(std::int64_t first, std::int64_t count, Token* out) const override {
    const std::lock_guard<std::mutex> lock(mutex_);
    open();
    // Through a bounded buffer: a validation pass may ask for many windows at once.
    constexpr std::int64_t block = 1 << 20;
    buffer_.resize(std::size_t(std::min(count, block)));
    for (std::int64_t done = 0; done < count;) {
      const std::int64_t want = std::min(count - done, block);
      const ssize_t got = ::pread(fd_, buffer_.data(), std::size_t(want), off_t(first + done));
      require(got > 0, "{}: bytes [{}, {}) cannot be read ({})", label_, first + done, first + done + want,
              got < 0 ? std::strerror(errno) : "the file is shorter than when it was opened");
      std::transform(buffer_.begin(), buffer_.begin() + got, out + done, [](unsigned char b) { return Token(b); });
      done += got;
    }
  }

 private:
  void open() const {
    if (fd_ >= 0) return;
    // Checked again: the file may have been replaced by a FIFO since (open would block on one).
    if (const std::string reason = unreadable_reason(path_); !reason.empty())
      throw InputError(fmt::format("{}: cannot open ({})", label_, reason));
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    require(fd_ >= 0, "{}: cannot open ({})", label_, std::strerror(errno));
  }

  std::string path_;
  std::int64_t size_;
  std::string label_;
  mutable std::mutex mutex_;
  mutable int fd_ = -1;
  mutable std::vector<unsigned char> buffer_;
};

}  // namespace

std::shared_ptr<const TokenSource> text_bytes(std::string path, std::int64_t bytes, std::string label) {
  return std::make_shared<TextBytes>(std::move(path), bytes, std::move(label));
}

}  // namespace kpipe::data
