#include "kpipe/data/hf_tokenizer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_map>

#include "kpipe/core/error.hpp"
#include "kpipe/core/files.hpp"
#include "kpipe/data/utf8.hpp"

namespace kpipe::data {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* space_piece = "\xE2\x96\x81";  // U+2581, SentencePiece's space

std::string utf8(char32_t c) {
  std::string out;
  append_utf8(out, c);
  return out;
}

json tokenizer_json(json normalizer, json pre_tokenizer, json decoder, json model) {
  return {{"version", "1.0"},          {"truncation", nullptr},   {"padding", nullptr},
          {"added_tokens", json::array()}, {"normalizer", normalizer}, {"pre_tokenizer", pre_tokenizer},
          {"post_processor", nullptr}, {"decoder", decoder},     {"model", model}};
}

json bpe_model(json vocab, json merges, json unk_token, bool byte_fallback) {
  return {{"type", "BPE"},       {"dropout", nullptr},           {"unk_token", unk_token},
          {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr}, {"fuse_unk", !unk_token.is_null()},
          {"byte_fallback", byte_fallback}, {"vocab", vocab}, {"merges", merges}};
}

json bytes_tokenizer() {
  json vocab = json::object();
  for (unsigned b = 0; b < 256; ++b) vocab[utf8(byte_character(static_cast<unsigned char>(b)))] = b;
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}};
  return tokenizer_json(nullptr, byte_level, byte_level, bpe_model(vocab, json::array(), nullptr, false));
}

// The fields of one protobuf message that SentencePiece's model spec is checked by: varints and byte strings by
// field number (the last of a repeated field). False when the bytes are not a message.
struct Proto {
  std::map<int, std::uint64_t> number;
  std::map<int, std::string> bytes;
};

bool parse_proto(std::string_view m, Proto& out) {
  std::size_t i = 0;
  const auto varint = [&](std::uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64 && i < m.size(); shift += 7) {
      const auto c = static_cast<unsigned char>(m[i++]);
      v |= std::uint64_t(c & 0x7F) << shift;
      if (!(c & 0x80)) return true;
    }
    return false;
  };
  while (i < m.size()) {
    std::uint64_t key = 0, v = 0;
    if (!varint(key)) return false;
    const int field = int(key >> 3);
    switch (key & 7) {
      case 0:
        if (!varint(v)) return false;
        out.number[field] = v;
        break;
      case 1: i += 8; break;
      case 5: i += 4; break;
      case 2:
        if (!varint(v) || v > m.size() - i) return false;
        out.bytes[field] = std::string(m.substr(i, v));
        i += v;
        break;
      default: return false;
    }
  }
  return i == m.size();
}

// Why a SentencePiece model's text handling is not what kpipe-prepare trains ("" when it is): a tokenizer.json
// reproduces the BPE merges, the escaped spaces and byte fallback exactly, not the other normalizations.
std::string unlike_kpipe(const std::string& serialized, bool& byte_fallback) {
  Proto model, trainer, normalizer;
  if (!parse_proto(serialized, model) || !parse_proto(model.bytes[2], trainer) || !parse_proto(model.bytes[3], normalizer))
    return "not a SentencePiece model";
  const auto value = [](const Proto& p, int field, std::uint64_t otherwise) {
    return p.number.count(field) ? p.number.at(field) : otherwise;
  };
  byte_fallback = value(trainer, 35, 0) != 0;
  if (value(trainer, 3, 1) != 2) return "not a BPE model";
  if (!normalizer.bytes[2].empty()) return fmt::format("normalization '{}'", normalizer.bytes[1]);
  if (value(normalizer, 3, 1) != 0) return "a dummy prefix";
  if (value(normalizer, 4, 1) != 0) return "extra white space removed";
  if (value(normalizer, 5, 1) != 1) return "spaces not escaped";
  if (value(trainer, 24, 0) != 0) return "white space treated as a suffix";
  return "";
}

std::vector<char32_t> code_points(const std::string& s) {
  std::vector<char32_t> out;
  for (std::size_t i = 0; i < s.size(); i += next_code_point(s, i).length) out.push_back(next_code_point(s, i).code);
  return out;
}

std::string text_of(const std::vector<char32_t>& cps, std::size_t begin, std::size_t end) {
  std::string out;
  for (std::size_t k = begin; k < end; ++k) append_utf8(out, cps[k]);
  return out;
}

// The ways a piece is two pieces, in the order its merges are ranked. SentencePiece's BPE merges the pair whose
// merged piece scores best, the leftmost of equals; the tokenizers library the pair of lowest rank. The two
// differ only where two splits of one piece P are candidates at once and overlap: [X][Y][Z] with X+Y = Y+Z = P
// (Y a border of P), where SentencePiece merges the left pair. So the left pair's split (at |X|) is ranked
// before the right pair's (at |Y|) wherever X, Y and Z are pieces; where those orders contradict each other (runs
// of one character) the longer left part goes first.
std::vector<std::size_t> ranked_splits(const std::vector<char32_t>& p, const std::vector<std::size_t>& splits,
                                       const std::unordered_map<std::string, int>& normal) {
  const std::size_t n = p.size();
  const auto is_piece = [&](std::size_t b, std::size_t e) { return normal.count(text_of(p, b, e)) > 0; };
  std::map<std::size_t, std::vector<std::size_t>> after;  // split -> the splits it must precede
  std::map<std::size_t, int> before;
  for (std::size_t s : splits) before[s] = 0;
  for (std::size_t b = 1; b < n; ++b) {
    if (2 * b == n || !std::equal(p.begin(), p.begin() + std::ptrdiff_t(b), p.end() - std::ptrdiff_t(b))) continue;
    if (is_piece(0, n - b) && is_piece(0, b) && is_piece(b, n)) {
      after[n - b].push_back(b);
      ++before[b];
    }
  }
  std::vector<std::size_t> order, left(splits.rbegin(), splits.rend());  // longest left part first
  while (!left.empty()) {
    auto pick = std::find_if(left.begin(), left.end(), [&](std::size_t s) { return before[s] == 0; });
    if (pick == left.end()) pick = left.begin();  // a contradiction: longest left part first
    const std::size_t s = *pick;
    left.erase(pick);
    order.push_back(s);
    for (std::size_t t : after[s]) --before[t];
  }
  return order;
}

json sentencepiece_tokenizer(const Tokenizer& tokenizer) {
  bool byte_fallback = false;
  const std::string unlike = unlike_kpipe(tokenizer.serialized_model(), byte_fallback);
  require(unlike.empty(),
          "the tokenizer is a SentencePiece model unlike those kpipe-prepare trains ({}): a tokenizer.json would not "
          "encode text as it does",
          unlike);
  const auto pieces = tokenizer.sentencepiece_pieces();
  json vocab = json::object();
  json unk = nullptr;
  std::unordered_map<std::string, int> normal;
  for (std::size_t id = 0; id < pieces.size(); ++id) {
    vocab[pieces[id].text] = id;
    if (pieces[id].normal) normal[pieces[id].text] = int(id);
    if (pieces[id].unknown) unk = pieces[id].text;
  }
  struct Merge {
    float score;
    int id;
    std::size_t order;
    std::string left, right;
  };
  std::vector<Merge> merges;
  for (const auto& [text, id] : normal) {
    const auto p = code_points(text);
    std::vector<std::size_t> splits;
    for (std::size_t k = 1; k < p.size(); ++k)
      if (normal.count(text_of(p, 0, k)) && normal.count(text_of(p, k, p.size()))) splits.push_back(k);
    const auto order = ranked_splits(p, splits, normal);
    for (std::size_t r = 0; r < order.size(); ++r)
      merges.push_back({pieces[std::size_t(id)].score, id, r, text_of(p, 0, order[r]), text_of(p, order[r], p.size())});
  }
  std::sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) {
    return a.score != b.score ? a.score > b.score : a.id != b.id ? a.id < b.id : a.order < b.order;
  });
  json merge_list = json::array();
  for (const Merge& m : merges) merge_list.push_back(m.left + " " + m.right);
  const json replace_space = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", space_piece}};
  const json decoder = {{"type", "Sequence"},
                        {"decoders",
                         {{{"type", "Replace"}, {"pattern", {{"String", space_piece}}}, {"content", " "}},
                          {{"type", "ByteFallback"}},
                          {{"type", "Fuse"}}}}};
  return tokenizer_json(replace_space, nullptr, decoder, bpe_model(vocab, merge_list, unk, byte_fallback));
}

json tokenizer_json_of(const Tokenizer& tokenizer) {
  switch (tokenizer.kind()) {
    case TokenizerKind::bytes: return bytes_tokenizer();
    case TokenizerKind::sentencepiece: return sentencepiece_tokenizer(tokenizer);
    case TokenizerKind::byte_level_bpe: return json::parse(tokenizer.serialized_model());
  }
  return nullptr;
}

json read_json(const std::string& path) {
  const json j = json::parse(read_bytes(path, fmt::format("'{}'", path)), nullptr, false);
  require(!j.is_discarded() && j.is_object(), "'{}': not a JSON object", path);
  return j;
}

}  // namespace

std::map<std::string, std::string> hf_tokenizer_files(const Tokenizer& tokenizer, int model_max_length) {
  std::map<std::string, std::string> files;
  files["tokenizer.json"] = tokenizer_json_of(tokenizer).dump(1);
  json config = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                 {"model_max_length", model_max_length},
                 {"clean_up_tokenization_spaces", false}};  // decoding gives back the text as it was
  if (const Token end = end_of_text(tokenizer); end >= 0)
    config["bos_token"] = config["eos_token"] = tokenizer.piece(end);
  files["tokenizer_config.json"] = config.dump(1);
  if (tokenizer.kind() == TokenizerKind::sentencepiece) files["tokenizer.model"] = tokenizer.serialized_model();
  return files;
}

Token end_of_text(const Tokenizer& tokenizer) {
  if (tokenizer.kind() != TokenizerKind::byte_level_bpe) return -1;
  for (Token id = 0; id < tokenizer.vocab(); ++id)
    if (tokenizer.piece(id) == "<|endoftext|>") return id;
  return -1;
}

Tokenizer hf_tokenizer(const std::string& dir) {
  const auto path = [&](const char* name) { return (fs::path(dir) / name).string(); };
  std::error_code ec;
  const bool has_json = fs::exists(path("tokenizer.json"), ec), has_model = fs::exists(path("tokenizer.model"), ec);
  if (!has_json) {
    require(!fs::exists(path("vocab.json"), ec),
            "'{}': vocab.json and merges.txt but no tokenizer.json: kpipe reads the fast tokenizer's file "
            "(transformers writes it with AutoTokenizer.from_pretrained(DIR).save_pretrained(DIR))",
            dir);
    throw InputError(fmt::format("'{}': no tokenizer.json: kpipe needs the model's tokenizer to read text", dir));
  }
  json config = json::object();
  if (fs::exists(path("tokenizer_config.json"), ec)) config = read_json(path("tokenizer_config.json"));
  for (const char* name : {"add_bos_token", "add_eos_token"})
    require(!(config.contains(name) && config[name] == true),
            "'{}': {} = true: the tokenizer adds tokens to every text, which kpipe's tokenizers do not", path("tokenizer_config.json"),
            name);
  json j = read_json(path("tokenizer.json"));
  if (has_model) {
    // Only as kpipe-export writes it: the model, and the tokenizer.json made from it.
    const std::string label = fmt::format("'{}'", path("tokenizer.model"));
    Tokenizer sp = Tokenizer::sentencepiece(read_bytes(path("tokenizer.model"), label), label);
    require(j == tokenizer_json_of(sp),
            "'{}': tokenizer.json is not the one kpipe makes from tokenizer.model: kpipe carries a SentencePiece "
            "tokenizer only where both encode alike",
            dir);
    return sp;
  }
  // transformers' GPT-2 tokenizer takes add_prefix_space from tokenizer_config.json over tokenizer.json's.
  if (config.contains("add_prefix_space") && config["add_prefix_space"].is_boolean() && j.contains("pre_tokenizer") &&
      j["pre_tokenizer"].is_object())
    j["pre_tokenizer"]["add_prefix_space"] = config["add_prefix_space"];
  Tokenizer tokenizer = Tokenizer::byte_level_bpe(j.dump(), fmt::format("'{}'", path("tokenizer.json")));
  if (j == bytes_tokenizer()) return {};  // kpipe's bytes, as kpipe-export writes them
  return tokenizer;
}

}  // namespace kpipe::data
