// The entry point of libztrain_nccl.so: NCCL communicators as a plugin, loaded by
// device_comms.cpp only when a multi-rank GPU job wants them (CPU runs never load NCCL).
// C linkage; errors come back as messages.
#include <mpi.h>

#include <cstdio>
#include <exception>

#include "engine/comm/comm_nccl.h"

extern "C" zt::Comm* zt_make_nccl_comm(void* mpi_comm, const char* name, double timeout_s, void* stream,
                                        char* err, size_t len) {
  try {
    return zt::make_nccl_comm(static_cast<MPI_Comm>(mpi_comm), name, timeout_s, stream).release();
  } catch (const std::exception& e) {
    if (err && len) std::snprintf(err, len, "%s", e.what());
    return nullptr;
  }
}
