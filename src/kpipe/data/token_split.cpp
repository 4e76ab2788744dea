#include "kpipe/data/token_split.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace kpipe::data {
namespace {

class MemoryTokens final : public TokenSource {
 public:
  explicit MemoryTokens(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}
  std::int64_t size() const override { return std::int64_t(tokens_.size()); }
  void read(std::int64_t first, std::int64_t count, Token* out) const override {
    std::copy_n(tokens_.begin() + first, count, out);
  }

 private:
  std::vector<Token> tokens_;
};

class ConcatenatedTokens final : public TokenSource {
 public:
  ConcatenatedTokens(TokenSplit front, TokenSplit back) : front_(std::move(front)), back_(std::move(back)) {}
  std::int64_t size() const override { return front_.size() + back_.size(); }
  void read(std::int64_t first, std::int64_t count, Token* out) const override {
    const std::int64_t from_front = std::clamp<std::int64_t>(front_.size() - first, 0, count);
    if (from_front > 0) front_.read(first, from_front, out);
    if (count > from_front) back_.read(first + from_front - front_.size(), count - from_front, out + from_front);
  }

 private:
  TokenSplit front_, back_;
};

}  // namespace

TokenSplit::TokenSplit(std::vector<Token> tokens) : TokenSplit(std::make_shared<MemoryTokens>(std::move(tokens))) {}

TokenSplit::TokenSplit(std::shared_ptr<const TokenSource> source)
    : source_(std::move(source)), size_(source_ ? source_->size() : 0) {}

void TokenSplit::read(std::int64_t first, std::int64_t count, Token* out) const {
  if (first < 0 || count < 0 || first > size_ - count)
    throw std::out_of_range(fmt::format("kpipe::data::TokenSplit::read: tokens [{}, {}) of {}", first, first + count,
                                        size_));
  if (count > 0) source_->read(first_ + first, count, out);
}

std::vector<Token> TokenSplit::read_all() const {
  std::vector<Token> tokens(static_cast<std::size_t>(size_));
  read(0, size_, tokens.data());
  return tokens;
}

TokenSplit TokenSplit::slice(std::int64_t first, std::int64_t count) const {
  if (first < 0 || count < 0 || first > size_ - count)
    throw std::out_of_range(fmt::format("kpipe::data::TokenSplit::slice: tokens [{}, {}) of {}", first, first + count,
                                        size_));
  TokenSplit part = *this;
  part.first_ = first_ + first;
  part.size_ = count;
  return part;
}

TokenSplit concatenate(const TokenSplit& front, const TokenSplit& back) {
  return TokenSplit(std::make_shared<ConcatenatedTokens>(front, back));
}

void check_readable(const TokenSplit& tokens) {
  constexpr std::int64_t block = 1 << 20;
  std::vector<Token> buffer(std::size_t(std::min(block, tokens.size())));
  for (std::int64_t first = 0; first < tokens.size(); first += block)
    tokens.read(first, std::min(block, tokens.size() - first), buffer.data());
}

}  // namespace kpipe::data
