// Chunks compressed outside HDF5 (h5/stored_chunks.hpp) and written as stored read back through HDF5's own
// filters, checksum verified, at every width the token files use.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cstdint>
#include <vector>

#include "data/temp_dir.hpp"
#include "kpipe/core/rng.hpp"
#include "kpipe/h5/file.hpp"
#include "kpipe/h5/stored_chunks.hpp"

namespace kpipe::h5 {
namespace {

// Little-endian bytes of the values, as the file stores them.
template <class T> std::vector<unsigned char> bytes_of(const std::vector<T>& values) {
  std::vector<unsigned char> bytes;
  for (const T v : values)
    for (std::size_t b = 0; b < sizeof(T); ++b) bytes.push_back(static_cast<unsigned char>(std::uint64_t(v) >> (8 * b)));
  return bytes;
}

template <class T> void round_trip(const test::TempDir& dir, const char* name) {
  const std::string path = dir.path(std::string(name) + ".h5");
  const ChunkFilters filters = ChunkFilters::of_this_build();
  std::vector<T> values(150000);  // two whole chunks and a part of one, at any width
  for (std::size_t i = 0; i < values.size(); ++i)
    values[i] = T(i % 7 == 0 ? rng::bits64(rng::make_key(1, i, 0, "test"), 0) : i / 3);
  std::int32_t chunk = 0;
  {
    Handle file = create_file(path);
    const Handle dataset = create_extendible(file.get(), "values", file_type<T>());
    chunk = std::int32_t(chunk_length(dataset.get()));
    ASSERT_GT(chunk, 0);
    std::vector<unsigned char> bytes = bytes_of(values);
    bytes.resize((values.size() + chunk - 1) / chunk * chunk * sizeof(T), 0);  // the last chunk padded
    set_length(dataset.get(), values.size(), path);
    for (std::size_t first = 0; first < values.size(); first += std::size_t(chunk))
      write_stored_chunk(dataset.get(), first,
                         filters.apply(bytes.data() + first * sizeof(T), std::size_t(chunk) * sizeof(T), sizeof(T)),
                         path);
  }
  const Handle file = open_file(path);
  const Handle dataset = open_dataset(file.get(), "values", path);
  std::vector<T> back(values.size());
  EXPECT_FALSE(read_range(dataset.get(), memory_type<T>(), 0, values.size(), back.data()));  // checksums pass
  EXPECT_EQ(back, values) << name;
  std::vector<std::int32_t> wide(100);  // a range across a chunk boundary, widened by HDF5
  EXPECT_FALSE(read_range(dataset.get(), memory_type<std::int32_t>(), hsize_t(chunk) - 50, 100, wide.data()));
  for (int i = 0; i < 100; ++i) EXPECT_EQ(wide[i], std::int32_t(values[std::size_t(chunk) - 50 + i])) << name << " " << i;
}

TEST(StoredChunks, ReadBackThroughHdf5sFiltersAtEveryWidth) {
  test::TempDir dir;
  round_trip<std::uint8_t>(dir, "u8");
  round_trip<std::uint16_t>(dir, "u16");
  round_trip<std::int32_t>(dir, "i32");
}

TEST(StoredChunks, Fletcher32KnownValues) {
  // Two words 0x0102, 0x0304: low = 0x0102 + 0x0304, high = 0x0102 + (0x0102 + 0x0304).
  const unsigned char data[] = {1, 2, 3, 4, 5};
  EXPECT_EQ(fletcher32(data, 4), (0x0102u + 0x0102u + 0x0304u) << 16 | (0x0102u + 0x0304u));
  // An odd last byte is the high byte of one more word.
  EXPECT_EQ(fletcher32(data, 5), (0x0102u + 0x0406u + 0x0906u) << 16 | 0x0906u);
  EXPECT_EQ(fletcher32(data, 0), 0u);
  // Sums are kept modulo 65535: 0xffff words add nothing.
  const std::vector<unsigned char> ones(2000, 0xff);
  EXPECT_EQ(fletcher32(ones.data(), ones.size()) % 65535u, 0u);
}

}  // namespace
}  // namespace kpipe::h5
