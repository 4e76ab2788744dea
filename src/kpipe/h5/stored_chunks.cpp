#include "kpipe/h5/stored_chunks.hpp"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>

#include "kpipe/core/error.hpp"
#include "kpipe/h5/file.hpp"

namespace kpipe::h5 {
namespace {

constexpr int deflate_level = 4;

// HDF5's shuffle: the first bytes of every element, then the second bytes, and so on (better deflate input
// for multi-byte integers); nothing to do for single bytes.
std::vector<unsigned char> shuffled(const unsigned char* data, std::size_t bytes, std::size_t element_size) {
  std::vector<unsigned char> out(data, data + bytes);
  if (element_size <= 1) return out;
  const std::size_t elements = bytes / element_size;
  for (std::size_t e = 0; e < elements; ++e)
    for (std::size_t b = 0; b < element_size; ++b) out[b * elements + e] = data[e * element_size + b];
  return out;
}

std::vector<unsigned char> deflated(const std::vector<unsigned char>& data) {
  uLongf size = compressBound(uLong(data.size()));
  std::vector<unsigned char> out(size);
  const int status = compress2(out.data(), &size, data.data(), uLong(data.size()), deflate_level);
  if (status != Z_OK) throw std::runtime_error(fmt::format("kpipe::h5: deflate failed ({})", status));
  out.resize(size);
  return out;
}

}  // namespace

std::uint32_t fletcher32(const unsigned char* data, std::size_t bytes) {
  // Two running sums modulo 65535, folded (end-around carry) often enough that 32 bits never overflow:
  // 360 words at most between folds.
  std::uint32_t low = 0, high = 0;
  auto fold = [](std::uint32_t s) { return (s & 0xffff) + (s >> 16); };
  const std::size_t words = bytes / 2;
  for (std::size_t done = 0; done < words;) {
    const std::size_t stop = std::min(words, done + 360);
    for (; done < stop; ++done) {
      low += std::uint32_t(data[2 * done]) << 8 | data[2 * done + 1];
      high += low;
    }
    low = fold(low);
    high = fold(high);
  }
  if (bytes % 2 == 1) {
    low += std::uint32_t(data[bytes - 1]) << 8;
    high += low;
    low = fold(low);
    high = fold(high);
  }
  return fold(high) << 16 | fold(low);
}

ChunkFilters ChunkFilters::of_this_build() { return ChunkFilters{deflate_available()}; }

void ChunkFilters::set_on(hid_t dataset_creation) const {
  if (deflate) {
    H5Pset_shuffle(dataset_creation);
    H5Pset_deflate(dataset_creation, deflate_level);
  }
  H5Pset_fletcher32(dataset_creation);  // last: over the bytes on disk
}

std::vector<unsigned char> ChunkFilters::apply(const unsigned char* chunk, std::size_t bytes,
                                               std::size_t element_size) const {
  std::vector<unsigned char> stored =
      deflate ? deflated(shuffled(chunk, bytes, element_size)) : std::vector<unsigned char>(chunk, chunk + bytes);
  const std::uint32_t sum = fletcher32(stored.data(), stored.size());
  for (int k = 0; k < 4; ++k) stored.push_back(static_cast<unsigned char>(sum >> (8 * k)));  // little-endian
  return stored;
}

void set_length(hid_t dataset, hsize_t elements, const std::string& label) {
  const QuietErrors quiet;
  if (H5Dset_extent(dataset, &elements) < 0)
    throw InputError(fmt::format("{}: cannot extend a dataset to {} elements ({})", label, elements, error_text()));
}

void write_stored_chunk(hid_t dataset, hsize_t first, const std::vector<unsigned char>& stored, const std::string& label) {
  const QuietErrors quiet;
  if (H5Dwrite_chunk(dataset, H5P_DEFAULT, 0, &first, stored.size(), stored.data()) < 0)
    throw InputError(fmt::format("{}: cannot write the chunk at element {} ({})", label, first, error_text()));
}

}  // namespace kpipe::h5
