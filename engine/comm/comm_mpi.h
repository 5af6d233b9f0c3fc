// MPI implementation of Comm over host memory (non-blocking MPI collectives + polled wait with a
// timeout that aborts the job).
#pragma once
#include <mpi.h>

#include <memory>
#include <string>

#include "engine/comm/comm.h"

namespace zt {

// Takes ownership of `comm` (freed on destruction unless it is MPI_COMM_WORLD).
std::unique_ptr<Comm> make_mpi_comm(MPI_Comm comm, const std::string& name, double timeout_s);

}  // namespace zt
