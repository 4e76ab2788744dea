#include "kpipe/schedule/text.hpp"

#include <algorithm>
#include <cctype>
#include <sstream>

#include "kpipe/core/error.hpp"
#include "kpipe/core/files.hpp"
#include "kpipe/schedule/asynchronous.hpp"

namespace kpipe::schedule {

namespace {

const char* compute_letter(Op op) {
  switch (op) {
    case Op::forward: return "F";
    case Op::backward: return "B";
    case Op::backward_input: return "I";
    case Op::backward_weight: return "W";
    case Op::step: return "S";
    case Op::send_activation: return "sa";
    case Op::recv_activation: return "ra";
    case Op::send_gradient: return "sg";
    case Op::recv_gradient: return "rg";
    case Op::send_sum: return "ss";
    case Op::recv_sum: return "rs";
    case Op::update: return "U";
  }
  return "?";
}

// Reads a token of the text form; `fail` throws with the token's place.
class TokenReader {
 public:
  TokenReader(const std::string& token, const std::string& where) : token_(token), where_(where) {}

  [[noreturn]] void fail(const std::string& why) const {
    throw InputError(fmt::format("{} '{}': {}", where_, token_, why));
  }
  bool done() const { return pos_ == token_.size(); }
  char peek() const { return done() ? '\0' : token_[pos_]; }
  bool accept(char c) {
    if (peek() != c) return false;
    ++pos_;
    return true;
  }
  int signed_number(const char* what) {
    const bool negative = accept('-');
    const int value = number(what);
    return negative ? -value : value;
  }
  int number(const char* what) {
    if (!std::isdigit(static_cast<unsigned char>(peek()))) fail(fmt::format("expected {}", what));
    long value = 0;
    while (std::isdigit(static_cast<unsigned char>(peek()))) {
      value = value * 10 + (token_[pos_++] - '0');
      if (value > 1000000) fail(fmt::format("{} too large", what));
    }
    return int(value);
  }

 private:
  const std::string& token_;
  std::string where_;
  std::size_t pos_ = 0;
};

Action parse_token(const std::string& token, const std::string& where) {
  TokenReader in(token, where);
  Action a;
  const char first = in.peek();
  if (first == 'S' && token.size() == 1) return Action{Op::step, 0, 0, -1};
  if (first == 's' || first == 'r') {
    in.accept(first);
    const bool send = first == 's';
    if (in.accept('a')) a.op = send ? Op::send_activation : Op::recv_activation;
    else if (in.accept('g')) a.op = send ? Op::send_gradient : Op::recv_gradient;
    else if (in.accept('s')) a.op = send ? Op::send_sum : Op::recv_sum;
    else in.fail("a message is sa, ra, sg, rg (or ss, rs) followed by the micro-batch");
  } else if (in.accept('F')) {
    a.op = Op::forward;
  } else if (in.accept('B')) {
    a.op = Op::backward;
  } else if (in.accept('I')) {
    a.op = Op::backward_input;
  } else if (in.accept('W')) {
    a.op = Op::backward_weight;
  } else if (in.accept('U')) {
    a.op = Op::update;
  } else {
    in.fail("unknown action (F, B, I, W, U, S, sa, ra, sg, rg, ss, rs)");
  }
  a.microbatch = in.number(is_reduction(a.op) ? "a reduction group" : "a micro-batch number");
  if (in.accept('.')) a.chunk = in.number("a chunk number after '.'");
  if (is_comm(a.op) || is_reduction(a.op)) {
    const bool sends = is_send(a.op) || a.op == Op::send_sum;
    const char arrow = sends ? '>' : '<';
    const char* who = is_reduction(a.op) ? "replica" : "rank";
    if (!in.accept(arrow))
      in.fail(fmt::format("expected '{}' and the {} {}", arrow, sends ? "receiving" : "sending", who));
    a.peer = in.number(who);
  }
  if ((is_compute(a.op) || a.op == Op::update) && in.accept('@')) a.version = in.signed_number("a weight version after '@'");
  if (!in.done()) in.fail("unexpected characters at the end");
  return a;
}

std::vector<std::string> split_blanks(const std::string& line) {
  std::vector<std::string> tokens;
  std::istringstream in(line);
  for (std::string t; in >> t;) tokens.push_back(t);
  return tokens;
}

struct Located {
  int line = 0, token = 0;
  std::string text;
};

Schedule parse_named(const std::string& text, int microbatches, int chunks, const std::string& source) {
  require(microbatches >= 0, "train.microbatches = {}: must be positive", microbatches);
  require(chunks >= 0, "pipeline.chunks = {}: must be positive", chunks);
  Schedule s;
  std::vector<std::vector<Located>> places;  // where each action came from, for range errors
  std::istringstream lines(text);
  int line_no = 0, max_mb = -1, max_chunk = -1;
  bool resumed = false;
  for (std::string line; std::getline(lines, line);) {
    ++line_no;
    line = line.substr(0, line.find('#'));
    const auto tokens = split_blanks(line);
    if (tokens.empty()) continue;
    if (tokens[0] == "placement") {  // "placement v" (ZB-V's chunks) or "placement interleaved", before the ranks
      require(s.actions.empty() && tokens.size() == 2 && (tokens[1] == "v" || tokens[1] == "interleaved"),
              "{} line {}: 'placement v' or 'placement interleaved', alone on a line before the first rank's",
              source, line_no);
      s.placement = tokens[1] == "v" ? Placement::v : Placement::interleaved;
      continue;
    }
    if (tokens[0] == "updates") {  // "updates pipedream | vertical-sync | 2bw": an asynchronous schedule
      const bool known = tokens.size() == 2 && (tokens[1] == "pipedream" || tokens[1] == "vertical-sync" ||
                                                tokens[1] == "2bw" || tokens[1] == "flush");
      require(s.actions.empty() && known,
              "{} line {}: 'updates pipedream', 'updates vertical-sync' or 'updates 2bw', alone on a line before the "
              "first rank's",
              source, line_no);
      s.updates = tokens[1] == "flush" ? Updates::flush
                  : tokens[1] == "2bw" ? Updates::two_bw
                                       : updates_of(ScheduleKind::pipedream, tokens[1] == "vertical-sync");
      continue;
    }
    if (tokens[0] == "resumed") {
      require(s.actions.empty() && tokens.size() == 1, "{} line {}: 'resumed', alone on a line before the first rank's",
              source, line_no);
      resumed = true;
      continue;
    }
    s.actions.emplace_back();
    places.emplace_back();
    for (std::size_t t = 0; t < tokens.size(); ++t) {
      const std::string where = fmt::format("{} line {} token {}", source, line_no, t + 1);
      const Action a = parse_token(tokens[t], where);
      s.actions.back().push_back(a);
      places.back().push_back({line_no, int(t) + 1, tokens[t]});
      if (a.op != Op::step && !is_reduction(a.op)) {
        max_mb = std::max(max_mb, a.microbatch);
        max_chunk = std::max(max_chunk, a.chunk);
      }
    }
  }
  require(!s.actions.empty(), "{}: no actions (one line of actions per rank)", source);
  require(!resumed || s.asynchronous(), "{}: 'resumed' belongs to an asynchronous schedule ('updates ...')", source);
  s.ranks = int(s.actions.size());
  if (s.asynchronous()) {
    s.steps = int(std::count_if(s.actions[0].begin(), s.actions[0].end(), [](const Action& a) { return a.op == Op::step; }));
    require(s.steps >= 1, "{}: an asynchronous schedule ends every step with S (rank 0 has none)", source);
  }
  s.microbatches = microbatches > 0 ? microbatches : std::max((max_mb + 1 + s.steps - 1) / s.steps, 1);
  s.chunks = chunks > 0 ? chunks : std::max(max_chunk + 1, 1);
  if (resumed)
    for (int r = 0; r < s.ranks; ++r) s.versions_at_start.push_back(versions_bound(s.updates, s.ranks, r));
  for (int r = 0; r < s.ranks; ++r) {
    for (std::size_t i = 0; i < s.actions[r].size(); ++i) {
      const Action& a = s.actions[r][i];
      const Located& at = places[r][i];
      const std::string where = fmt::format("{} line {} token {} '{}'", source, at.line, at.token, at.text);
      require(is_reduction(a.op) || a.microbatch < s.microbatch_count(),
              "{}: micro-batch {} out of range (train.microbatches = {}{})", where, a.microbatch, s.microbatches,
              s.steps > 1 ? fmt::format(" per step, {} steps", s.steps) : std::string());
      require(a.chunk < s.chunks, "{}: chunk {} out of range (pipeline.chunks = {})", where, a.chunk, s.chunks);
      require(!is_comm(a.op) || a.peer < s.ranks, "{}: rank {} out of range ({} ranks, one per line)", where,
              a.peer, s.ranks);
    }
  }
  return s;
}

}  // namespace

std::string position_text(const Schedule& s, int rank, std::size_t position) {
  return fmt::format("schedule rank {} position {} ({})", rank, position,
                     to_token(s.actions[rank][position], s.chunks, s.asynchronous()));
}

void reject(const Schedule& s, int rank, std::size_t position, const std::string& why) {
  throw InputError(fmt::format("{}: {}", position_text(s, rank, position), why));
}

std::string to_token(const Action& a, int chunks, bool versions) {
  if (a.op == Op::step) return "S";
  std::string token = fmt::format("{}{}", compute_letter(a.op), a.microbatch);
  if (chunks > 1) token += fmt::format(".{}", a.chunk);
  if (is_send(a.op) || a.op == Op::send_sum) token += fmt::format(">{}", a.peer);
  if (is_recv(a.op) || a.op == Op::recv_sum) token += fmt::format("<{}", a.peer);
  if (versions && (is_compute(a.op) || a.op == Op::update)) token += fmt::format("@{}", a.version);
  return token;
}

std::string to_text(const Schedule& s) {
  std::string text = s.placement == Placement::v ? "placement v\n" : "";
  if (s.asynchronous()) text += fmt::format("updates {}\n", to_string(s.updates));
  if (s.asynchronous() && !s.versions_at_start.empty() &&
      std::any_of(s.versions_at_start.begin(), s.versions_at_start.end(), [](int n) { return n > 1; }))
    text += "resumed\n";
  for (const auto& list : s.actions) {
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (i > 0) text += ' ';
      text += to_token(list[i], s.chunks, s.asynchronous());
    }
    text += '\n';
  }
  return text;
}

Schedule parse(const std::string& text, int microbatches, int chunks) {
  return parse_named(text, microbatches, chunks, "schedule");
}

Schedule read_schedule_file(const std::string& path, int microbatches, int chunks) {
  const std::string label = fmt::format("pipeline.schedule_file = '{}'", path);
  return parse_named(read_bytes(path, label), microbatches, chunks, label);
}

}  // namespace kpipe::schedule
