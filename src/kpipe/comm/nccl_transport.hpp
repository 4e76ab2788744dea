#pragma once
// NCCL between the GPUs of a communicator's ranks (built with KPIPE_ENABLE_NCCL on CUDA):
//  - one NCCL communicator per MPI communicator (pipeline, replicas), made from an ncclUniqueId that rank 0
//    creates and MPI broadcasts; non-blocking, so that a rank that never joins is an error after timeout_s
//    instead of a hang;
//  - ncclSend/ncclRecv, ncclAllReduce and ncclBroadcast on the execution space's CUDA stream, inside
//    ncclGroupStart/End between begin_group() and end_group();
//  - transfers complete in stream order (stream_ordered()): the work queued after a receive reads its data,
//    the work queued after a send may overwrite its buffer. NCCL has no tags: the k-th send from rank a to
//    rank b meets b's k-th receive from a, which schedule/stream_order.hpp proves for every schedule that runs
//    over it, together with the absence of deadlocks under NCCL's blocking semantics;
//  - synchronize() polls an event and the communicator's error state until timeout_s, then aborts the
//    communicator (ncclCommAbort): a peer that is gone ends the job in bounded time.
// Each rank must drive a GPU of its own: NCCL refuses two ranks on one device (runtime/placement.hpp checks).
#include <mpi.h>

#include <memory>

#include "kpipe/comm/transport.hpp"

namespace kpipe::comm {

// The NCCL transport over `comm`'s ranks (a collective over comm). Throws std::logic_error on a build without
// NCCL, std::runtime_error when NCCL fails or the communicator is not complete within timeout_s.
std::unique_ptr<Transport> make_nccl_transport(MPI_Comm comm, double timeout_s);

}  // namespace kpipe::comm
