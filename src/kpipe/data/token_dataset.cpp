#include "kpipe/data/token_dataset.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "kpipe/core/error.hpp"
#include "kpipe/h5/file.hpp"

namespace kpipe::data {
namespace {

// Enough for the file's own metadata and the chunk index's path to a window (a few nodes deep). HDF5 counts
// the nodes' bytes on disk, about a tenth of what it holds for them in memory: its default 2 MiB grew a
// rank by 22 MiB over a 4 GB file (60,000 chunks), 128 KiB holds about 1.5 MiB, and reads take as long.
constexpr std::size_t metadata_cache_bytes = std::size_t(128) << 10;

class DatasetTokens final : public TokenSource {
 public:
  DatasetTokens(std::string path, std::string dataset, std::int64_t tokens, int vocab, std::string label)
      : path_(std::move(path)), name_(std::move(dataset)), size_(tokens), vocab_(vocab), label_(std::move(label)) {}

  ~DatasetTokens() override {
    const auto hdf5 = h5::exclusive();
    dataset_.reset();
    file_.reset();
  }

  std::int64_t size() const override { return size_; }

  void read(std::int64_t first, std::int64_t count, Token* out) const override {
    const auto hdf5 = h5::exclusive();  // a checkpoint may be written beside the training (h5/file.hpp)
    open();
    if (wide_) {
      // Read at 64 bits: HDF5 would clamp an id beyond Token's range to its limit, and the message would name
      // that limit instead of the id the file holds.
      wide_ids_.resize(std::size_t(count));
      read_range(first, count, h5::memory_type<std::int64_t>(), wide_ids_.data());
      check_ids(first, wide_ids_.data(), count);
      std::copy(wide_ids_.begin(), wide_ids_.end(), out);
      return;
    }
    read_range(first, count, h5::memory_type<Token>(), out);
    check_ids(first, out, count);
  }

 private:
  void open() const {
    if (dataset_.valid()) return;
    const h5::QuietErrors quiet;
    try {
      file_ = h5::open_file_with_fixed_cache(path_, metadata_cache_bytes);
    } catch (const InputError& e) {
      throw InputError(fmt::format("{}: {}", label_, e.what()));
    }
    dataset_ = h5::open_dataset(file_.get(), name_, label_);
    const h5::Handle type(H5Dget_type(dataset_.get()), H5Tclose);
    wide_ = type.valid() && (H5Tget_size(type.get()) > sizeof(Token) ||
                             (H5Tget_size(type.get()) == sizeof(Token) && H5Tget_sign(type.get()) == H5T_SGN_NONE));
  }

  void read_range(std::int64_t first, std::int64_t count, hid_t memory_type, void* out) const {
    const auto failure = h5::read_range(dataset_.get(), memory_type, hsize_t(first), hsize_t(count), out);
    if (failure) throw InputError(damage(*failure, first, count));
  }

  // Checked here, for the tokens read, so that no kernel ever indexes the embedding outside the vocabulary.
  template <class Id> void check_ids(std::int64_t first, const Id* ids, std::int64_t count) const {
    const Id* bad = std::find_if(ids, ids + count, [this](Id t) { return t < 0 || t >= vocab_; });
    require(bad == ids + count, "{}: /{} holds token {} at position {}, outside the vocabulary [0, {})", label_, name_,
            bad == ids + count ? 0 : std::int64_t(*bad), first + (bad - ids), vocab_);
  }

  std::string damage(const h5::ReadFailure& failure, std::int64_t first, std::int64_t count) const {
    const std::string what = fmt::format("{}: /{} tokens [{}, {}) cannot be read", label_, name_, first, first + count);
    if (!failure.chunk)
      return fmt::format("{} ({}): the file is damaged", what, failure.reason);
    const h5::ChunkPosition& c = *failure.chunk;
    return fmt::format("{}: its chunk {} of {} (tokens [{}, {})) is damaged ({}); make the file again", what, c.index,
                       c.count, c.first, c.end, failure.reason);
  }

  std::string path_, name_;
  std::int64_t size_;
  int vocab_;
  std::string label_;
  mutable h5::Handle file_, dataset_;
  mutable bool wide_ = false;                   // stored wider than Token (int64, uint32): read at 64 bits
  mutable std::vector<std::int64_t> wide_ids_;  // those reads' buffer
};

}  // namespace

std::shared_ptr<const TokenSource> token_dataset(std::string path, std::string dataset, std::int64_t tokens, int vocab,
                                                 std::string label) {
  return std::make_shared<DatasetTokens>(std::move(path), std::move(dataset), tokens, vocab, std::move(label));
}

}  // namespace kpipe::data
