#include "kpipe/schedule/schedule.hpp"

namespace kpipe::schedule {

bool is_compute(Op op) {
  return op == Op::forward || op == Op::backward || op == Op::backward_input || op == Op::backward_weight;
}

bool is_comm(Op op) { return is_send(op) || is_recv(op); }

bool is_send(Op op) { return op == Op::send_activation || op == Op::send_gradient; }

bool is_recv(Op op) { return op == Op::recv_activation || op == Op::recv_gradient; }

bool is_backward(Op op) { return op == Op::backward || op == Op::backward_input; }

bool is_reduction(Op op) { return op == Op::send_sum || op == Op::recv_sum; }

bool is_weight_gradient(Op op) { return op == Op::backward || op == Op::backward_weight; }

const char* to_string(Placement placement) { return placement == Placement::v ? "v" : "interleaved"; }

const char* to_string(Updates updates) {
  switch (updates) {
    case Updates::flush: return "flush";
    case Updates::pipedream: return "pipedream";
    case Updates::vertical_sync: return "vertical-sync";
    case Updates::two_bw: return "2bw";
  }
  return "?";
}

bool is_lowered(const Schedule& s) {
  for (const auto& list : s.actions)
    for (const auto& a : list)
      if (is_comm(a.op)) return true;
  return false;
}

Message message_of(const Schedule& s, int rank, const Action& comm) {
  Message m;
  m.gradient = comm.op == Op::send_gradient || comm.op == Op::recv_gradient;
  m.microbatch = comm.microbatch;
  const int here = s.virtual_stage(rank, comm.chunk);
  if (is_send(comm.op)) {
    m.src_rank = rank;
    m.dst_rank = comm.peer;
    m.dst_vstage = m.gradient ? here - 1 : here + 1;
  } else {
    m.src_rank = comm.peer;
    m.dst_rank = rank;
    m.dst_vstage = here;
  }
  return m;
}

int tag_period(const Schedule& s) {
  // Asynchronous: a rank runs at most p micro-batches ahead of another (1F1B's warm-up), and receives are
  // posted a few actions ahead; 2 (m + p) leaves room for both.
  return s.asynchronous() ? 2 * (s.microbatches + s.ranks) : s.microbatches;
}

int message_tags(const Schedule& s) { return 2 * tag_period(s) * s.chunks; }

int message_tag(const Schedule& s, const Message& message) {
  const int dst_chunk = s.chunk_of(message.dst_vstage);
  return ((message.microbatch % tag_period(s)) * s.chunks + dst_chunk) * 2 + (message.gradient ? 1 : 0);
}

int shifted_tag(const Schedule& s, int tag, std::int64_t microbatches) {
  const int period = tag_period(s);
  const int shift = int((microbatches % period + period) % period);
  return (tag + shift * s.chunks * 2) % message_tags(s);
}

}  // namespace kpipe::schedule
