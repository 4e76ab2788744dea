#pragma once
// The MPI type of a transport's element type, for the transports that go through MPI.
#include <mpi.h>

#include "kpipe/comm/bounded.hpp"
#include "kpipe/comm/transport.hpp"

namespace kpipe::comm {

inline MPI_Datatype mpi_type_of(Scalar type) { return type == Scalar::f32 ? mpi_type<float>() : mpi_type<double>(); }

}  // namespace kpipe::comm
