// NCCL implementation of Comm over device memory (CUDA builds only). The unique id is made by
// rank 0 of the group and broadcast over the group's MPI communicator. Collectives run on the
// communicator's own CUDA stream after the producer stream's work (so they overlap with later
// compute); wait() polls the collective's completion event and, past the timeout, aborts the NCCL
// communicator and the job with a message naming the collective and the rank.
#pragma once
#include <mpi.h>

#include <memory>
#include <string>

#include "engine/comm/comm.h"

namespace zt {

// `producer_stream` (a cudaStream_t, may be null for the legacy stream) is the stream whose work
// writes the buffers handed to the collectives.
std::unique_ptr<Comm> make_nccl_comm(MPI_Comm group, const std::string& name, double timeout_s,
                                     void* producer_stream);

}  // namespace zt
