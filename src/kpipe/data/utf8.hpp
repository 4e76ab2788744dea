#pragma once
// UTF-8 code points, for the tokenizers that work on characters (data/byte_level_bpe.hpp, data/hf_tokenizer.hpp).
#include <string>
#include <string_view>

namespace kpipe::data {

// What an invalid byte (not the start of a well-formed UTF-8 sequence, RFC 3629) decodes to, one byte long.
inline constexpr char32_t invalid_code_point = 0xFFFFFFFF;

struct CodePoint {
  char32_t code;
  std::size_t length;  // in bytes
};

// The code point that starts at byte i of s (i < s.size()).
inline CodePoint next_code_point(std::string_view s, std::size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return {c, 1};
  std::size_t length = 0;
  char32_t code = 0, low = 0;
  if (c >= 0xC2 && c <= 0xDF) length = 2, code = c & 0x1F, low = 0x80;
  else if (c >= 0xE0 && c <= 0xEF) length = 3, code = c & 0x0F, low = 0x800;
  else if (c >= 0xF0 && c <= 0xF4) length = 4, code = c & 0x07, low = 0x10000;
  if (length == 0 || i + length > s.size()) return {invalid_code_point, 1};
  for (std::size_t k = 1; k < length; ++k) {
    const auto next = static_cast<unsigned char>(s[i + k]);
    if ((next & 0xC0) != 0x80) return {invalid_code_point, 1};
    code = code << 6 | (next & 0x3F);
  }
  if (code < low || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return {invalid_code_point, 1};
  return {code, length};
}

inline void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += char(c);
  } else if (c < 0x800) {
    out += {char(0xC0 | (c >> 6)), char(0x80 | (c & 0x3F))};
  } else if (c < 0x10000) {
    out += {char(0xE0 | (c >> 12)), char(0x80 | ((c >> 6) & 0x3F)), char(0x80 | (c & 0x3F))};
  } else {
    out += {char(0xF0 | (c >> 18)), char(0x80 | ((c >> 12) & 0x3F)), char(0x80 | ((c >> 6) & 0x3F)),
            char(0x80 | (c & 0x3F))};
  }
}

}  // namespace kpipe::data
