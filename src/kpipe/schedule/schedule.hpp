#pragma once
// A pipeline schedule as data: for each rank, the ordered list of actions it runs in one optimizer step.
// p ranks each hold v model chunks, p*v virtual stages in all. Where the chunks sit is the placement:
// interleaved (Megatron's), chunk c of rank r is virtual stage c*p + r, so a micro-batch's forward visits
// ranks 0..p-1 v times over; V-shaped (ZB-V's), the odd chunks run the other way, chunk c of rank r is
// c*p + r for even c and c*p + p-1-r for odd c, so with v = 2 rank 0 holds the first and the last virtual
// stage and a micro-batch turns around on rank p-1 without a message. Generators (generate.hpp) write
// compute actions only; lower() (lower.hpp) adds the sends and receives; validate() (validate.hpp) checks
// either form before anything runs; passes (reduction.hpp) rewrite a schedule into another one.
//
// Synchronous schedules (Updates::flush) hold one optimizer step: every micro-batch's forward and backward,
// then S, the step, which applies the accumulated gradients (the flush). Asynchronous ones (PipeDream,
// asynchronous.hpp) never flush: their lists hold several steps, each ending in S, a step boundary that
// applies nothing; updates are actions of their own (U) that produce a new weight version, and every F, B,
// I and W names the weight version it reads (versions.hpp checks the rules).
#include <cstdint>
#include <vector>

namespace kpipe::schedule {

enum class Op : std::uint8_t {
  forward,          // F: forward of one micro-batch through one chunk
  backward,         // B: full backward (input and weight gradients)
  backward_input,   // I: gradient with respect to the chunk's input (on the critical path)
  backward_weight,  // W: gradient with respect to the chunk's weights (off the critical path)
  step,             // S: optimizer step, once, last (asynchronous schedules: a step boundary, one per step)
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
  // Asynchronous schedules: the optimizer update of one chunk's weights. `microbatch` is the last micro-batch
  // whose weight gradient it applies (PipeDream: that one alone; 2BW: the window it ends), `version` the
  // weight version it produces, from the newest one.
  update,
};

// How and when weights change (asynchronous.hpp says what each asynchronous rule is).
enum class Updates : std::uint8_t {
  flush,          // synchronous: one optimizer step after every micro-batch of the step (S)
  pipedream,      // an update after every backward; a forward reads the newest version (weight stashing)
  vertical_sync,  // the same updates; a micro-batch reads, on every stage, the version stage 0 read for it
  two_bw,         // PipeDream-2BW: an update per window of m micro-batches, its first p-1 read one version old
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
  // Asynchronous schedules: the weight version F, B, I and W read, the version U produces (numbered from
  // the newest version when the lists begin, 0; older ones held then are negative). 0 in synchronous ones.
  int version = 0;
  friend bool operator==(const Action& a, const Action& b) {
    return a.op == b.op && a.microbatch == b.microbatch && a.chunk == b.chunk && a.peer == b.peer &&
           a.version == b.version;
  }
  friend bool operator!=(const Action& a, const Action& b) { return !(a == b); }
};

struct Schedule {
  int ranks = 1;
  int microbatches = 1;  // per step
  int chunks = 1;
  Placement placement = Placement::interleaved;
  std::vector<std::vector<Action>> actions;  // one list per rank
  Updates updates = Updates::flush;
  // Forward-only lists (forward_only.hpp: evaluation, generation): forwards and their messages, no backward.
  bool forward_only = false;
  // Asynchronous schedules: the steps the lists hold (micro-batches are numbered 0 .. steps * microbatches - 1
  // across them) and, per rank, the weight versions held when the lists begin: versions 1 - n .. 0 (n = 1 for
  // a fresh run; a run resumed from a checkpoint starts with the versions its micro-batches in flight read).
  int steps = 1;
  std::vector<int> versions_at_start;  // empty: 1 on every rank

  bool asynchronous() const { return updates != Updates::flush; }
  int microbatch_count() const { return microbatches * steps; }  // micro-batch indices are below this
  int initial_versions(int rank) const { return versions_at_start.empty() ? 1 : versions_at_start.at(rank); }
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
           a.placement == b.placement && a.actions == b.actions && a.updates == b.updates && a.steps == b.steps &&
           a.versions_at_start == b.versions_at_start && a.forward_only == b.forward_only;
  }
  friend bool operator!=(const Schedule& a, const Schedule& b) { return !(a == b); }
};

// True when the schedule holds messages (it went through lower() or was written so by hand).
bool is_lowered(const Schedule& s);

const char* to_string(Placement placement);  // "interleaved", "v"
const char* to_string(Updates updates);      // "flush", "pipedream", "vertical-sync", "2bw"

// What a message carries and where it goes, from either end's action.
struct Message {
  bool gradient = false;  // false: an activation (forward direction)
  int microbatch = 0;
  int src_rank = 0, dst_rank = 0;
  int dst_vstage = 0;     // the virtual stage that consumes it
};
Message message_of(const Schedule& s, int rank, const Action& comm);

// A tag that tells apart every message between one pair of ranks that can be under way at once:
// 0 <= tag < message_tags(s). Synchronous schedules: every message of the step (2 * microbatches * chunks
// tags). Asynchronous ones, whose messages cross step boundaries and whose micro-batches are numbered over
// many steps: the micro-batch modulo tag_period(s), which is more than the micro-batches ever in flight.
int message_tag(const Schedule& s, const Message& message);
int tag_period(const Schedule& s);
int message_tags(const Schedule& s);
// The tag of the message `microbatches` micro-batches after the one tagged `tag` (lists run shifted by whole
// steps, or numbered from a resume).
int shifted_tag(const Schedule& s, int tag, std::int64_t microbatches);

}  // namespace kpipe::schedule
