#pragma once
// The embedded default corpus: deterministic printable-ASCII text, one item per line, with structure at
// several levels that a model must learn to get its loss down:
//   - stories: sentences from a small grammar with subject-verb agreement (also across relative clauses),
//     word-to-word preferences (a Markov chain over the lexicon), quoted speech and parentheses;
//   - arithmetic facts ("17+25=42", "9*7=63", "50-18=32");
//   - copying ("copy: big red fox | big red fox"), counting ("count: 14 15 16 17"), sorting letters;
//   - balanced brackets ("brackets: ([{}])()").
// The same (seed, tokens) always gives the same text; another seed gives another text from the same grammar.
#include <cstdint>
#include <functional>
#include <string>

#include "kpipe/data/corpus.hpp"

namespace kpipe::data {

// `tokens` bytes of synthetic text; the last round(tokens * val_fraction) are the validation split.
Corpus synthetic_corpus(std::uint64_t seed, std::int64_t tokens, double val_fraction);

// The same `tokens` bytes, handed to `piece` in order, in pieces of about `piece_bytes`: for a writer that
// streams a corpus of any size in bounded memory (kpipe-prepare --synthetic).
void stream_synthetic_text(std::uint64_t seed, std::int64_t tokens, std::size_t piece_bytes,
                           const std::function<void(const std::string&)>& piece);

}  // namespace kpipe::data
