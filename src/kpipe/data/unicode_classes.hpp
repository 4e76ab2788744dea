#pragma once
// The Unicode character classes of GPT-2's pre-tokenization pattern: letters (\p{L}), numbers (\p{N}) and
// white space (\s). Letters and numbers are tables generated from the Unicode database
// (tools/unicode_classes.py); white space is Unicode's White_Space property, a fixed list.
namespace kpipe::data {

bool is_letter(char32_t c);
bool is_number(char32_t c);
const char* unicode_version();  // of the letter and number tables

inline bool is_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

}  // namespace kpipe::data
