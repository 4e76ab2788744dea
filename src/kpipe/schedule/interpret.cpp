#include "kpipe/schedule/interpret.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <stdexcept>
#include <utility>

#include "kpipe/core/error.hpp"
#include "kpipe/schedule/text.hpp"

namespace kpipe::schedule {

Mode Mode::rendezvous(SumRoute sums) {
  Mode mode;
  mode.messages = Delivery::stream_ordered;
  mode.sums = sums == SumRoute::ordered_on_transport ? Delivery::stream_ordered : Delivery::buffered;
  return mode;
}

Mode Mode::timed(std::vector<Costs> costs) {
  Mode mode;
  mode.costs = std::move(costs);
  return mode;
}

void require_finished(const Interpretation& run) {
  if (!run.finished()) throw InputError(run.failure());
}

namespace {

constexpr double not_yet = std::numeric_limits<double>::infinity();

// `t`, and when it is not_yet and a reason is asked for, the reason text() gives.
template <class Text> double waiting(double t, std::string* why, const Text& text) {
  if (t == not_yet && why) *why = text();
  return t;
}

int log2_ceil(int n) {
  int steps = 0;
  while ((1 << steps) < n) ++steps;
  return steps;
}

struct Position {
  int process = -1;
  std::size_t index = 0;
};
using Partners = std::vector<std::vector<Position>>;  // per process and position

// The lists the interpreter walks: process w is rank w % ranks of replica w / ranks.
struct World {
  std::vector<const Schedule*> replicas;
  bool sums = false;     // the running sums are messages between the replicas
  bool ordered = false;  // timed: the final reduction is the ordered one's broadcast (else an allreduce)

  const Schedule& first() const { return *replicas.front(); }
  int ranks() const { return first().ranks; }
  int processes() const { return int(replicas.size()) * ranks(); }
  const std::vector<Action>& list(int w) const { return replicas[w / ranks()]->actions[w % ranks()]; }
  std::string name(int w) const {
    return replicas.size() > 1 ? fmt::format("replica {} rank {}", w / ranks(), w % ranks()) : fmt::format("rank {}", w);
  }
  std::string token(int w, std::size_t i) const {
    if (i >= list(w).size()) return "its end";
    return to_token(list(w)[i], first().chunks, first().asynchronous());
  }
  std::string where(int w, std::size_t i) const { return fmt::format("{} position {} ({})", name(w), i, token(w, i)); }
};

// Stream order pairs the k-th send from a to b with the k-th receive at b from a, per replica; what they
// carry must agree. Returns why they cannot be paired, or "".
std::string pair_pipeline(const World& world, Partners& partner) {
  const int p = world.ranks();
  for (int q = 0; q < int(world.replicas.size()); ++q) {
    const Schedule& s = *world.replicas[q];
    // sends[a][b], receives[b][a]: positions in posting order
    std::vector<std::vector<std::vector<std::size_t>>> sends(p, std::vector<std::vector<std::size_t>>(p)), receives = sends;
    for (int r = 0; r < p; ++r)
      for (std::size_t i = 0; i < s.actions[r].size(); ++i) {
        const Action& a = s.actions[r][i];
        if (is_send(a.op)) sends[r][a.peer].push_back(i);
        if (is_recv(a.op)) receives[r][a.peer].push_back(i);
      }
    for (int a = 0; a < p; ++a)
      for (int b = 0; b < p; ++b) {
        const auto& out = sends[a][b];
        const auto& in = receives[b][a];
        const int pa = q * p + a, pb = q * p + b;
        for (std::size_t k = 0; k < out.size() || k < in.size(); ++k) {
          if (k >= in.size())
            return fmt::format("schedule {}: send {} to rank {} has no receive number {} from rank {} there",
                               world.where(pa, out[k]), k, b, k, a);
          if (k >= out.size())
            return fmt::format("schedule {}: receive {} from rank {} has no send number {} to rank {} there",
                               world.where(pb, in[k]), k, a, k, b);
          const Message sent = message_of(s, a, s.actions[a][out[k]]), got = message_of(s, b, s.actions[b][in[k]]);
          if (sent.gradient != got.gradient || sent.microbatch != got.microbatch || sent.dst_vstage != got.dst_vstage)
            return fmt::format(
                "schedule {}: NCCL matches messages between two ranks in posting order (it has no tags): this is "
                "receive {} from rank {}, but rank {}'s send {} to rank {} is {} (position {}); order the receives as "
                "the sends",
                world.where(pb, in[k]), k, a, a, k, b, world.token(pa, out[k]), out[k]);
          partner[pa][out[k]] = {pb, in[k]};
          partner[pb][in[k]] = {pa, out[k]};
        }
      }
  }
  return "";
}

// The running sums on each rank's communicator of replicas: per pair of replicas and direction, the k-th
// send meets the k-th receive, which must be the same chunk's sum for the same group.
std::string pair_sums(const World& world, Partners& partner) {
  const int p = world.ranks(), d = int(world.replicas.size());
  for (int rank = 0; rank < p; ++rank) {
    std::vector<std::vector<std::vector<std::size_t>>> sent(d, std::vector<std::vector<std::size_t>>(d)), received = sent;
    for (int q = 0; q < d; ++q) {
      const auto& list = world.list(q * p + rank);
      for (std::size_t i = 0; i < list.size(); ++i) {
        if (list[i].op == Op::send_sum) sent[q][list[i].peer].push_back(i);
        if (list[i].op == Op::recv_sum) received[q][list[i].peer].push_back(i);
      }
    }
    for (int a = 0; a < d; ++a)
      for (int b = 0; b < d; ++b) {
        const auto& out = sent[a][b];
        const auto& in = received[b][a];
        const int pa = a * p + rank, pb = b * p + rank;
        for (std::size_t k = 0; k < out.size() || k < in.size(); ++k) {
          if (k >= in.size())
            return fmt::format("schedule {}: sum {} to replica {} has no receive number {} from replica {} there",
                               world.where(pa, out[k]), k, b, k, a);
          if (k >= out.size())
            return fmt::format("schedule {}: sum {} from replica {} has no send number {} to replica {} there",
                               world.where(pb, in[k]), k, a, k, b);
          const Action& s = world.list(pa)[out[k]];
          const Action& g = world.list(pb)[in[k]];
          if (s.chunk != g.chunk || s.microbatch != g.microbatch)
            return fmt::format(
                "schedule {}: NCCL matches messages between two ranks in posting order (it has no tags): this is "
                "receive {} from replica {}, but that replica's send {} is {}; order the sums alike",
                world.where(pb, in[k]), k, a, k, world.where(pa, out[k]));
          partner[pa][out[k]] = {pb, in[k]};
          partner[pb][in[k]] = {pa, out[k]};
        }
      }
  }
  return "";
}

class Interpreter {
 public:
  Interpreter(const World& world, const Mode& mode);
  Interpretation run();

 private:
  std::size_t at(int replica, int microbatch, int vstage) const {
    return std::size_t(replica) * n_ + std::size_t(microbatch) * stages_ + vstage;
  }
  int vstage(int w, const Action& a) const { return s_.virtual_stage(w % p_, a.chunk); }
  bool meets(const Action& a) const;  // a rendezvous message (stream order)
  std::size_t group_end(int w, std::size_t i) const;
  bool issued(const Position& end) const;
  double transfer(int w, const Action& a) const;
  double reduction_time(int rank) const;
  bool run_group(int w);
  void arrive(int w, const Action& a);
  double input_time(int w, const Action& a, std::string* why) const;
  double sum_input(int w, const Action& a, std::string* why) const;
  double update_input(int w, const Action& a, std::string* why) const;
  double step_input(int w, std::string* why);
  void run_action(int w, const Action& a, double ready);
  Blocked blocked(int w);

  const World& world_;
  const Mode& mode_;
  const Schedule& s_;
  int d_, p_, stages_, processes_;
  std::size_t n_;
  bool lowered_, timed_, barrier_;
  std::vector<Costs> costs_;  // per virtual stage
  double transfer_ = 0;       // one pipeline message
  int groups_ = 1;            // reduction groups
  // Per (replica, micro-batch, virtual stage): when the input arrives (buffered) or the action ended.
  std::vector<double> activation_ready_, gradient_ready_, forward_end_, backward_end_;
  // Per (virtual stage, group): when the running sum arrives at its holder, and when it was received.
  std::vector<double> sum_ready_, sum_received_;
  std::vector<std::vector<int>> last_sent_;  // per process and chunk: the group of the latest sum sent
  Partners partner_;                        // rendezvous messages
  std::vector<std::vector<char>> met_;        // per process and position: it met its partner
  std::vector<std::map<std::pair<int, int>, double>> at_update_;  // when each process reached each update
  std::vector<double> at_step_;                                   // synchronous: when it reached its S
  std::vector<std::vector<double>> at_boundary_;  // asynchronous, stream order: when it reached each S
  std::vector<int> boundaries_;                   // asynchronous: the step boundaries passed
  std::vector<std::size_t> pc_;
  std::vector<double> free_;
  Interpretation run_;
};

Interpreter::Interpreter(const World& world, const Mode& mode)
    : world_(world), mode_(mode), s_(world.first()), d_(int(world.replicas.size())), p_(s_.ranks),
      stages_(s_.virtual_stages()), processes_(world.processes()),
      n_(std::size_t(s_.microbatch_count()) * s_.virtual_stages()), lowered_(is_lowered(s_)),
      timed_(!mode.costs.empty()), barrier_(mode.messages == Delivery::stream_ordered && s_.asynchronous()) {
  if (timed_ && (mode.messages != Delivery::buffered || mode.sums != Delivery::buffered))
    throw std::logic_error("interpret: timed runs deliver buffered");
  costs_ = timed_ ? mode.costs : std::vector<Costs>(std::size_t(stages_), free_of_cost());
  transfer_ = costs_.front().latency + costs_.front().activation_bytes * costs_.front().per_byte;
  for (int w = 0; w < processes_; ++w)
    for (const Action& a : world_.list(w))
      if (is_reduction(a.op)) groups_ = std::max(groups_, a.microbatch + 1);
  activation_ready_.assign(d_ * n_, not_yet);
  gradient_ready_ = forward_end_ = backward_end_ = activation_ready_;
  sum_ready_.assign(std::size_t(stages_) * groups_, not_yet);
  sum_received_ = sum_ready_;
  last_sent_.assign(processes_, std::vector<int>(s_.chunks, -1));
  partner_.resize(processes_);
  met_.resize(processes_);
  for (int w = 0; w < processes_; ++w) {
    partner_[w].assign(world_.list(w).size(), Position{});
    met_[w].assign(world_.list(w).size(), 0);
  }
  at_update_.resize(processes_);
  at_step_.assign(processes_, not_yet);
  at_boundary_.resize(processes_);
  boundaries_.assign(processes_, 0);
  pc_.assign(processes_, 0);
  free_.assign(processes_, 0.0);
  run_.ranks = p_;
  if (timed_) {
    run_.busy.assign(processes_, 0.0);
    run_.timeline.resize(processes_);
    run_.step_ends.resize(processes_);
  }
}

bool Interpreter::meets(const Action& a) const {
  return (is_comm(a.op) && mode_.messages == Delivery::stream_ordered) ||
         (is_reduction(a.op) && world_.sums && mode_.sums == Delivery::stream_ordered);
}

// The last index of the group that starts at i: the run of consecutive pipeline messages (the executor's
// NCCL group); a running sum (another communicator) is a group of its own.
std::size_t Interpreter::group_end(int w, std::size_t i) const {
  const auto& list = world_.list(w);
  if (is_reduction(list[i].op)) return i;
  while (i + 1 < list.size() && is_comm(list[i + 1].op)) ++i;
  return i;
}

// The process holding `end` has issued it: it is in the group at that process's head.
bool Interpreter::issued(const Position& end) const {
  const auto& list = world_.list(end.process);
  const std::size_t head = pc_[end.process];
  return head < list.size() && meets(list[head]) && head <= end.index && end.index <= group_end(end.process, head);
}

double Interpreter::transfer(int w, const Action& a) const {
  if (!is_reduction(a.op)) return transfer_;
  return costs_.front().latency + costs_[vstage(w, a)].gradient_bytes * costs_.front().per_byte;
}

// The final reduction before a stage's optimizer step: a broadcast of the last sum, or an allreduce.
double Interpreter::reduction_time(int rank) const {
  if (d_ == 1) return 0.0;
  double t = 0;
  for (int c = 0; c < s_.chunks; ++c)
    t += (world_.ordered ? 1 : 2) * log2_ceil(d_) *
         transfer(rank, Action{Op::send_sum, 0, c, -1});
  return t;
}

// The group at w's head meets what it can; true when every message in it has met its partner and the
// process went past it. (Untimed: rendezvous runs are dry runs.)
bool Interpreter::run_group(int w) {
  const std::size_t head = pc_[w], last = group_end(w, head);
  bool all = true;
  for (std::size_t i = head; i <= last; ++i) {
    const Position& other = partner_[w][i];
    if (!met_[w][i] && other.process >= 0 && issued(other)) met_[w][i] = met_[other.process][other.index] = 1;
    all = all && met_[w][i];
  }
  if (all) pc_[w] = last + 1;
  return all;
}

// Collectives keep when each process reached them (it may have gone past since).
void Interpreter::arrive(int w, const Action& a) {
  if (a.op == Op::update) at_update_[w].emplace(std::make_pair(a.microbatch, a.chunk), free_[w]);
  if (a.op == Op::step && barrier_ && int(at_boundary_[w].size()) == boundaries_[w]) at_boundary_[w].push_back(free_[w]);
}

double Interpreter::input_time(int w, const Action& a, std::string* why) const {
  const int replica = w / p_, r = w % p_, k = vstage(w, a), last = stages_ - 1;
  // The neighbouring virtual stage's action, on this rank (lowered lists) or any (compute-only ones).
  auto on = [&](int other) {
    return s_.rank_of(other) == r ? fmt::format("chunk {}", s_.chunk_of(other)) : fmt::format("rank {}", s_.rank_of(other));
  };
  switch (a.op) {
    case Op::recv_activation:
      return waiting(activation_ready_[at(replica, a.microbatch, k)], why, [&] {
        return fmt::format("the activation of micro-batch {} from rank {}", a.microbatch, a.peer);
      });
    case Op::recv_gradient:
      return waiting(gradient_ready_[at(replica, a.microbatch, k)], why, [&] {
        return fmt::format("the gradient of micro-batch {} from rank {}", a.microbatch, a.peer);
      });
    case Op::forward:
      if (k == 0 || (lowered_ && s_.rank_of(k - 1) != r)) return 0.0;  // from another rank the receive waited
      return waiting(forward_end_[at(replica, a.microbatch, k - 1)], why,
                     [&] { return fmt::format("the forward of micro-batch {} on {}", a.microbatch, on(k - 1)); });
    case Op::backward:
    case Op::backward_input:
      if (k == last || (lowered_ && s_.rank_of(k + 1) != r)) return 0.0;
      return waiting(backward_end_[at(replica, a.microbatch, k + 1)], why,
                     [&] { return fmt::format("the backward of micro-batch {} on {}", a.microbatch, on(k + 1)); });
    case Op::recv_sum: return sum_input(w, a, why);
    case Op::update: return update_input(w, a, why);
    default: return 0.0;
  }
}

double Interpreter::sum_input(int w, const Action& a, std::string* why) const {
  if (!world_.sums) return 0.0;  // one pipeline's lists: the replicas' validation checks the sums
  const int k = vstage(w, a), group = a.microbatch;
  double t = waiting(sum_ready_[std::size_t(k) * groups_ + group], why, [&] {
    return fmt::format("the gradient sum for group {} from replica {}", group, a.peer);
  });
  // The runtime receives into the buffer its previous send read: that one must have been received.
  if (const int sent = last_sent_[w][a.chunk]; sent >= 0 && t != not_yet)
    t = std::max(t, waiting(sum_received_[std::size_t(k) * groups_ + sent], why, [&] {
                   return fmt::format("the receipt of the gradient sum for group {} it sent", sent);
                 }));
  return t;
}

// Every replica of this stage has reached the same update (the replicas' sum before it).
double Interpreter::update_input(int w, const Action& a, std::string* why) const {
  if (d_ == 1) return 0.0;
  const int r = w % p_;
  const std::pair<int, int> key{a.microbatch, a.chunk};
  double t = 0;
  for (int other = 0; other < d_; ++other) {
    const auto& seen = at_update_[other * p_ + r];
    const auto it = seen.find(key);
    if (it == seen.end())
      return waiting(not_yet, why,
                     [&] { return fmt::format("replica {} of rank {} to reach update U{}", other, r, a.microbatch); });
    t = std::max(t, it->second);
  }
  return t + reduction_time(r) / s_.chunks;
}

double Interpreter::step_input(int w, std::string* why) {
  if (s_.asynchronous()) {
    if (!barrier_) return 0.0;  // buffered: a step boundary waits for nothing
    const std::size_t k = std::size_t(boundaries_[w]);
    double t = 0;
    for (int v = 0; v < processes_; ++v) {
      if (at_boundary_[v].size() <= k)
        return waiting(not_yet, why, [&] {
          return fmt::format("{} to reach step boundary {}, but it is held at position {} ({})", world_.name(v), k,
                             pc_[v], world_.token(v, pc_[v]));
        });
      t = std::max(t, at_boundary_[v][k]);
    }
    return t;
  }
  // Every replica of this stage has reached its step (when each did is kept: it may have run it since).
  const int r = w % p_;
  double t = 0;
  for (int other = 0; other < d_; ++other) {
    const int v = other * p_ + r;
    if (at_step_[v] == not_yet) {
      if (pc_[v] + 1 != world_.list(v).size())
        return waiting(not_yet, why,
                       [&] { return fmt::format("replica {} of rank {} to finish its list", other, r); });
      at_step_[v] = free_[v];
    }
    t = std::max(t, at_step_[v]);
  }
  return t + reduction_time(r);
}

void Interpreter::run_action(int w, const Action& a, double ready) {
  const int replica = w / p_, k = vstage(w, a);
  const double start = std::max(free_[w], ready);
  const bool boundary = a.op == Op::step && s_.asynchronous();
  const double end = start + (boundary ? 0.0 : duration(a.op, costs_[k]));
  free_[w] = end;
  if (a.op == Op::forward) forward_end_[at(replica, a.microbatch, k)] = end;
  if (is_backward(a.op)) backward_end_[at(replica, a.microbatch, k)] = end;
  if (a.op == Op::send_activation) activation_ready_[at(replica, a.microbatch, k + 1)] = end + transfer_;
  if (a.op == Op::send_gradient) gradient_ready_[at(replica, a.microbatch, k - 1)] = end + transfer_;
  if (world_.sums && a.op == Op::send_sum) {
    sum_ready_[std::size_t(k) * groups_ + a.microbatch] = end + transfer(w, a);
    last_sent_[w][a.chunk] = a.microbatch;
  }
  if (world_.sums && a.op == Op::recv_sum) sum_received_[std::size_t(k) * groups_ + a.microbatch] = end;
  if (boundary) ++boundaries_[w];
  if (!timed_) return;
  if (is_compute(a.op) || a.op == Op::step || a.op == Op::update) {
    run_.busy[w] += end - start;
    run_.timeline[w].push_back(Span{a, start, end});
  }
  if (a.op == Op::step) run_.step_ends[w].push_back(end);
}

Blocked Interpreter::blocked(int w) {
  Blocked b;
  b.process = w;
  b.position = pc_[w];
  const auto& list = world_.list(w);
  if (!meets(list[b.position])) {
    if (list[b.position].op == Op::step) step_input(w, &b.waits_for);
    else input_time(w, list[b.position], &b.waits_for);
    return b;
  }
  for (std::size_t i = b.position; i <= group_end(w, b.position); ++i) {
    if (met_[w][i]) continue;
    const Position& other = partner_[w][i];
    b.unmet.push_back(Unmet{i, other.process, other.index});
    if (b.waits_for.empty())
      b.waits_for = fmt::format("{} to reach position {} ({}), but it is held at position {} ({})",
                                world_.name(other.process), other.index, world_.token(other.process, other.index),
                                pc_[other.process], world_.token(other.process, pc_[other.process]));
  }
  return b;
}

Interpretation Interpreter::run() {
  if (mode_.messages == Delivery::stream_ordered) run_.unmatched = pair_pipeline(world_, partner_);
  if (run_.unmatched.empty() && world_.sums && mode_.sums == Delivery::stream_ordered)
    run_.unmatched = pair_sums(world_, partner_);
  if (!run_.unmatched.empty()) return run_;
  for (bool progress = true; progress;) {
    progress = false;
    for (int w = 0; w < processes_; ++w) {
      const auto& list = world_.list(w);
      while (pc_[w] < list.size()) {
        const Action& a = list[pc_[w]];
        if (meets(a)) {
          if (!run_group(w)) break;
          progress = true;
          continue;
        }
        arrive(w, a);
        const double ready = a.op == Op::step ? step_input(w, nullptr) : input_time(w, a, nullptr);
        if (ready == not_yet) break;
        run_action(w, a, ready);
        ++pc_[w];
        progress = true;
      }
    }
  }
  run_.stopped_at = pc_;
  run_.free_at = free_;
  std::string report;
  for (int w = 0; w < processes_; ++w) {
    if (pc_[w] == world_.list(w).size()) continue;
    run_.blocked.push_back(blocked(w));
    const Blocked& b = run_.blocked.back();
    report += fmt::format("{}{} waits for {}", report.empty() ? "" : "; ", world_.where(w, b.position), b.waits_for);
  }
  if (!report.empty()) {
    const bool stream = mode_.messages == Delivery::stream_ordered;
    run_.deadlock = fmt::format(
        "schedule deadlock{}: {}",
        !stream ? ""
                : fmt::format(" in stream order (NCCL: messages in list order, a send waits for its receive{})",
                              world_.sums && mode_.sums == Delivery::buffered ? "; the running sums by MPI" : ""),
        report);
  }
  return run_;
}

}  // namespace

Interpretation interpret(const Schedule& s, const Mode& mode) {
  World world;
  world.replicas = {&s};
  return Interpreter(world, mode).run();
}

Interpretation interpret(const Replicated& r, const Mode& mode) {
  World world;
  for (const auto& replica : r.replicas) world.replicas.push_back(&replica);
  world.sums = r.ordered;
  world.ordered = r.ordered;
  return Interpreter(world, mode).run();
}

}  // namespace kpipe::schedule
