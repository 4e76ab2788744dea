#pragma once
// The text form of a schedule: one line per rank (line i is rank i), actions separated by blanks.
//   F3  B3  I3  W3    forward / backward / input-gradient / weight-gradient of micro-batch 3 (chunk 0)
//   F3.1              the same on chunk 1 (to_text writes the suffix only when chunks > 1)
//   S                 optimizer step
//   sa3>2  ra3<0      send the activation of micro-batch 3 to rank 2 / receive it from rank 0
//   sg3>0  rg3<2      send / receive the gradient of micro-batch 3 (lowered form only)
//   ss4>1  rs4<0      send / receive the running sum of the weight gradients for reduction group 4 to / from
//                     replica 1 / 0 (the ordered data-parallel reduction, reduction.hpp)
//   placement v       a line before the first rank's: the chunks sit in a V (ZB-V), not interleaved
// Asynchronous schedules (asynchronous.hpp) say so in a line before the ranks', and name versions:
//   updates pipedream a line before the first rank's: pipedream, vertical-sync or 2bw (no flush)
//   resumed           a line before the first rank's: the lists continue a run from a checkpoint (each rank
//                     starts with the most versions its rule holds, numbered up to 0)
//   F3@1  B3@1        the weight version the action reads
//   U3@4              the update after micro-batch 3's gradient, producing version 4
//   S                 a step boundary (one per step; no flush)
// '#' starts a comment that runs to the end of the line; blank and comment-only lines are skipped.
// A message token names this rank's chunk, as Action does: on rank 1 with p = 2, "sa3.0>0" sends chunk 0's
// output of micro-batch 3 to rank 0, where chunk 1 consumes it as "ra3.1<1".
#include <string>

#include "kpipe/schedule/schedule.hpp"

namespace kpipe::schedule {

// "F3", "F3.1", "S", "sa3>2", ...; with `versions`, F, B, I, W and U carry theirs ("F3@1", "U3@4").
std::string to_token(const Action& a, int chunks, bool versions = false);
std::string to_text(const Schedule& s);

// How the validators and passes name an action they reject: "schedule rank 1 position 4 (B2)"; reject()
// throws InputError with that and the reason.
std::string position_text(const Schedule& s, int rank, std::size_t position);
[[noreturn]] void reject(const Schedule& s, int rank, std::size_t position, const std::string& why);

// The reverse of to_text. microbatches / chunks of 0 are taken from the largest index used (asynchronous:
// micro-batches per step, the indices spanning every step); given ones bound the indices. Errors throw InputError naming the line and token ("schedule line 2 token 5 'X1': ...").
// The result is not validated: call validate().
Schedule parse(const std::string& text, int microbatches = 0, int chunks = 0);

// parse() of a file's contents; errors name pipeline.schedule_file and the path.
Schedule read_schedule_file(const std::string& path, int microbatches = 0, int chunks = 0);

}  // namespace kpipe::schedule
