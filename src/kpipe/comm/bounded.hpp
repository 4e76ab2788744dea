#pragma once
// Collectives with a bound. Every collective kpipe runs goes through here, so that a rank that stops
// (SIGSTOP, a hung file system, a dead node) ends the whole job within pipeline.recv_timeout_s instead of
// leaving the others in MPI_Allreduce forever (docs/architecture.md, property 5).
//
// Each call starts the MPI non-blocking collective (MPI_Iallreduce, MPI_Ibcast, ...) and polls it until it
// completes or the bound passes. So that the message can name who is missing, every rank other than rank 0
// of the communicator also sends rank 0 a one-int "arrived" message as it enters: when the bound passes,
// rank 0 names the ranks whose message never came, and what it was waiting in, and ends the job
// (MPI_Abort, exit code 3). The other ranks give rank 0 a grace period to do so, then end the job
// themselves, saying that rank 0 did not answer (it may be the one that stopped).
//
// The "arrived" messages travel on the caller's communicator with the largest tag MPI allows (MPI_TAG_UB),
// which kpipe's point-to-point messages never use (their tags are small: schedule::message_tag).
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace kpipe::comm {

// How long a collective may wait, and what it is, for the message: "the loss allreduce of step 12".
struct Bound {
  double seconds = 300;
  std::string what;
  // The node of every world rank (ProcessGrid::nodes), so that the message says where the missing ranks run;
  // none: the ranks alone.
  std::shared_ptr<const std::vector<std::string>> nodes = nullptr;
};

// The grace non-root ranks give rank 0 to report a timeout before reporting it themselves.
double grace_seconds(double timeout_s);

// The MPI type of a float, double or integer type: one map for all of kpipe's collectives.
template <class T> MPI_Datatype mpi_type() {
  if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
  else if constexpr (std::is_same_v<T, int>) return MPI_INT;
  else if constexpr (std::is_same_v<T, std::int64_t>) return MPI_INT64_T;
  else if constexpr (std::is_same_v<T, std::uint64_t>) return MPI_UINT64_T;
  else if constexpr (std::is_same_v<T, char>) return MPI_CHAR;
  else static_assert(std::is_same_v<T, float>, "no MPI type for this type");
}

// MPI counts are int: a larger count throws instead of wrapping.
int mpi_count(std::size_t n);

// A bounded collective under way: the constructor announces this rank's arrival and starts it with `start`;
// wait() completes it under the bound, counted from the wait, so that the caller may work in between while the
// other ranks arrive. Several may be under way on one communicator, and other collectives may run meanwhile,
// when every rank starts them in the same order, as MPI requires (the arrival messages then match in that
// order too: MPI does not let messages between two ranks overtake). A nonblocking collective's request may
// not be freed, so one still under way when its owner goes (an exception is ending the run) is left to MPI,
// and with it the memory MPI may still write into: the arrival messages' and `buffers`, the collective's own.
class PendingCollective {
 public:
  PendingCollective() = default;
  PendingCollective(MPI_Comm comm, Bound bound, const std::function<MPI_Request()>& start,
                    std::shared_ptr<void> buffers = nullptr);
  PendingCollective(PendingCollective&& other) noexcept;
  PendingCollective& operator=(PendingCollective&& other) noexcept;
  PendingCollective(const PendingCollective&) = delete;
  PendingCollective& operator=(const PendingCollective&) = delete;
  ~PendingCollective() { abandon(); }

  bool under_way() const { return request_ != MPI_REQUEST_NULL; }
  // Completes it (nothing when not under way); past the bound, ends the job as every bounded collective does.
  void wait();

 private:
  // The memory MPI may write into until the collective completes.
  struct InFlight {
    std::vector<int> tokens;        // the arrival messages' one int each
    std::shared_ptr<void> buffers;  // the collective's own
  };
  // Leaves the memory to MPI if the collective is still under way (it is freed with this object otherwise).
  void abandon() {
    if (under_way()) (void)in_flight_.release();
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  Bound bound_;
  int size_ = 1;
  std::vector<MPI_Request> arrivals_;  // rank 0: the others' arrival messages; the others: their own
  std::unique_ptr<InFlight> in_flight_;
  MPI_Request request_ = MPI_REQUEST_NULL;
};

// An allreduce started now and completed by wait(), which returns the result. Its values are the collective's
// buffers, so that MPI never writes into memory freed under it.
template <class T> class PendingAllreduce {
 public:
  PendingAllreduce() = default;
  PendingAllreduce(std::vector<T> values, MPI_Op op, MPI_Comm comm, Bound bound)
      : values_(std::make_shared<std::vector<T>>(std::move(values))),
        collective_(
            comm, std::move(bound),
            [&] {
              MPI_Request request;
              MPI_Iallreduce(MPI_IN_PLACE, values_->data(), mpi_count(values_->size()), mpi_type<T>(), op, comm,
                             &request);
              return request;
            },
            values_) {}

  bool under_way() const { return collective_.under_way(); }
  std::vector<T> wait() {
    collective_.wait();
    return values_ ? std::move(*values_) : std::vector<T>{};
  }

 private:
  std::shared_ptr<std::vector<T>> values_;  // shared with collective_, which keeps them while MPI may write
  PendingCollective collective_;
};

void allreduce(void* data, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm, const Bound& bound);
// A communicator of its own over comm's ranks (MPI_Comm_idup), for collectives that run beside comm's own
// from another thread; the caller frees it (MPI_Comm_free).
MPI_Comm duplicate(MPI_Comm comm, const Bound& bound);
void bcast(void* data, int count, MPI_Datatype type, int root, MPI_Comm comm, const Bound& bound);
void barrier(MPI_Comm comm, const Bound& bound);
// count elements from every rank, in rank order, into recv (size x count elements).
void allgather(const void* send, int count, MPI_Datatype type, void* recv, MPI_Comm comm, const Bound& bound);

template <class T> void allreduce(std::vector<T>& values, MPI_Op op, MPI_Comm comm, const Bound& bound) {
  allreduce(values.data(), int(values.size()), mpi_type<T>(), op, comm, bound);
}
template <class T> T allreduce(T value, MPI_Op op, MPI_Comm comm, const Bound& bound) {
  allreduce(&value, 1, mpi_type<T>(), op, comm, bound);
  return value;
}
template <class T> std::vector<T> allgather(const std::vector<T>& mine, MPI_Comm comm, const Bound& bound) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  std::vector<T> all(mine.size() * std::size_t(size));
  allgather(mine.data(), int(mine.size()), mpi_type<T>(), all.data(), comm, bound);
  return all;
}
// root's text on every rank.
std::string bcast(std::string text, int root, MPI_Comm comm, const Bound& bound);

// The one variable-length gather: every rank's bytes, concatenated in rank order, on root (empty
// elsewhere); counts[r] is rank r's share (on root). Throws std::length_error past 2 GiB in all.
std::string gatherv(const std::string& mine, int root, MPI_Comm comm, const Bound& bound,
                    std::vector<int>* counts = nullptr);
// The same on every rank.
std::string allgatherv(const std::string& mine, MPI_Comm comm, const Bound& bound, std::vector<int>* counts = nullptr);

// Vectors of plain values through the byte gathers above (element counts per rank in counts).
template <class T>
std::vector<T> gatherv(const std::vector<T>& mine, int root, MPI_Comm comm, const Bound& bound,
                       std::vector<int>* counts = nullptr) {
  static_assert(std::is_trivially_copyable_v<T>);
  const std::string bytes(reinterpret_cast<const char*>(mine.data()), mine.size() * sizeof(T));
  const std::string all = gatherv(bytes, root, comm, bound, counts);
  if (counts)
    for (int& c : *counts) c /= int(sizeof(T));
  std::vector<T> out(all.size() / sizeof(T));
  if (!out.empty()) std::copy_n(all.data(), out.size() * sizeof(T), reinterpret_cast<char*>(out.data()));
  return out;
}

}  // namespace kpipe::comm
