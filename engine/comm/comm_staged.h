// [comm] backend = "mpi" for device memory: each collective copies its buffers to the host, runs
// the MPI collective there and copies the result back. Synchronous and slower than NCCL; there for
// machines where NCCL is unavailable or misbehaves.
#pragma once
#include <memory>

#include "engine/backend/backend.h"
#include "engine/comm/comm.h"

namespace zt {

std::unique_ptr<Comm> make_host_staged_comm(std::unique_ptr<Comm> host_comm, Backend& device);

}  // namespace zt
