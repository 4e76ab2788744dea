#pragma once
// The filters of every chunked dataset kpipe writes, and chunks written as stored: shuffle and deflate
// (level 4) where the HDF5 build can encode deflate, then a Fletcher-32 checksum of the stored bytes, which
// HDF5 verifies on every read. ChunkFilters::apply computes a chunk's stored bytes without calling HDF5, so
// that a writer can compress many chunks on many threads (HDF5 itself runs its filters on one) and hand
// them to write_stored_chunk; HDF5 reads them back like any other chunk.
#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kpipe::h5 {

struct ChunkFilters {
  bool deflate = false;

  static ChunkFilters of_this_build();  // deflate where the build can encode it (deflate_available)
  // Onto a dataset-creation property list with a chunked layout.
  void set_on(hid_t dataset_creation) const;
  // The bytes HDF5 stores for a whole chunk of `bytes` bytes of elements of element_size bytes each.
  // Touches no HDF5 state: safe on any thread.
  std::vector<unsigned char> apply(const unsigned char* chunk, std::size_t bytes, std::size_t element_size) const;
};

// HDF5's Fletcher-32 of `bytes` (16-bit words, most significant byte first; an odd last byte is a word's
// high byte), as its fletcher32 filter stores it after a chunk.
std::uint32_t fletcher32(const unsigned char* data, std::size_t bytes);

// Sets a 1-D extendible dataset's length.
void set_length(hid_t dataset, hsize_t elements, const std::string& label);
// Writes the chunk that starts at element `first` (a multiple of the chunk length) of a 1-D chunked dataset
// whose filters are `ChunkFilters::of_this_build()`'s, as `stored` (ChunkFilters::apply's bytes), past
// HDF5's filters. The dataset must already reach `first`. InputError "<label>: ..." on failure.
void write_stored_chunk(hid_t dataset, hsize_t first, const std::vector<unsigned char>& stored, const std::string& label);

}  // namespace kpipe::h5
