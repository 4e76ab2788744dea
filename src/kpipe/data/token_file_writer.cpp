#include "kpipe/data/token_file_writer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <filesystem>
#include <system_error>
#include <thread>

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

// Calls f(k) for k in [0, count) on up to `threads` threads; the first failure is rethrown.
template <class F> void on_threads(std::size_t count, int threads, const F& f) {
  const std::size_t workers = std::min<std::size_t>(count, std::size_t(std::max(threads, 1)));
  std::vector<std::exception_ptr> failures(workers);
  auto work = [&](std::size_t w) {
    try {
      for (std::size_t k = w; k < count; k += workers) f(k);
    } catch (...) {
      failures[w] = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  for (std::size_t w = 1; w < workers; ++w) pool.emplace_back(work, w);
  if (workers > 0) work(0);
  for (auto& thread : pool) thread.join();
  for (const auto& failure : failures)
    if (failure) std::rethrow_exception(failure);
}

}  // namespace

const char* to_string(Split split) { return split == Split::train ? "train" : "validation"; }

TokenFileWriter::TokenFileWriter(const std::string& path, Tokenizer tokenizer, std::string source, int threads)
    : path_(path), partial_(path + ".partial"), label_(fmt::format("token file '{}'", path)), source_(std::move(source)),
      tokenizer_(std::move(tokenizer)),
      threads_(threads > 0 ? threads : int(std::max(1u, std::thread::hardware_concurrency()))),
      filters_(h5::ChunkFilters::of_this_build()) {
  const h5::QuietErrors quiet;
  const hid_t type = stored_type(vocab());
  element_size_ = H5Tget_size(type);
  naming(label_, [&] {
    file_ = h5::create_file(partial_);
    for (const Split split : {Split::train, Split::validation})
      splits_[std::size_t(split)].dataset = h5::create_extendible(file_.get(), to_string(split), type);
    chunk_length_ = h5::chunk_length(splits_[0].dataset.get());
  });
}

TokenFileWriter::~TokenFileWriter() {
  if (committed_) return;
  for (SplitData& split : splits_) split.dataset.reset();
  file_.reset();
  std::error_code ignored;
  std::filesystem::remove(partial_, ignored);
}

void TokenFileWriter::append(Split split, const Token* ids, std::size_t count) {
  const int vocab = this->vocab();
  SplitData& data = splits_[std::size_t(split)];
  const Token* bad = std::find_if(ids, ids + count, [vocab](Token t) { return t < 0 || t >= vocab; });
  require(bad == ids + count, "{}: {} token {} at position {} is outside the vocabulary [0, {})", label_,
          to_string(split), bad == ids + count ? 0 : *bad, data.tokens + (bad - ids), vocab);
  // Stored little-endian at the file's width.
  const std::size_t at = data.pending.size();
  data.pending.resize(at + count * element_size_);
  unsigned char* out = data.pending.data() + at;
  for (std::size_t i = 0; i < count; ++i)
    for (std::size_t b = 0; b < element_size_; ++b)
      *out++ = static_cast<unsigned char>(static_cast<std::uint32_t>(ids[i]) >> (8 * b));
  data.tokens += std::int64_t(count);
  write_chunks(data, false);
}

void TokenFileWriter::append_bytes(Split split, const char* bytes, std::size_t count) {
  require(vocab() == byte_vocab, "{}: bytes appended as ids, but the vocabulary is {}", label_, vocab());
  SplitData& data = splits_[std::size_t(split)];
  data.pending.insert(data.pending.end(), bytes, bytes + count);
  data.tokens += std::int64_t(count);
  write_chunks(data, false);
}

void TokenFileWriter::write_chunks(SplitData& split, bool last) {
  const std::size_t chunk_bytes = std::size_t(chunk_length_) * element_size_;
  std::size_t chunks = split.pending.size() / chunk_bytes;
  if (last && split.pending.size() % chunk_bytes != 0) split.pending.resize(++chunks * chunk_bytes, 0);
  if (chunks == 0) return;
  std::vector<std::vector<unsigned char>> stored(chunks);
  on_threads(chunks, threads_, [&](std::size_t k) {
    stored[k] = filters_.apply(split.pending.data() + k * chunk_bytes, chunk_bytes, element_size_);
  });
  const hsize_t first = split.chunks_written * chunk_length_;
  naming(label_, [&] {
    h5::set_length(split.dataset.get(), last ? hsize_t(split.tokens) : first + chunks * chunk_length_, partial_);
    for (std::size_t k = 0; k < chunks; ++k)
      h5::write_stored_chunk(split.dataset.get(), first + k * chunk_length_, stored[k], partial_);
  });
  split.chunks_written += chunks;
  split.pending.erase(split.pending.begin(), split.pending.begin() + std::ptrdiff_t(std::min(split.pending.size(), chunks * chunk_bytes)));
}

void TokenFileWriter::commit() {
  const h5::QuietErrors quiet;
  for (SplitData& split : splits_) write_chunks(split, true);
  naming(label_, [&] {
    for (SplitData& split : splits_) split.dataset.reset();
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
