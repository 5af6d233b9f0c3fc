// Communicators for device memory, built over the ranks of the topology's host (MPI) groups.
#pragma once
#include <memory>
#include <string>

#include "engine/comm/topology.h"
#include "engine/core/run_choices.h"

namespace zt {

class Backend;

// For a device backend: replaces the host (MPI) groups by device communicators. backend "nccl"
// or "auto" (when built with NCCL) -> NCCL on the backend's stream (libztrain_nccl.so); "mpi" ->
// MPI with host staging. No-op for host backends and single-rank jobs.
// An NCCL communicator over the ranks of `mpi_comm` (an MPI_Comm), whose collectives follow the
// work of `stream` (a cudaStream_t; null: the legacy stream). Loads libztrain_nccl.so (next to
// the executable, or ZTRAIN_NCCL_PLUGIN); RuntimeFailure when it or NCCL is unavailable.
std::unique_ptr<Comm> make_nccl_comm(void* mpi_comm, const std::string& name, double timeout_s, void* stream);

// Also, whatever the backend and world size: a group of one becomes a self communicator that
// copies with the backend (on the device), and on the CPU backend the MPI groups hold host access
// during their calls (Backend::begin_host_access; it matters in guarded-memory mode).
void attach_device_comms(Topology& t, CommBackendChoice backend, Backend& device, double timeout_s);

}  // namespace zt
