#include "kpipe/comm/bounded.hpp"
#include "kpipe/comm/deadline.hpp"
#include "kpipe/core/exit_codes.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <thread>
#include <utility>

namespace kpipe::comm {

namespace {

using Clock = std::chrono::steady_clock;

int rank_in(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  return rank;
}

int size_of(MPI_Comm comm) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  return size;
}

// The world rank of rank r of comm, for messages.
int world_rank_of(MPI_Comm comm, int r) {
  MPI_Group group, world;
  MPI_Comm_group(comm, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  int out = r;
  MPI_Group_translate_ranks(group, 1, &r, world, &out);
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  return out;
}

int arrival_tag(MPI_Comm comm) {
  int* upper = nullptr;
  int found = 0;
  MPI_Comm_get_attr(comm, MPI_TAG_UB, &upper, &found);
  return found && upper ? *upper : 32767;
}

// The three reserved tags: "arrived" (to rank 0), "are you there?" (from rank 0) and "here" (to rank 0).
struct Tags {
  int arrived, ping, pong;
};

Tags tags_of(MPI_Comm comm) {
  const int top = arrival_tag(comm);
  return {top, top - 1, top - 2};
}

// A non-root rank answers rank 0's "are you there?" while it waits (rank 0 asks when a collective that
// every rank reached does not complete: the rank that does not answer is the one that stopped).
void answer_pings(MPI_Comm comm, const Tags& tags) {
  int pinged = 0;
  MPI_Iprobe(0, tags.ping, comm, &pinged, MPI_STATUS_IGNORE);
  if (!pinged) return;
  int token = 0;
  MPI_Recv(&token, 1, MPI_INT, 0, tags.ping, comm, MPI_STATUS_IGNORE);
  MPI_Request request;
  MPI_Isend(&token, 1, MPI_INT, 0, tags.pong, comm, &request);
  MPI_Request_free(&request);  // one int: delivered eagerly; nobody waits for it
}

// Polls until request completes or the deadline passes: spin briefly (a collective usually completes
// within microseconds of the last rank's arrival), then yield the core between tests.
bool poll(MPI_Request& request, Clock::time_point deadline, MPI_Comm comm = MPI_COMM_NULL, const Tags* tags = nullptr) {
  for (long spins = 0;; ++spins) {
    int done = 0;
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done) return true;
    if (Clock::now() > deadline) return false;
    if (tags) answer_pings(comm, *tags);
    if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

// Rank 0, when every rank reached the collective but it did not complete: the ranks of comm that do not
// answer within `seconds`.
std::vector<int> silent_ranks(MPI_Comm comm, const Tags& tags, int size, double seconds) {
  std::vector<int> tokens(static_cast<std::size_t>(size), 0), pongs(static_cast<std::size_t>(size), 0);
  std::vector<MPI_Request> sent(std::size_t(size), MPI_REQUEST_NULL), answers(std::size_t(size), MPI_REQUEST_NULL);
  for (int r = 1; r < size; ++r) {
    MPI_Isend(&tokens[r], 1, MPI_INT, r, tags.ping, comm, &sent[r]);
    MPI_Irecv(&pongs[r], 1, MPI_INT, r, tags.pong, comm, &answers[r]);
  }
  const auto deadline = deadline_after(seconds);
  std::vector<int> silent;
  for (int r = 1; r < size; ++r)
    if (!poll(answers[r], deadline)) silent.push_back(r);
  return silent;
}

std::string node_of(const Bound& bound, int world_rank) {
  return bound.nodes && world_rank >= 0 && std::size_t(world_rank) < bound.nodes->size()
             ? (*bound.nodes)[std::size_t(world_rank)]
             : std::string();
}

// "rank 2 (node n2)", "ranks 2, 3 (node n2)", "ranks 1 (node n1), 4 (node n2)"; without names the ranks alone.
std::string list_ranks(const std::vector<int>& ranks, const Bound& bound) {
  std::string text = ranks.size() > 1 ? "ranks " : "rank ";
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const std::string node = node_of(bound, ranks[i]);
    text += (i ? ", " : "") + std::to_string(ranks[i]);
    if (!node.empty() && (i + 1 == ranks.size() || node_of(bound, ranks[i + 1]) != node)) text += " (node " + node + ")";
  }
  return text;
}

[[noreturn]] void end_job(const std::string& message) {
  abort_job(ExitCode::peer_lost, message + "; aborting");
}

// A collective ran past its bound (`arrivals`: its arrival messages; rank 0: the others', the others: their
// own). Rank 0 names the ranks at fault and ends the job; the others give it the time to, then end it.
[[noreturn]] void end_job_on_timeout(MPI_Comm comm, const Bound& bound, std::vector<MPI_Request>& arrivals) {
  const int rank = rank_in(comm), size = size_of(comm);
  const Tags tags = tags_of(comm);
  const int me = world_rank_of(comm, rank);
  const std::string head = fmt::format("{}: {} did not complete within pipeline.recv_timeout_s = {:g} s",
                                       list_ranks({me}, bound), bound.what, bound.seconds);
  const double grace = grace_seconds(bound.seconds);
  if (rank == 0) {
    std::vector<int> missing;
    for (int r = 1; r < size; ++r) {
      int arrived = 0;
      MPI_Test(&arrivals[r - 1], &arrived, MPI_STATUS_IGNORE);
      if (!arrived) missing.push_back(world_rank_of(comm, r));
    }
    if (!missing.empty())
      end_job(fmt::format("{}: {} never reached it (stopped, dead, or stuck elsewhere)", head,
                          list_ranks(missing, bound)));
    // Everyone reached it: the one that no longer answers stopped inside it.
    std::vector<int> silent;
    for (int r : silent_ranks(comm, tags, size, grace / 2)) silent.push_back(world_rank_of(comm, r));
    if (!silent.empty())
      end_job(fmt::format("{}: {} reached it, then stopped answering (stopped or dead)", head,
                          list_ranks(silent, bound)));
    end_job(fmt::format("{} although every rank reached it and answers", head));
  }
  // Rank 0 names the ranks at fault if it can (it may ask this one whether it is there): give it the time.
  const auto limit = deadline_after(grace);
  while (Clock::now() < limit) {
    answer_pings(comm, tags);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  end_job(fmt::format("{}, and {} (which names the ranks at fault) did not report: it stopped, died, or is "
                      "stuck elsewhere",
                      head, list_ranks({world_rank_of(comm, 0)}, bound)));
}

}  // namespace

PendingCollective::PendingCollective(MPI_Comm comm, Bound bound, const std::function<MPI_Request()>& start,
                                     std::shared_ptr<void> buffers)
    : comm_(comm),
      bound_(std::move(bound)),
      size_(size_of(comm)),
      in_flight_(std::make_unique<InFlight>(InFlight{{}, std::move(buffers)})) {
  if (size_ > 1) {
    // Rank 0 listens for everyone's arrival; the others announce theirs.
    const int rank = rank_in(comm);
    const int tag = tags_of(comm).arrived;
    auto& tokens = in_flight_->tokens;
    arrivals_.assign(rank == 0 ? std::size_t(size_ - 1) : 1, MPI_REQUEST_NULL);
    tokens.assign(arrivals_.size(), 0);
    if (rank == 0) {
      for (int r = 1; r < size_; ++r) MPI_Irecv(&tokens[r - 1], 1, MPI_INT, r, tag, comm, &arrivals_[r - 1]);
    } else {
      MPI_Isend(&tokens[0], 1, MPI_INT, 0, tag, comm, &arrivals_[0]);
    }
  }
  request_ = start();
}

PendingCollective::PendingCollective(PendingCollective&& other) noexcept
    : comm_(other.comm_),
      bound_(std::move(other.bound_)),
      size_(other.size_),
      arrivals_(std::move(other.arrivals_)),
      in_flight_(std::move(other.in_flight_)),
      request_(std::exchange(other.request_, MPI_REQUEST_NULL)) {}

PendingCollective& PendingCollective::operator=(PendingCollective&& other) noexcept {
  if (this != &other) {
    abandon();
    comm_ = other.comm_;
    bound_ = std::move(other.bound_);
    size_ = other.size_;
    arrivals_ = std::move(other.arrivals_);
    in_flight_ = std::move(other.in_flight_);
    request_ = std::exchange(other.request_, MPI_REQUEST_NULL);
  }
  return *this;
}

void PendingCollective::wait() {
  if (!under_way()) return;
  if (size_ == 1) {
    MPI_Wait(&request_, MPI_STATUS_IGNORE);
    return;
  }
  const int rank = rank_in(comm_);
  const Tags tags = tags_of(comm_);
  bool done = poll(request_, deadline_after(bound_.seconds), comm_, rank == 0 ? nullptr : &tags);
  if (done) {
    // Every rank entered the collective, so every arrival message was sent: they complete at once.
    const auto limit = deadline_after(bound_.seconds);
    for (auto& arrival : arrivals_)
      if (!poll(arrival, limit)) {
        done = false;
        break;
      }
    if (done) return;
  }
  end_job_on_timeout(comm_, bound_, arrivals_);
}

namespace {

// Runs one non-blocking collective started by `start` under the bound, with the arrival messages.
void run_bounded(MPI_Comm comm, const Bound& bound, const std::function<MPI_Request()>& start) {
  PendingCollective(comm, bound, start).wait();
}

}  // namespace

int mpi_count(std::size_t n) {
  if (n > std::size_t(INT_MAX)) throw std::length_error("kpipe::comm: more than INT_MAX elements in one MPI call");
  return int(n);
}

double grace_seconds(double timeout_s) { return std::clamp(timeout_s / 2, 0.5, 10.0); }

void allreduce(void* data, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm, const Bound& bound) {
  run_bounded(comm, bound, [&] {
    MPI_Request request;
    MPI_Iallreduce(MPI_IN_PLACE, data, count, type, op, comm, &request);
    return request;
  });
}

MPI_Comm duplicate(MPI_Comm comm, const Bound& bound) {
  MPI_Comm copy = MPI_COMM_NULL;
  run_bounded(comm, bound, [&] {
    MPI_Request request;
    MPI_Comm_idup(comm, &copy, &request);
    return request;
  });
  return copy;
}

void bcast(void* data, int count, MPI_Datatype type, int root, MPI_Comm comm, const Bound& bound) {
  run_bounded(comm, bound, [&] {
    MPI_Request request;
    MPI_Ibcast(data, count, type, root, comm, &request);
    return request;
  });
}

void barrier(MPI_Comm comm, const Bound& bound) {
  run_bounded(comm, bound, [&] {
    MPI_Request request;
    MPI_Ibarrier(comm, &request);
    return request;
  });
}

void allgather(const void* send, int count, MPI_Datatype type, void* recv, MPI_Comm comm, const Bound& bound) {
  run_bounded(comm, bound, [&] {
    MPI_Request request;
    MPI_Iallgather(send, count, type, recv, count, type, comm, &request);
    return request;
  });
}

std::string bcast(std::string text, int root, MPI_Comm comm, const Bound& bound) {
  long long size = (long long)text.size();
  bcast(&size, 1, MPI_LONG_LONG, root, comm, bound);
  text.resize(std::size_t(size));
  bcast(text.data(), mpi_count(text.size()), MPI_CHAR, root, comm, bound);
  return text;
}

std::string gatherv(const std::string& mine, int root, MPI_Comm comm, const Bound& bound, std::vector<int>* counts) {
  const int size = size_of(comm), rank = rank_in(comm);
  const int count = mpi_count(mine.size());
  std::vector<int> all_counts(std::size_t(rank == root ? size : 0)), offsets(all_counts.size());
  run_bounded(comm, bound, [&] {
    MPI_Request request;
    MPI_Igather(&count, 1, MPI_INT, all_counts.data(), 1, MPI_INT, root, comm, &request);
    return request;
  });
  std::string all;
  if (rank == root) {
    long long total = 0;
    for (int r = 0; r < size; ++r) {
      offsets[r] = int(total);
      total += all_counts[r];
    }
    all.resize(std::size_t(mpi_count(std::size_t(total))));
  }
  run_bounded(comm, bound, [&] {
    MPI_Request request;
    MPI_Igatherv(mine.data(), count, MPI_CHAR, all.data(), all_counts.data(), offsets.data(), MPI_CHAR, root, comm,
                 &request);
    return request;
  });
  if (counts) *counts = all_counts;
  return all;
}

std::string allgatherv(const std::string& mine, MPI_Comm comm, const Bound& bound, std::vector<int>* counts) {
  const int size = size_of(comm);
  const int count = mpi_count(mine.size());
  std::vector<int> all_counts(static_cast<std::size_t>(size)), offsets(static_cast<std::size_t>(size));
  run_bounded(comm, bound, [&] {
    MPI_Request request;
    MPI_Iallgather(&count, 1, MPI_INT, all_counts.data(), 1, MPI_INT, comm, &request);
    return request;
  });
  long long total = 0;
  for (int r = 0; r < size; ++r) {
    offsets[r] = int(total);
    total += all_counts[r];
  }
  std::string all(std::size_t(mpi_count(std::size_t(total))), '\0');
  run_bounded(comm, bound, [&] {
    MPI_Request request;
    MPI_Iallgatherv(mine.data(), count, MPI_CHAR, all.data(), all_counts.data(), offsets.data(), MPI_CHAR, comm,
                    &request);
    return request;
  });
  if (counts) *counts = all_counts;
  return all;
}

}  // namespace kpipe::comm
