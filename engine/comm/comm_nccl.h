// NCCL implementation of Comm over device memory (CUDA builds only). The unique id is made by
// rank 0 of the group and broadcast over the group's MPI communicator; the init is non-blocking,
// under the job's timeout, and aborted past it. Collectives run on the communicator's own CUDA
// stream after the producer stream's work (so they overlap with later compute); wait() makes the
// producer stream wait for the collective's end on the device and returns at once, so the host
// keeps enqueueing. A watchdog thread ends the job (naming the collective, the group and the
// rank) when a collective runs longer than the timeout or the communicator fails; the exposed
// time of each wait (the compute stream's stall) comes from device events.
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
