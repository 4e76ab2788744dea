#pragma once
// A pipeline schedule as data: for each rank, the ordered list of actions it runs in one optimizer step.
// p ranks each hold v model chunks, p*v virtual stages in all. Where the chunks sit is the placement:
// interleaved (Megatron's), chunk c of rank r is virtual stage c*p + r, so a micro-batch's forward visits
// ranks 0..p-1 v times over; V-shaped (ZB-V's), the odd chunks run the other way, chunk c of rank r is
// c*p + r for even c and c*p + p-1-r for odd c, so with v = 2 rank 0 holds the first and the last virtual
// stage and a micro-batch turns around on rank p-1 without a message. Generators (generate.hpp) write
// compute actions only; lower() (lower.hpp) adds the sends and receives; validate() (validate.hpp) checks
// either form before anything runs; passes (reduction.hpp) rewrite a schedule into another one.
#include <cstdint>
#include <vector>

namespace kpipe::schedule {

enum class Op : std::uint8_t {
  forward,          // F: forward of one micro-batch through one chunk
  backward,         // B: full backward (input and weight gradients)
  backward_input,   // I: gradient with respect to the chunk's input (on the critical path)
  backward_weight,  // W: gradient with respect to the chunk's weights (off the critical path)
  step,             // S: optimizer step, once, last
  send_activation,  // forward output to the rank of the next virtual stage
  recv_activation,  // forward input from the rank of the previous virtual stage
  send_gradient,    // input gradient to the rank of the previous virtual stage
  recv_gradient,    // output gradient from the rank of the next virtual stage
  // The ordered data-parallel reduction (reduction.hpp): the running sum of one chunk's weight gradients
  // between replicas of the same rank. `microbatch` is the reduction group whose weight gradients come
  // next, `peer` the other replica: after the W's of group q-1 the holder sends the sum for group q; group
  // q's holder receives it before group q's W's.
  send_sum,
  recv_sum,
};

enum class Placement : std::uint8_t { interleaved, v };

bool is_compute(Op op);  // F, B, I, W (not S)
bool is_comm(Op op);     // the pipeline's messages: sends and receives of activations and gradients
bool is_send(Op op);
bool is_recv(Op op);
bool is_reduction(Op op);  // the running sum's messages between replicas
bool is_weight_gradient(Op op);  // B or W: the action that adds a micro-batch's weight gradient
bool is_backward(Op op);  // B or I: the action that consumes the output gradient and produces the input one

struct Action {
  Op op = Op::forward;
  int microbatch = 0;  // 0 for the step
  // The chunk on this rank that computes the action or, for a message, produces (send) or consumes (recv)
  // the data: a send of chunk c's activation feeds virtual stage c*p + r + 1 on the peer.
  int chunk = 0;
  int peer = -1;  // messages only: the other rank (for the running sum: the other replica)
  friend bool operator==(const Action& a, const Action& b) {
    return a.op == b.op && a.microbatch == b.microbatch && a.chunk == b.chunk && a.peer == b.peer;
  }
  friend bool operator!=(const Action& a, const Action& b) { return !(a == b); }
};

struct Schedule {
  int ranks = 1;
  int microbatches = 1;
  int chunks = 1;
  Placement placement = Placement::interleaved;
  std::vector<std::vector<Action>> actions;  // one list per rank

  int virtual_stages() const { return ranks * chunks; }
  int virtual_stage(int rank, int chunk) const {
    return chunk * ranks + (reversed(chunk) ? ranks - 1 - rank : rank);
  }
  int rank_of(int vstage) const {
    const int position = vstage % ranks;
    return reversed(chunk_of(vstage)) ? ranks - 1 - position : position;
  }
  int chunk_of(int vstage) const { return vstage / ranks; }
  bool reversed(int chunk) const { return placement == Placement::v && chunk % 2 == 1; }
  bool is_first_stage(int rank, int chunk) const { return virtual_stage(rank, chunk) == 0; }
  bool is_last_stage(int rank, int chunk) const { return virtual_stage(rank, chunk) == virtual_stages() - 1; }

  friend bool operator==(const Schedule& a, const Schedule& b) {
    return a.ranks == b.ranks && a.microbatches == b.microbatches && a.chunks == b.chunks &&
           a.placement == b.placement && a.actions == b.actions;
  }
  friend bool operator!=(const Schedule& a, const Schedule& b) { return !(a == b); }
};

// True when the schedule holds messages (it went through lower() or was written so by hand).
bool is_lowered(const Schedule& s);

const char* to_string(Placement placement);  // "interleaved", "v"

// What a message carries and where it goes, from either end's action.
struct Message {
  bool gradient = false;  // false: an activation (forward direction)
  int microbatch = 0;
  int src_rank = 0, dst_rank = 0;
  int dst_vstage = 0;     // the virtual stage that consumes it
};
Message message_of(const Schedule& s, int rank, const Action& comm);

// A tag that tells apart every message between one pair of ranks within one step:
// 0 <= tag < 2 * microbatches * chunks.
int message_tag(const Schedule& s, const Message& message);

}  // namespace kpipe::schedule
