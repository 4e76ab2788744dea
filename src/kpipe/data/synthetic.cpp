#include "kpipe/data/synthetic.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <string>
#include <vector>

#include "kpipe/core/rng.hpp"

namespace kpipe::data {
namespace {

// Random choices from a Philox stream: portable (std:: distributions differ between standard libraries).
class Choices {
 public:
  explicit Choices(std::uint64_t seed) : key_(rng::make_key(seed, 0, 0, "synthetic_corpus")) {}
  int below(int n) { return static_cast<int>(rng::bits64(key_, counter_++) % static_cast<std::uint64_t>(n)); }
  int between(int low, int high) { return low + below(high - low + 1); }  // inclusive
  bool chance(double p) { return static_cast<double>(rng::bits64(key_, counter_++) >> 11) * 0x1.0p-53 < p; }
  template <std::size_t N> const char* pick(const std::array<const char*, N>& words) { return words[below(int(N))]; }

 private:
  rng::Key key_;
  std::uint64_t counter_ = 0;
};

struct Word {
  const char* singular;
  const char* plural;
};

const std::array<Word, 16> nouns = {{{"cat", "cats"}, {"dog", "dogs"}, {"bird", "birds"}, {"fox", "foxes"},
                                     {"child", "children"}, {"teacher", "teachers"}, {"farmer", "farmers"},
                                     {"robot", "robots"}, {"king", "kings"}, {"queen", "queens"},
                                     {"baker", "bakers"}, {"sailor", "sailors"}, {"horse", "horses"},
                                     {"mouse", "mice"}, {"wolf", "wolves"}, {"student", "students"}}};
// Verbs: singular (agrees with a singular subject) and plural forms.
const std::array<Word, 10> transitive = {{{"sees", "see"}, {"likes", "like"}, {"chases", "chase"},
                                          {"finds", "find"}, {"helps", "help"}, {"follows", "follow"},
                                          {"watches", "watch"}, {"feeds", "feed"}, {"calls", "call"},
                                          {"knows", "know"}}};
const std::array<Word, 8> intransitive = {{{"runs", "run"}, {"sleeps", "sleep"}, {"sings", "sing"},
                                           {"waits", "wait"}, {"laughs", "laugh"}, {"swims", "swim"},
                                           {"dances", "dance"}, {"hides", "hide"}}};
const std::array<const char*, 10> adjectives = {"big",   "small", "red",    "old",  "quiet",
                                                "happy", "green", "clever", "lazy", "brave"};
const std::array<const char*, 6> adverbs = {"quickly", "slowly", "today", "again", "at night", "in the morning"};
const std::array<const char*, 5> places = {"in the garden", "near the river", "under the bridge", "on the hill",
                                           "at the market"};
const std::array<const char*, 4> singular_determiners = {"the", "a", "every", "this"};
const std::array<const char*, 6> plural_determiners = {"the", "some", "many", "these", "two", "three"};
// Phrases that recur verbatim: the model can memorize them.
const std::array<const char*, 5> openers = {"once upon a time,", "every day,", "as everyone knows,",
                                            "in the old town,", "long ago,"};
const std::array<Word, 3> speech_verbs = {{{"says", "say"}, {"thinks", "think"}, {"knows", "know"}}};

// Word-to-word preferences: each word has two favourite successors, taken 60% of the time.
int preferred(Choices& choices, int word, int multiplier, int offset, int count) {
  if (choices.chance(0.6)) return (word * multiplier + offset + choices.below(2)) % count;
  return choices.below(count);
}

class Writer {
 public:
  explicit Writer(std::uint64_t seed) : choices_(seed) {}

  std::string line() {
    const int kind = choices_.below(100);
    if (kind < 50) return story();
    if (kind < 64) return arithmetic();
    if (kind < 74) return copy();
    if (kind < 82) return count();
    if (kind < 90) return brackets();
    return sort_letters();
  }

 private:
  // Determiner, adjective, noun (all agreeing in number); relative clauses only at the top level (depth 0).
  std::string noun_phrase(int noun, bool plural, int depth) {
    std::string out = plural ? choices_.pick(plural_determiners) : choices_.pick(singular_determiners);
    std::string words;  // what follows the determiner
    if (choices_.chance(0.35)) words = std::string(adjectives[preferred(choices_, noun, 3, 0, 10)]) + " ";
    words += plural ? nouns[noun].plural : nouns[noun].singular;
    if (out == "a" && std::string("aeiou").find(words[0]) != std::string::npos) out = "an";  // "an old cat"
    out += " " + words;
    if (depth == 0 && choices_.chance(0.2)) {
      const int verb = preferred(choices_, noun, 7, 3, 10);
      if (choices_.chance(0.5)) {  // subject relative: the verb agrees with the head noun
        const int object = preferred(choices_, verb, 5, 1, 16);
        out += std::string(" that ") + (plural ? transitive[verb].plural : transitive[verb].singular) + " " +
               noun_phrase(object, choices_.chance(0.3), depth + 1);
      } else {  // object relative: the verb agrees with the inner subject
        const int inner = choices_.below(16);
        const bool inner_plural = choices_.chance(0.3);
        out += " that " + noun_phrase(inner, inner_plural, depth + 1) + " " +
               (inner_plural ? transitive[verb].plural : transitive[verb].singular);
      }
    }
    return out;
  }

  // A clause without the final period: subject, (parenthesis), verb phrase agreeing with the subject.
  std::string clause(int depth) {
    const int subject = choices_.below(16);
    const bool plural = choices_.chance(0.3);
    std::string out = noun_phrase(subject, plural, depth);
    if (depth == 0 && choices_.chance(0.08)) out += " (" + clause(depth + 1) + ")";
    if (choices_.chance(0.65)) {
      const int verb = preferred(choices_, subject, 7, 3, 10);
      const int object = preferred(choices_, verb, 5, 1, 16);
      out += std::string(" ") + (plural ? transitive[verb].plural : transitive[verb].singular) + " " +
             noun_phrase(object, choices_.chance(0.3), depth + 1);
    } else {
      const int verb = preferred(choices_, subject, 5, 2, 8);
      out += std::string(" ") + (plural ? intransitive[verb].plural : intransitive[verb].singular);
    }
    if (choices_.chance(0.25)) out += std::string(" ") + choices_.pick(places);
    if (choices_.chance(0.2)) out += std::string(" ") + choices_.pick(adverbs);
    return out;
  }

  std::string sentence() {
    std::string out, end = ".";
    if (choices_.chance(0.12)) {  // quoted speech: a sentence inside a sentence, closed by its own period
      const bool plural = choices_.chance(0.3);
      const Word& verb = speech_verbs[choices_.below(3)];
      out = noun_phrase(choices_.below(16), plural, 1) + " " + (plural ? verb.plural : verb.singular) + " \"" +
            capitalized(clause(1));
      end = ".\"";
    } else {
      out = clause(0);
    }
    if (choices_.chance(0.15)) out = std::string(choices_.pick(openers)) + " " + out;
    return capitalized(out) + end;
  }

  std::string story() {
    std::string out = sentence();
    for (int n = choices_.between(0, 2); n > 0; --n) out += " " + sentence();
    return out;
  }

  std::string arithmetic() {
    std::string out = "math:";
    for (int n = choices_.between(2, 4); n > 0; --n) {
      const int op = choices_.below(3);
      if (op == 0) {
        const int a = choices_.between(0, 99), b = choices_.between(0, 99);
        out += fmt::format(" {}+{}={}", a, b, a + b);
      } else if (op == 1) {
        const int a = choices_.between(0, 99), b = choices_.between(0, a);
        out += fmt::format(" {}-{}={}", a, b, a - b);
      } else {
        const int a = choices_.between(0, 12), b = choices_.between(0, 12);
        out += fmt::format(" {}*{}={}", a, b, a * b);
      }
    }
    return out;
  }

  std::string copy() {
    std::string phrase;
    for (int n = choices_.between(3, 6); n > 0; --n) {
      const int pool = choices_.below(3);
      const char* word = pool == 0 ? adjectives[choices_.below(10)]
                         : pool == 1 ? nouns[choices_.below(16)].singular
                                     : intransitive[choices_.below(8)].plural;
      phrase += (phrase.empty() ? "" : " ") + std::string(word);
    }
    return "copy: " + phrase + " | " + phrase;
  }

  std::string count() {
    const bool down = choices_.chance(0.3);
    int value = down ? choices_.between(10, 99) : choices_.between(0, 90);
    std::string out = down ? "count down:" : "count:";
    for (int n = choices_.between(4, 8); n > 0; --n, value += down ? -1 : 1) out += fmt::format(" {}", value);
    return out;
  }

  std::string brackets() {
    static const char open[] = "([{<", close[] = ")]}>";
    std::string out = "brackets: ";
    std::vector<int> stack;  // types of the open brackets
    int pairs = choices_.between(3, 10);
    while (pairs > 0 || !stack.empty()) {
      const bool must_close = pairs == 0 || stack.size() == 4;
      if (!stack.empty() && (must_close || choices_.chance(0.45))) {
        out += close[stack.back()];
        stack.pop_back();
      } else {
        const int type = choices_.below(4);
        out += open[type];
        stack.push_back(type);
        --pairs;
      }
    }
    return out;
  }

  std::string sort_letters() {
    std::string letters = "abcdefghijklmnopqrstuvwxyz";
    const int n = choices_.between(3, 7);
    for (int i = 0; i < n; ++i) std::swap(letters[i], letters[i + choices_.below(26 - i)]);  // partial shuffle
    letters.resize(n);
    std::string sorted = letters;
    std::sort(sorted.begin(), sorted.end());
    const auto spaced = [](const std::string& s) {
      std::string out;
      for (const char c : s) out += (out.empty() ? "" : " ") + std::string(1, c);
      return out;
    };
    return "sort: " + spaced(letters) + " -> " + spaced(sorted);
  }

  static std::string capitalized(std::string s) {
    if (!s.empty()) s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
    return s;
  }

  Choices choices_;
};

}  // namespace

void stream_synthetic_text(std::uint64_t seed, std::int64_t tokens, std::size_t piece_bytes,
                           const std::function<void(const std::string&)>& piece) {
  Writer writer(seed);
  std::string text;
  for (std::int64_t left = std::max<std::int64_t>(tokens, 0); left > 0;) {
    while (text.size() < piece_bytes && std::int64_t(text.size()) < left) text += writer.line() + "\n";
    text.resize(std::size_t(std::min<std::int64_t>(std::int64_t(text.size()), left)));
    left -= std::int64_t(text.size());
    piece(text);
    text.clear();
  }
}

Corpus synthetic_corpus(std::uint64_t seed, std::int64_t tokens, double val_fraction) {
  std::string text;
  text.reserve(static_cast<std::size_t>(std::max<std::int64_t>(tokens, 0)));
  stream_synthetic_text(seed, tokens, std::size_t(1) << 20, [&](const std::string& piece) { text += piece; });
  return text_corpus(text, val_fraction, fmt::format("synthetic(seed={}, tokens={})", seed, tokens));
}

}  // namespace kpipe::data
