#include "kpipe/data/bpe_sample.hpp"

#include <algorithm>

namespace kpipe::data {
namespace {

// The whole lines of a piece read from inside the text: what precedes its first newline (the end of a line
// begun before it) and what follows its last (a line it cuts) dropped, unless the piece starts the text or
// ends it. A piece without a newline is a part of one long line: kept.
std::string_view whole_lines(std::string_view piece, bool at_start, bool at_end) {
  const std::size_t first = piece.find('\n'), last = piece.rfind('\n');
  if (first == std::string_view::npos) return piece;
  const std::size_t begin = at_start ? 0 : first + 1;
  const std::size_t end = at_end ? piece.size() : last + 1;
  return begin < end ? piece.substr(begin, end - begin) : std::string_view();
}

}  // namespace

std::string bpe_sample(const TextStream& text, std::int64_t end, std::int64_t sample_bytes) {
  if (end <= sample_bytes) return text.read(0, end);
  constexpr std::int64_t largest_piece = 1 << 20;
  const std::int64_t pieces = std::max<std::int64_t>(16, (sample_bytes + largest_piece - 1) / largest_piece);
  const std::int64_t piece = std::max<std::int64_t>(1, sample_bytes / pieces);
  std::string sample;
  sample.reserve(std::size_t(sample_bytes));
  for (std::int64_t k = 0; k < pieces; ++k) {
    // The first piece starts the text, the last ends it.
    const std::int64_t first = k * (end - piece) / (pieces - 1);
    const std::int64_t count = std::min(piece, end - first);
    const std::string bytes = text.read(first, count);
    const std::string_view lines = whole_lines(bytes, first == 0, first + count == end);
    sample.append(lines);
    if (!lines.empty() && lines.back() != '\n') sample += '\n';  // pieces are separate lines
  }
  return sample;
}

}  // namespace kpipe::data
