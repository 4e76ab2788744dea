#include "kpipe/data/token_file_writer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "kpipe/core/error.hpp"
#include "kpipe/core/files.hpp"
#include "kpipe/data/token_file.hpp"
#include "kpipe/data/tokenizer_store.hpp"

namespace kpipe::data {
namespace {

// The smallest type that holds every id of the vocabulary (int32 beyond 16 bits).
hid_t stored_type(int vocab) {
  using namespace h5;
  return vocab <= 256 ? file_type<std::uint8_t>() : vocab <= 65536 ? file_type<std::uint16_t>() : file_type<std::int32_t>();
}

// InputErrors from the HDF5 layer name the partial file; the user knows the file by its name.
template <class F> void naming(const std::string& label, F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    const std::string what = e.what();
    throw InputError(what.rfind(label, 0) == 0 ? what : fmt::format("{}: {}", label, what));
  } catch (const std::system_error& e) {
    throw InputError(fmt::format("{}: {}", label, e.what()));
  }
}

}  // namespace

const char* to_string(Split split) { return split == Split::train ? "train" : "validation"; }

TokenFileWriter::TokenFileWriter(const std::string& path, Tokenizer tokenizer, std::string source)
    : path_(path), partial_(path + ".partial"), label_(fmt::format("token file '{}'", path)), source_(std::move(source)),
      tokenizer_(std::move(tokenizer)) {
  const h5::QuietErrors quiet;
  naming(label_, [&] {
    file_ = h5::create_file(partial_);
    for (const Split split : {Split::train, Split::validation})
      h5::append(file_.get(), to_string(split), stored_type(vocab()), h5::memory_type<Token>(), nullptr, 0);
  });
}

TokenFileWriter::~TokenFileWriter() {
  if (committed_) return;
  file_.reset();
  std::error_code ignored;
  std::filesystem::remove(partial_, ignored);
}

void TokenFileWriter::append(Split split, const Token* ids, std::size_t count) {
  const int vocab = this->vocab();
  const Token* bad = std::find_if(ids, ids + count, [vocab](Token t) { return t < 0 || t >= vocab; });
  require(bad == ids + count, "{}: {} token {} at position {} is outside the vocabulary [0, {})", label_,
          to_string(split), bad == ids + count ? 0 : *bad, tokens(split) + (bad - ids), vocab);
  const h5::QuietErrors quiet;
  // HDF5 narrows the ids to the stored type.
  naming(label_, [&] {
    h5::append(file_.get(), to_string(split), stored_type(vocab), h5::memory_type<Token>(), ids, count);
  });
  tokens_[std::size_t(split)] += std::int64_t(count);
}

void TokenFileWriter::append_bytes(Split split, const char* bytes, std::size_t count) {
  require(vocab() == byte_vocab, "{}: bytes appended as ids, but the vocabulary is {}", label_, vocab());
  const h5::QuietErrors quiet;
  naming(label_, [&] {
    h5::append(file_.get(), to_string(split), stored_type(vocab()), h5::memory_type<std::uint8_t>(), bytes, count);
  });
  tokens_[std::size_t(split)] += std::int64_t(count);
}

void TokenFileWriter::commit() {
  const h5::QuietErrors quiet;
  naming(label_, [&] {
    write_tokenizer(file_.get(), tokenizer_, label_);
    h5::write_attribute(file_.get(), "format", std::string(token_file_format));
    h5::write_attribute(file_.get(), "version", std::int64_t(token_file_version));
    h5::write_attribute(file_.get(), "vocab", std::int64_t(vocab()));
    h5::write_attribute(file_.get(), "source", source_);
    h5::close_file(file_, partial_);
    fsync_path(partial_);  // on storage before it takes the name
  });
  std::error_code error;
  std::filesystem::rename(partial_, path_, error);
  require(!error, "{}: cannot rename {} into place ({})", label_, partial_, error.message());
  committed_ = true;
}

}  // namespace kpipe::data
