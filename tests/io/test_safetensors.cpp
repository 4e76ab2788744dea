// safetensors as kpipe reads and writes it: what the writer writes comes back (F32 exactly, BF16 rounded to
// nearest even, F16 and F64 converted); every kind of damage to the header is refused with one line naming the file
// (header length, JSON, dtype, shape against offsets, order, gaps, overlaps, truncation, trailing bytes), and no
// flipped byte anywhere in a file makes the reader crash or read outside the file.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "data/temp_dir.hpp"
#include "kpipe/core/bfloat16.hpp"
#include "kpipe/core/error.hpp"
#include "kpipe/io/safetensors.hpp"

namespace kpipe {
namespace {

// A file of the given header text and data bytes, as the format lays them out.
std::string file_bytes(const std::string& header, const std::string& data) {
  std::string bytes(8, '\0');
  const std::uint64_t n = header.size();
  for (int k = 0; k < 8; ++k) bytes[std::size_t(k)] = char((n >> (8 * k)) & 0xFF);
  return bytes + header + data;
}

std::string message_of(const std::string& path) {
  try {
    io::SafetensorsReader reader(path);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Safetensors, WhatIsWrittenComesBack) {
  test::TempDir tmp;
  const std::string path = tmp.path("m.safetensors");
  const std::vector<float> a = {1.0f, -2.5f, 3.25f, 1e-3f, 7.0f, -0.0f}, b = {0.1f, 0.2f, 1.0f / 3};
  {
    io::SafetensorsWriter writer(path, {{"a", {2, 3}}, {"b.weight", {3}}}, "F32", {{"format", "pt"}});
    writer.write(a);
    writer.write(b);
    writer.finish();
  }
  const io::SafetensorsReader reader(path);
  ASSERT_EQ(reader.tensors().size(), 2u);
  EXPECT_EQ(reader.metadata().at("format"), "pt");
  EXPECT_EQ(reader.find("a")->shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(reader.read_floats(*reader.find("a")), a);
  EXPECT_EQ(reader.read_floats(*reader.find("b.weight")), b);
  EXPECT_EQ(reader.find("c"), nullptr);

  const std::string half = tmp.path("bf16.safetensors");
  {
    io::SafetensorsWriter writer(half, {{"b", {3}}}, "BF16", {});
    writer.write(b);
    writer.finish();
  }
  const io::SafetensorsReader bf16(half);
  const auto back = bf16.read_floats(*bf16.find("b"));
  for (std::size_t k = 0; k < b.size(); ++k) EXPECT_EQ(back[k], float(kpipe::bf16(b[k]))) << k;
}

TEST(Safetensors, HalfAndDoubleAreConvertedExactly) {
  test::TempDir tmp;
  // F16 1.0, -2.0, 2^-24 (the smallest subnormal), 65504 (the largest); F64 0.1.
  const std::uint16_t halves[] = {0x3C00, 0xC000, 0x0001, 0x7BFF};
  const double d = 0.1;
  std::string data(reinterpret_cast<const char*>(halves), sizeof halves);
  data += std::string(reinterpret_cast<const char*>(&d), 8);
  const std::string path = tmp.write(
      "x.safetensors", file_bytes(R"({"h":{"dtype":"F16","shape":[4],"data_offsets":[0,8]},)"
                                  R"("d":{"dtype":"F64","shape":[1],"data_offsets":[8,16]}})",
                                  data));
  const io::SafetensorsReader reader(path);
  EXPECT_EQ(reader.read_floats(*reader.find("h")), (std::vector<float>{1.0f, -2.0f, std::ldexp(1.0f, -24), 65504.0f}));
  EXPECT_EQ(reader.read_floats(*reader.find("d")), std::vector<float>{0.1f});
}

TEST(Safetensors, DamagedHeadersAreRefusedNamingTheFile) {
  test::TempDir tmp;
  const std::string ok_entry = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::string eight(8, '\1');
  struct Case {
    const char* what;
    std::string bytes;
    const char* says;
  };
  std::string huge_length = file_bytes("{" + ok_entry + "}", eight);
  huge_length[5] = '\x7f';
  const std::vector<Case> cases = {
      {"empty", "", "not a safetensors file"},
      {"header length beyond the file", huge_length, "header length"},
      {"not JSON", file_bytes("{\"a\": [", eight), "not a JSON object"},
      {"an array", file_bytes("[1, 2]", eight), "not a JSON object"},
      {"unknown dtype", file_bytes(R"({"a":{"dtype":"F31","shape":[2],"data_offsets":[0,8]}})", eight), "not a safetensors dtype"},
      {"negative size", file_bytes(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight), "shape"},
      {"offsets reversed", file_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", eight), "data_offsets"},
      {"shape and offsets disagree", file_bytes(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight), "needs 12"},
      {"no offsets", file_bytes(R"({"a":{"dtype":"F32","shape":[2]}})", eight), "dtype, shape and data_offsets"},
      {"a gap", file_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight), "a gap before it"},
      {"an overlap", file_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight), "overlaps"},
      {"truncated", file_bytes("{" + ok_entry + "}", "1234"), "truncated"},
      {"trailing bytes", file_bytes("{" + ok_entry + "}", eight + "x"), "trailing bytes"},
      {"huge shape", file_bytes(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", eight), "too many"},
      {"metadata not strings", file_bytes(R"({"__metadata__":{"format":1},)" + ok_entry + "}", eight), "__metadata__"},
  };
  for (const Case& c : cases) {
    const std::string path = tmp.write("bad.safetensors", c.bytes);
    const std::string message = message_of(path);
    EXPECT_NE(message.find(c.says), std::string::npos) << c.what << ": " << message;
    EXPECT_NE(message.find(path), std::string::npos) << c.what << ": " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << c.what;
  }
  // A well-formed file of integers is read as far as its header; its values are refused.
  const std::string ints = tmp.write("i.safetensors", file_bytes(R"({"i":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", eight));
  const io::SafetensorsReader reader(ints);
  EXPECT_THROW(reader.read_floats(*reader.find("i")), InputError);
}

TEST(Safetensors, NoFlippedByteCrashesTheReader) {
  test::TempDir tmp;
  const std::string path = tmp.path("m.safetensors");
  {
    io::SafetensorsWriter writer(path, {{"x.weight", {4, 4}}, {"x.bias", {4}}}, "F32", {{"format", "pt"}});
    writer.write(std::vector<float>(16, 0.5f));
    writer.write(std::vector<float>(4, -1.0f));
    writer.finish();
  }
  std::string good;
  {
    std::ifstream in(path, std::ios::binary);
    good.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::mt19937 rng(5);
  int refused = 0, read = 0;
  for (int trial = 0; trial < 400; ++trial) {
    std::string bad = good;
    const std::size_t at = std::uniform_int_distribution<std::size_t>(0, bad.size() - 1)(rng);
    bad[at] = char(bad[at] ^ (1 << std::uniform_int_distribution<int>(0, 7)(rng)));
    const std::string file = tmp.write("flipped.safetensors", bad);
    try {
      const io::SafetensorsReader reader(file);
      for (const auto& t : reader.tensors()) {
        try {
          EXPECT_EQ(std::int64_t(reader.read_floats(t).size()), t.numel());
        } catch (const InputError&) {  // a dtype flipped into an integer one
        }
      }
      ++read;
    } catch (const InputError&) {
      ++refused;
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(read, 0);  // flips in the data (no checksum in the format) read as other values
}

}  // namespace
}  // namespace kpipe
