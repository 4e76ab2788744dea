#include "kpipe/data/byte_level_bpe.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <queue>

#include "kpipe/core/error.hpp"
#include "kpipe/data/unicode_classes.hpp"
#include "kpipe/data/utf8.hpp"

namespace kpipe::data {

namespace {

using nlohmann::json;

constexpr char32_t invalid = invalid_code_point;
using Utf8 = CodePoint;

// The character classes of the pattern; an invalid byte is "other" (neither space, letter nor number).
bool space(char32_t c) { return c != invalid && is_whitespace(c); }
bool letter(char32_t c) { return c != invalid && is_letter(c); }
bool number(char32_t c) { return c != invalid && is_number(c); }
bool other(char32_t c) { return !space(c) && !letter(c) && !number(c); }

// The length of GPT-2's pattern's match at i (the pattern matches at every position of a non-empty text).
std::size_t gpt2_piece(std::string_view s, std::size_t i) {
  const auto at = [&](std::size_t k) { return k < s.size() ? next_code_point(s, k) : Utf8{invalid, 0}; };
  // A run of characters of one class from k; its end.
  const auto run = [&](std::size_t k, bool (*in)(char32_t)) {
    while (k < s.size()) {
      const Utf8 u = next_code_point(s, k);
      if (!in(u.code)) break;
      k += u.length;
    }
    return k;
  };
  if (s[i] == '\'') {  // 's|'t|'re|'ve|'m|'ll|'d
    const std::string_view rest = s.substr(i + 1, 2);
    for (std::string_view c : {"re", "ve", "ll"})
      if (rest == c) return 3;
    if (!rest.empty() && std::string_view("stmd").find(rest[0]) != std::string_view::npos) return 2;
  }
  const Utf8 first = at(i);
  const Utf8 second = s[i] == ' ' ? at(i + 1) : Utf8{invalid, 0};
  for (bool (*in)(char32_t) : {letter, number, other}) {  //  ?\p{L}+|  ?\p{N}+|  ?[^\s\p{L}\p{N}]+
    if (second.length > 0 && in(second.code)) return run(i + 1, in) - i;
    if (in(first.code)) return run(i, in) - i;
  }
  // \s+(?!\S)|\s+: a run of white space, less its last character when something else follows it.
  const std::size_t end = run(i, space);
  if (end < s.size() && end - i > first.length) {
    std::size_t last = i;  // the start of the run's last character
    for (std::size_t k = i; k < end; k += next_code_point(s, k).length) last = k;
    return last - i;
  }
  return end - i;
}

const json& key(const json& j, const char* name) {
  static const json null_value;
  return j.is_object() && j.contains(name) ? j[name] : null_value;
}

bool flag(const json& j, const char* name, bool otherwise) {
  const json& v = key(j, name);
  return v.is_boolean() ? v.get<bool>() : otherwise;
}

}  // namespace

std::vector<std::string_view> gpt2_pieces(std::string_view text) {
  std::vector<std::string_view> pieces;
  for (std::size_t i = 0, n; i < text.size(); i += n) {
    n = gpt2_piece(text, i);
    pieces.push_back(text.substr(i, n));
  }
  return pieces;
}

char32_t byte_character(unsigned char byte) {
  const auto printable = [](unsigned b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; };
  if (printable(byte)) return byte;
  unsigned index = 0;
  for (unsigned b = 0; b < byte; ++b) index += printable(b) ? 0 : 1;
  return 256 + index;
}

ByteLevelBpe::ByteLevelBpe(const std::string& tokenizer_json, const std::string& label) {
  const json j = json::parse(tokenizer_json, nullptr, false);
  require(!j.is_discarded() && j.is_object(), "{}: not JSON", label);
  const auto refuse = [&](const char* name, const json& value, const char* expected) {
    throw InputError(fmt::format("{}: {} = {}: kpipe runs GPT-2's byte-level BPE exactly, which has {}", label, name,
                                 value.dump(), expected));
  };
  const json& model = key(j, "model");
  if (key(model, "type") != "BPE") refuse("model.type", key(model, "type"), "\"BPE\"");
  for (const char* name : {"dropout", "continuing_subword_prefix", "end_of_word_suffix"})
    if (!key(model, name).is_null() && key(model, name) != "") refuse(name, key(model, name), "none");
  if (flag(model, "byte_fallback", false)) refuse("model.byte_fallback", true, "none (every byte is a token)");
  ignore_merges_ = flag(model, "ignore_merges", false);
  if (!key(j, "normalizer").is_null()) refuse("normalizer", key(j, "normalizer"), "none");
  if (!key(j, "truncation").is_null()) refuse("truncation", key(j, "truncation"), "none");
  const json& pre = key(j, "pre_tokenizer");
  if (key(pre, "type") != "ByteLevel") refuse("pre_tokenizer", pre, "a ByteLevel pre-tokenizer");
  add_prefix_space_ = flag(pre, "add_prefix_space", false);
  use_regex_ = flag(pre, "use_regex", true);
  const json& post = key(j, "post_processor");
  if (!post.is_null() && key(post, "type") != "ByteLevel")
    refuse("post_processor", post, "none or ByteLevel (no tokens added to the text)");

  // The vocabulary: the model's, then the added tokens (which may repeat some of its ids).
  std::vector<std::pair<std::string, bool>> by_id;  // (piece, added)
  const auto place = [&](std::int64_t id, const std::string& piece, bool added) {
    require(id >= 0 && id < (std::int64_t(1) << 24), "{}: token {}: id {} out of range", label, json(piece).dump(), id);
    if (by_id.size() <= std::size_t(id)) by_id.resize(std::size_t(id) + 1);
    auto& slot = by_id[std::size_t(id)];
    require(slot.first.empty() || (slot.first == piece && added),
            "{}: id {} is both {} and {}", label, id, json(slot.first).dump(), json(piece).dump());
    slot = {piece, added || slot.second};
  };
  const json& vocab = key(model, "vocab");
  require(vocab.is_object() && !vocab.empty(), "{}: model.vocab: not an object of tokens", label);
  for (const auto& [piece, id] : vocab.items()) {
    require(id.is_number_integer() && !piece.empty(), "{}: model.vocab {}: not a token and its id", label,
            json(piece).dump());
    place(id.get<std::int64_t>(), piece, false);
  }
  const json& added = key(j, "added_tokens");
  require(added.is_null() || added.is_array(), "{}: added_tokens: not a list", label);
  for (const json& a : added.is_array() ? added : json::array()) {
    require(key(a, "content").is_string() && key(a, "id").is_number_integer() && !key(a, "content").get<std::string>().empty(),
            "{}: added_tokens: {} is not a token with content and id", label, a.dump());
    for (const char* name : {"single_word", "lstrip", "rstrip"})
      if (flag(a, name, false))
        throw InputError(fmt::format("{}: added token {}: {} = true, which kpipe does not run", label,
                                     key(a, "content").dump(), name));
    added_.push_back({Token(key(a, "id").get<std::int64_t>()), key(a, "content").get<std::string>(),
                      flag(a, "normalized", true)});
    place(added_.back().id, added_.back().content, true);
  }
  // Byte characters back to bytes.
  std::unordered_map<char32_t, unsigned char> byte_of;
  for (unsigned b = 0; b < 256; ++b) byte_of[byte_character(static_cast<unsigned char>(b))] = static_cast<unsigned char>(b);
  tokens_.resize(by_id.size());
  pieces_.resize(by_id.size());
  for (std::size_t id = 0; id < by_id.size(); ++id) {
    const auto& [piece, is_added] = by_id[id];
    require(!piece.empty(), "{}: id {} has no token (the ids must run from 0 without a gap)", label, id);
    pieces_[id] = piece;
    if (is_added && !vocab.contains(piece)) {
      tokens_[id] = piece;  // an added token stands for its text
      continue;
    }
    std::string bytes;
    for (std::size_t k = 0; k < piece.size();) {
      const Utf8 u = next_code_point(piece, k);
      const auto it = byte_of.find(u.code);
      require(u.code != invalid && it != byte_of.end(), "{}: token {} (id {}) is not written in GPT-2's byte characters",
              label, json(piece).dump(), id);
      bytes += char(it->second);
      k += u.length;
    }
    tokens_[id] = bytes;
    ids_.emplace(bytes, Token(id));
  }
  for (unsigned b = 0; b < 256; ++b) {
    const auto it = ids_.find(std::string(1, char(b)));
    require(it != ids_.end(), "{}: model.vocab has no token for byte 0x{:02X}", label, b);
    byte_ids_[b] = it->second;
  }
  const json& merges = key(model, "merges");
  require(merges.is_array(), "{}: model.merges: not a list", label);
  std::int32_t rank = 0;
  for (const json& m : merges) {
    std::string left, right;
    if (m.is_string()) {
      const std::string text = m.get<std::string>();
      const std::size_t blank = text.find(' ');
      require(blank != std::string::npos && text.find(' ', blank + 1) == std::string::npos,
              "{}: model.merges {}: not two tokens", label, m.dump());
      left = text.substr(0, blank);
      right = text.substr(blank + 1);
    } else {
      require(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), "{}: model.merges {}: not two tokens",
              label, m.dump());
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    }
    const auto id_of = [&](const std::string& piece) {
      require(vocab.contains(piece), "{}: model.merges {}: {} is not in the vocabulary", label, m.dump(),
              json(piece).dump());
      return Token(vocab[piece].get<std::int64_t>());
    };
    const Token l = id_of(left), r = id_of(right), merged = id_of(left + right);
    merges_.emplace(std::uint64_t(std::uint32_t(l)) << 32 | std::uint32_t(r), std::make_pair(rank++, merged));
  }
}

std::vector<Token> ByteLevelBpe::encode(std::string_view text) const {
  // Parts of the text: (begin, end, added token id or -1). The tokenizers library cuts out the added tokens
  // that are not normalized first, then the normalized ones (with no normalizer the text is the same).
  struct Part {
    std::size_t begin, end;
    Token added;
  };
  std::vector<Part> parts = {{0, text.size(), -1}};
  for (const bool normalized : {false, true}) {
    std::vector<Part> next;
    for (const Part& part : parts) {
      if (part.added >= 0) {
        next.push_back(part);
        continue;
      }
      std::size_t at = part.begin;
      while (at < part.end) {
        // The leftmost match, the longest of those.
        std::size_t best = part.end, best_length = 0;
        Token best_id = -1;
        for (const Added& a : added_) {
          if (a.normalized != normalized) continue;
          const std::size_t found = text.substr(0, part.end).find(a.content, at);
          if (found == std::string_view::npos) continue;
          if (found < best || (found == best && a.content.size() > best_length))
            best = found, best_length = a.content.size(), best_id = a.id;
        }
        if (best_id < 0) break;
        if (best > at) next.push_back({at, best, -1});
        next.push_back({best, best + best_length, best_id});
        at = best + best_length;
      }
      if (at < part.end) next.push_back({at, part.end, -1});
    }
    parts = std::move(next);
  }
  std::vector<Token> ids;
  ids.reserve(text.size() / 3);
  for (const Part& part : parts) {
    if (part.added >= 0) {
      ids.push_back(part.added);
    } else if (add_prefix_space_ && text[part.begin] != ' ') {
      encode_part(" " + std::string(text.substr(part.begin, part.end - part.begin)), ids);
    } else {
      encode_part(text.substr(part.begin, part.end - part.begin), ids);
    }
  }
  return ids;
}

void ByteLevelBpe::encode_part(std::string_view text, std::vector<Token>& ids) const {
  if (!use_regex_) return encode_word(text, ids);
  for (const std::string_view piece : gpt2_pieces(text)) encode_word(piece, ids);
}

void ByteLevelBpe::encode_word(std::string_view word, std::vector<Token>& ids) const {
  if (word.empty()) return;
  if (ignore_merges_)
    if (const auto it = ids_.find(std::string(word)); it != ids_.end()) return ids.push_back(it->second);
  // The word's tokens as a linked list; a heap of candidate merges by (rank, position).
  const std::size_t n = word.size();
  std::vector<Token> symbol(n);
  std::vector<std::int64_t> prev(n), next(n);
  for (std::size_t k = 0; k < n; ++k) {
    symbol[k] = byte_ids_[static_cast<unsigned char>(word[k])];
    prev[k] = std::int64_t(k) - 1;
    next[k] = k + 1 < n ? std::int64_t(k) + 1 : -1;
  }
  struct Candidate {
    std::int32_t rank;
    std::int64_t left;
    Token left_symbol, right_symbol, merged;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  const auto consider = [&](std::int64_t left) {
    if (left < 0 || next[std::size_t(left)] < 0) return;
    const Token a = symbol[std::size_t(left)], b = symbol[std::size_t(next[std::size_t(left)])];
    const auto it = merges_.find(std::uint64_t(std::uint32_t(a)) << 32 | std::uint32_t(b));
    if (it != merges_.end()) heap.push({it->second.first, left, a, b, it->second.second});
  };
  for (std::size_t k = 0; k + 1 < n; ++k) consider(std::int64_t(k));
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const auto left = std::size_t(c.left);
    const std::int64_t right = next[left];
    // Stale: one of the two was merged away since.
    if (symbol[left] != c.left_symbol || right < 0 || symbol[std::size_t(right)] != c.right_symbol) continue;
    symbol[left] = c.merged;
    next[left] = next[std::size_t(right)];
    if (next[left] >= 0) prev[std::size_t(next[left])] = std::int64_t(left);
    symbol[std::size_t(right)] = -1;
    consider(prev[left]);
    consider(std::int64_t(left));
  }
  for (std::int64_t k = 0; k >= 0; k = next[std::size_t(k)]) ids.push_back(symbol[std::size_t(k)]);
}

std::string ByteLevelBpe::decode(const std::vector<Token>& ids) const {
  std::string text;
  for (const Token id : ids) text += tokens_.at(std::size_t(id));
  return text;
}

}  // namespace kpipe::data
